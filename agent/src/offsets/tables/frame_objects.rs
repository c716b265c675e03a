//! What the layouts of 3.6–3.10 share (x86_64, default build): frames are `PyFrameObject`s on
//! the heap (`f_back` at 24, `f_code` at 32 in every one of them), the thread state names its
//! top frame directly (`tstate->frame` at 24) and holds a `pthread_t` but no kernel thread id,
//! code objects keep their bytecode in a `bytes` object of its own, and strings still carry
//! 3.11's `wstr` pointer. Each version's own numbers are in its `v3_N.rs`.

use crate::offsets::*;

/// `PyObject`: refcount, type.
pub(super) const PYOBJECT: PyObjectOffsets = PyObjectOffsets {
    size: 16,
    ob_type: 8,
};

/// `PyBytesObject`: `ob_size`, then the hash, then the bytes.
pub(super) const BYTES: BytesObjectOffsets = BytesObjectOffsets {
    ob_size: 16,
    ob_sval: 32,
};

/// PEP 393 strings, with the `wstr` pointer (removed in 3.12).
pub(super) const UNICODE: UnicodeObjectOffsets = UnicodeObjectOffsets {
    state: 32,
    length: 16,
    asciiobject_size: 48,
    compactunicodeobject_size: 72,
    state_bits: UnicodeStateBits {
        kind_shift: 2,
        compact_bit: 5,
        ascii_bit: 6,
    },
};

/// A `PyFrameObject` of `size` bytes whose `int f_lasti` is at `f_lasti`.
pub(super) const fn frame_object(size: u64, f_lasti: u64) -> InterpreterFrameOffsets {
    InterpreterFrameOffsets {
        size,
        previous: 24,   // `f_back`
        executable: 32, // `f_code`
        instr_ptr: f_lasti,
        owner: None,
        tlbc_index: None,
    }
}

/// A thread state of `size` bytes whose `pthread_t thread_id` is at `thread_id`. The kernel
/// thread id is in the C library's thread descriptor, found per process.
pub(super) const fn thread_state(size: u64, thread_id: u64) -> ThreadStateOffsets {
    ThreadStateOffsets {
        size,
        next: 8,
        interp: 16,
        current_frame: 24, // `frame`
        cframe_current_frame: None,
        thread_id,
        native_thread_id: NativeThreadId::InPthread { offset: 0 },
        base_frame: None,
        last_profiled_frame: None,
        last_profiled_frame_seq: None,
    }
}

/// How frames of these versions behave: the instruction is `f_lasti` (`ip`), the last one
/// started, and the line table is in `line_table`'s format. No frame marks a C boundary: each
/// Python call has its own C-level evaluation.
pub(super) const fn frame_model(ip: InstrPointer, line_table: LineTableFormat) -> FrameModel {
    FrameModel {
        heap_frames: true,
        ip,
        line_table,
        ip_is_prev_instr: true,
        executable_tag_mask: 0,
        entry_owner: None,
        generator_owner: 0,
        is_entry: None,
    }
}

/// What reading thread names needs in these versions, whose `sys.modules` is at
/// `imports_modules` in the interpreter state and whose heap types keep their instances' shared
/// keys at `ht_cached_keys`: dicts with `dk_size` ([`DICT_KEYS_SLOTS`]), ints with a signed
/// `ob_size`, and instance dicts at `tp_dictoffset` (at 288 in `PyTypeObject` of each).
pub(super) const fn thread_names(imports_modules: u64, ht_cached_keys: u64) -> ThreadNameOffsets {
    ThreadNameOffsets {
        imports_modules,
        md_dict: 16,
        dict_object: DictObjectOffsets {
            ma_keys: 32,
            ma_values: 40,
        },
        dict_keys: DICT_KEYS_SLOTS,
        dict_values: 0,
        tp_flags: 168,
        tp_basicsize: 32,
        ht_cached_keys,
        long_object: LongObjectOffsets {
            lv_tag: 16,
            ob_digit: 24,
            format: LongFormat::SignedSize,
        },
        managed_dict: ManagedDict::AtDictOffset { tp_dictoffset: 288 },
    }
}
