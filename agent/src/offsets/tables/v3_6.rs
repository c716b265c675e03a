//! CPython 3.6 layout (x86_64, default build).
//!
//! Measured with offsetof()/sizeof() against the headers of a pyenv 3.6.15 install. 3.6 has no
//! `_PyRuntime`: the interpreter list starts at the static `interp_head`, which discovery takes
//! as the runtime's address (so the list head is at offset 0), and the GIL (`gil_locked`,
//! `gil_last_holder`, its mutexes and conditions) and the collector's `collecting` flag are
//! statics of their own, whose addresses discovery fills in from the object's symbols.
//! `f_lasti` is a byte offset and lines come from `co_lnotab`. Interpreters have no `id` yet.

use super::frame_objects::{
    frame_model, frame_object, thread_names, thread_state, BYTES, PYOBJECT, UNICODE,
};
use crate::offsets::*;

pub(super) const OFFSETS: Offsets = Offsets {
    version: PythonVersion::new(3, 6, 0),
    free_threaded: false,
    runtime_state: RuntimeStateOffsets {
        size: 8, // `interp_head` alone
        interpreters_head: 0,
    },
    interpreter_state: InterpreterStateOffsets {
        size: 120,
        id: 0, // no `id` before 3.7; nothing reads it
        next: 0,
        threads_head: 8, // `tstate_head`
        gc: 0,           // a static of its own
        code_object_generation: None,
        sysdict: Some(32),
    },
    // The thread state ends in the `co_extra` free functions (255 pointers).
    thread_state: thread_state(2272, 152),
    interpreter_frame: frame_object(384, 120),
    // Code objects did not change in 3.7.
    code_object: super::v3_7::OFFSETS.code_object,
    pyobject: PYOBJECT,
    bytes_object: BYTES,
    unicode_object: UNICODE,
    // Until discovery finds the statics by name, neither is known.
    gc: GcOffsets {
        base: GcBase::Unknown,
        collecting: 0,
        frame: None,
    },
    gil: GilLocation::Unknown,
    frame: frame_model(InstrPointer::LastiBytes, LineTableFormat::Lnotab),
    thread_names: Some(thread_names(16, 856)),
    coroutines: None,
};
