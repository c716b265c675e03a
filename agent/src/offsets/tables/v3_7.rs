//! CPython 3.7 layout (x86_64, default build).
//!
//! Measured with offsetof()/sizeof() against the headers (`internal/` included) of a pyenv
//! 3.7.16 install. 3.7 is the first with `_PyRuntime`; `f_lasti` is a byte offset and lines come
//! from `co_lnotab`. The GIL and the collector's state are the runtime's.

use super::frame_objects::{
    frame_model, frame_object, thread_names, thread_state, BYTES, PYOBJECT, UNICODE,
};
use crate::offsets::*;

pub(super) const OFFSETS: Offsets = Offsets {
    version: PythonVersion::new(3, 7, 0),
    free_threaded: false,
    runtime_state: RuntimeStateOffsets {
        size: 1520,
        interpreters_head: 24,
    },
    interpreter_state: InterpreterStateOffsets {
        size: 2568,
        id: 16,
        next: 0,
        threads_head: 8,
        gc: 0, // in the runtime: `gc.base`
        code_object_generation: None,
        sysdict: Some(56),
    },
    thread_state: thread_state(280, 176),
    interpreter_frame: frame_object(368, 104),
    code_object: CodeObjectOffsets {
        size: 144,
        bytecode: BytecodeLayout::Object { co_code: 40 },
        filename: 96,
        name: 104,
        qualname: 104,  // no `co_qualname` before 3.11
        linetable: 112, // `co_lnotab`
        firstlineno: 36,
        co_tlbc: None,
    },
    pyobject: PYOBJECT,
    bytes_object: BYTES,
    unicode_object: UNICODE,
    gc: GcOffsets {
        base: GcBase::Runtime(320),
        collecting: 312,
        frame: None,
    },
    gil: GilLocation::Runtime {
        locked: 1280,
        holder: 1272,
    },
    frame: frame_model(InstrPointer::LastiBytes, LineTableFormat::Lnotab),
    thread_names: Some(thread_names(40, 856)),
    coroutines: None,
};
