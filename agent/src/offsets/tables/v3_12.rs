//! CPython 3.12 layout (x86_64, default build).
//!
//! Measured with offsetof()/sizeof() against the internal headers of a pyenv 3.12.1 install
//! (no 3.12 source package exists in Debian). 3.12 has no `_Py_DebugOffsets`; the current frame
//! is reached through `tstate->cframe->current_frame`, the IP field is `prev_instr`, and C
//! boundaries are marked by entry frames with owner 3 (`FRAME_OWNED_BY_CSTACK`).

use crate::offsets::*;

pub(super) const OFFSETS: Offsets = Offsets {
    version: PythonVersion::new(3, 12, 0),
    free_threaded: false,
    runtime_state: RuntimeStateOffsets {
        size: 459944,
        interpreters_head: 40,
    },
    interpreter_state: InterpreterStateOffsets {
        size: 383552,
        id: 8,
        next: 0,
        threads_head: 72,
        gc: 112,
        code_object_generation: None,
        sysdict: None,
    },
    thread_state: ThreadStateOffsets {
        size: 288,
        next: 8,
        interp: 16,
        current_frame: 56, // `cframe` pointer
        cframe_current_frame: Some(0),
        thread_id: 136,
        native_thread_id: NativeThreadId::Field(144),
        base_frame: None,
        last_profiled_frame: None,
        last_profiled_frame_seq: None,
    },
    interpreter_frame: InterpreterFrameOffsets {
        size: 80,
        previous: 8,
        executable: 0, // `f_code`
        instr_ptr: 56, // `prev_instr`
        owner: Some(70),
        tlbc_index: None,
    },
    code_object: CodeObjectOffsets {
        bytecode: BytecodeLayout::Inline {
            ob_size: 16,
            co_code_adaptive: 192,
        },
        size: 200,
        filename: 112,
        name: 120,
        qualname: 128,
        linetable: 136,
        firstlineno: 68,
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
        asciiobject_size: 40,
        compactunicodeobject_size: 56,
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
    }, // interp +312 = gc (112) + 200
    // The main interpreter's own `_gil` (1040): `last_holder` +8, `locked` +16.
    gil: GilLocation::Interpreter {
        locked: 1056,
        holder: 1048,
    },
    frame: FrameModel {
        heap_frames: false,
        ip: InstrPointer::Address,
        line_table: LineTableFormat::Locations,
        ip_is_prev_instr: true,
        executable_tag_mask: 0,
        entry_owner: Some(3),
        generator_owner: 1,
        is_entry: None,
    },
    // Thread names: offsetof() against the 3.12.1 pyenv headers, then read back with ctypes in
    // the running 3.12.1 interpreter: `id(sys.modules)` is at `imports.modules` of the interpreter
    // state, and every `threading.Thread`'s `_name` comes out through these offsets.
    thread_names: Some(ThreadNameOffsets {
        imports_modules: 944,
        md_dict: 16,
        dict_object: DictObjectOffsets {
            ma_keys: 32,
            ma_values: 40,
        },
        dict_keys: DICT_KEYS,
        dict_values: 0,
        tp_flags: 168,
        tp_basicsize: 32,
        ht_cached_keys: 880,
        long_object: LongObjectOffsets {
            lv_tag: 16,
            ob_digit: 24,
            format: LongFormat::LvTag,
        },
        managed_dict: ManagedDict::TaggedDictOrValues { before: 24 },
    }),
    coroutines: None,
};
