//! CPython 3.8 layout (x86_64, default build).
//!
//! Measured with offsetof()/sizeof() against the headers (internal ones included) of a pyenv
//! 3.8.18 install. `f_lasti` is a byte offset and lines come from `co_lnotab`. The GIL and the
//! collector's state are the runtime's (`_PyRuntime.ceval.gil`, `_PyRuntime.gc`).

use super::frame_objects::{
    frame_model, frame_object, thread_names, thread_state, BYTES, PYOBJECT, UNICODE,
};
use crate::offsets::*;

pub(super) const OFFSETS: Offsets = Offsets {
    version: PythonVersion::new(3, 8, 0),
    free_threaded: false,
    runtime_state: RuntimeStateOffsets {
        size: 1464,
        interpreters_head: 32,
    },
    interpreter_state: InterpreterStateOffsets {
        size: 2720,
        id: 16,
        next: 0,
        threads_head: 8,
        gc: 0, // in the runtime: `gc.base`
        code_object_generation: None,
        sysdict: Some(72),
    },
    thread_state: thread_state(264, 176),
    interpreter_frame: frame_object(368, 104),
    code_object: CodeObjectOffsets {
        size: 176,
        bytecode: BytecodeLayout::Object { co_code: 48 },
        filename: 104,
        name: 112,
        qualname: 112,  // no `co_qualname` before 3.11
        linetable: 120, // `co_lnotab`
        firstlineno: 40,
        co_tlbc: None,
    },
    pyobject: PYOBJECT,
    bytes_object: BYTES,
    unicode_object: UNICODE,
    gc: GcOffsets {
        base: GcBase::Runtime(344),
        collecting: 200,
        frame: None,
    },
    gil: GilLocation::Runtime {
        locked: 1168,
        holder: 1160,
    },
    frame: frame_model(InstrPointer::LastiBytes, LineTableFormat::Lnotab),
    thread_names: Some(thread_names(56, 872)),
    coroutines: None,
};
