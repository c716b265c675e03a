//! CPython 3.9 layout (x86_64, default build).
//!
//! Measured with offsetof()/sizeof() against the headers (internal ones included) of a pyenv
//! 3.9.18 install. `f_lasti` is a byte offset and lines come from `co_lnotab`. The collector's
//! state moved into the interpreter in 3.9; the GIL is still the runtime's.

use super::frame_objects::{
    frame_model, frame_object, thread_names, thread_state, BYTES, PYOBJECT, UNICODE,
};
use crate::offsets::*;

pub(super) const OFFSETS: Offsets = Offsets {
    version: PythonVersion::new(3, 9, 0),
    free_threaded: false,
    runtime_state: RuntimeStateOffsets {
        size: 656,
        interpreters_head: 32,
    },
    interpreter_state: InterpreterStateOffsets {
        size: 5656,
        id: 24,
        next: 0,
        threads_head: 8,
        gc: 616,
        code_object_generation: None,
        sysdict: Some(872),
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
        base: GcBase::Interpreter,
        collecting: 200,
        frame: None,
    },
    gil: GilLocation::Runtime {
        locked: 368,
        holder: 360,
    },
    frame: frame_model(InstrPointer::LastiBytes, LineTableFormat::Lnotab),
    thread_names: Some(thread_names(856, 864)),
    coroutines: None,
};
