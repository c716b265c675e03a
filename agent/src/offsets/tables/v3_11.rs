//! CPython 3.11 layout (x86_64, default build).
//!
//! Measured with offsetof()/sizeof() against the internal headers of 3.11.2 (Debian bookworm
//! `libpython3.11-dev`) and 3.11.7 (pyenv); both give these numbers. 3.11 has no
//! `_Py_DebugOffsets`; the current frame is reached through `tstate->cframe->current_frame`,
//! and the IP field is `prev_instr` (last started instruction).

use crate::offsets::*;

pub(super) const OFFSETS: Offsets = Offsets {
    version: PythonVersion::new(3, 11, 0),
    free_threaded: false,
    runtime_state: RuntimeStateOffsets {
        size: 166688,
        interpreters_head: 40,
    },
    interpreter_state: InterpreterStateOffsets {
        size: 107752,
        id: 48,
        next: 0,
        threads_head: 16,
        gc: 648,
        code_object_generation: None,
        sysdict: None,
    },
    thread_state: ThreadStateOffsets {
        size: 360,
        next: 8,
        interp: 16,
        current_frame: 56, // `cframe` pointer
        cframe_current_frame: Some(8),
        thread_id: 152,
        native_thread_id: NativeThreadId::Field(160),
        base_frame: None,
        last_profiled_frame: None,
        last_profiled_frame_seq: None,
    },
    interpreter_frame: InterpreterFrameOffsets {
        size: 80,
        previous: 48,
        executable: 32, // `f_code`
        instr_ptr: 56,  // `prev_instr`
        owner: Some(69),
        tlbc_index: None,
    },
    code_object: CodeObjectOffsets {
        bytecode: BytecodeLayout::Inline {
            ob_size: 16,
            co_code_adaptive: 184,
        },
        size: 192,
        filename: 112,
        name: 120,
        qualname: 128,
        linetable: 136,
        firstlineno: 72,
        co_tlbc: None,
    },
    pyobject: PyObjectOffsets {
        size: 16,
        ob_type: 8,
    },
    bytes_object: BytesObjectOffsets {
        ob_size: 16,
        ob_sval: 32,
    },
    unicode_object: UnicodeObjectOffsets {
        state: 32,
        length: 16,
        // 3.11's PyASCIIObject still has the `wstr` pointer: 48 bytes; compact non-ASCII 72.
        asciiobject_size: 48,
        compactunicodeobject_size: 72,
        state_bits: UnicodeStateBits {
            kind_shift: 2,
            compact_bit: 5,
            ascii_bit: 6,
        },
    },
    gc: GcOffsets {
        base: GcBase::Interpreter,
        collecting: 200,
        frame: None,
    }, // interp +848 = gc (648) + 200
    // One GIL per runtime: `_PyRuntime.ceval.gil.locked` / `.last_holder`.
    gil: GilLocation::Runtime {
        locked: 376,
        holder: 368,
    },
    frame: FrameModel {
        heap_frames: false,
        ip: InstrPointer::Address,
        line_table: LineTableFormat::Locations,
        ip_is_prev_instr: true,
        executable_tag_mask: 0,
        entry_owner: None,
        generator_owner: 1,
        is_entry: Some(68),
    },
    // Thread names: offsetof() against the 3.11.7 pyenv headers, then read back with ctypes in
    // the running 3.11.2 and 3.11.7 interpreters: `id(sys.modules)` is at `modules` of the
    // interpreter state, and every `threading.Thread`'s `_name` comes out through these offsets.
    thread_names: Some(ThreadNameOffsets {
        imports_modules: 888,
        md_dict: 16,
        dict_object: DictObjectOffsets {
            ma_keys: 32,
            ma_values: 40,
        },
        dict_keys: DICT_KEYS,
        dict_values: 0,
        tp_flags: 168,
        tp_basicsize: 32,
        ht_cached_keys: 872,
        long_object: LongObjectOffsets {
            lv_tag: 16,
            ob_digit: 24,
            format: LongFormat::SignedSize,
        },
        managed_dict: ManagedDict::ValuesOrDict {
            values_before: 32,
            dict_before: 24,
        },
    }),
    coroutines: None,
};
