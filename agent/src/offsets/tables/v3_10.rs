//! CPython 3.10 layout (x86_64, default build).
//!
//! Measured with offsetof()/sizeof() against the headers (internal ones included) of a pyenv
//! 3.10.13 install. `f_lasti` counts code units (3.10 only), and `co_linetable` is 3.10's table
//! of (byte delta, line delta) pairs. The GIL and the collector's state are the runtime's and
//! the interpreter's, as in 3.9.

use super::frame_objects::{
    frame_model, frame_object, thread_names, thread_state, BYTES, PYOBJECT, UNICODE,
};
use crate::offsets::*;

pub(super) const OFFSETS: Offsets = Offsets {
    version: PythonVersion::new(3, 10, 0),
    free_threaded: false,
    runtime_state: RuntimeStateOffsets {
        size: 672,
        interpreters_head: 32,
    },
    interpreter_state: InterpreterStateOffsets {
        size: 113528,
        id: 24,
        next: 0,
        threads_head: 8,
        gc: 616,
        code_object_generation: None,
        sysdict: Some(872),
    },
    thread_state: thread_state(280, 176),
    interpreter_frame: frame_object(360, 96),
    code_object: CodeObjectOffsets {
        size: 176,
        bytecode: BytecodeLayout::Object { co_code: 48 },
        filename: 104,
        name: 112,
        qualname: 112, // no `co_qualname` before 3.11
        linetable: 120,
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
    frame: frame_model(InstrPointer::LastiUnits, LineTableFormat::LineDeltas),
    thread_names: Some(thread_names(856, 872)),
    coroutines: None,
};
