//! Offsets stage: CPython version → the byte layout of every struct the unwinder reads.
//!
//! In: the first bytes of `_PyRuntime` (3.13+: `_Py_DebugOffsets`) or the exported `Py_Version`
//! (3.11/3.12). Out: one [`Offsets`] value, plain data grouped and named as `_Py_DebugOffsets`
//! groups them, so a grep in CPython's source finds each field. This is the only module that
//! compares version numbers: behaviour differences (how the IP is stored, which frame owner marks
//! a C boundary, tag bits) are fields too, so `unwind` and `symbolize` never ask "which version?".
//! Offsets read from a target are untrusted and checked once by [`Offsets::validate`].//!
//! The parts: `layout` holds the offsets of the interpreter's own structs (runtime, interpreter,
//! thread, frame, code and string objects), `gil` where the GIL is, `thread_names` what reading
//! `threading.Thread` names needs, `validate` the checks of an untrusted table; `debug_offsets` reads
//! 3.13+ tables and `tables` holds the built-in 3.11/3.12 layouts.

mod asyncio;
mod debug_offsets;
mod gil;
mod layout;
mod tables;
mod thread_names;
mod validate;
mod version;

pub use asyncio::{
    AsyncioDebugOffsets, AsyncioUnsupported, CoroutineOffsets, CoroutineState, FrameStateCodes,
    ASYNCIO_DEBUG_LEN, TPFLAGS_LONG_SUBCLASS, TPFLAGS_UNICODE_SUBCLASS,
};
pub use debug_offsets::{
    debug_offsets_len, parse_debug_offsets, DEBUG_OFFSETS_COOKIE, DEBUG_OFFSETS_PREFIX_LEN,
};
pub use gil::{GilBase, GilLocation, GIL_BYTES_BEFORE_LOCKED, GIL_WAIT_BYTES};
pub use layout::{
    BytecodeLayout, BytesObjectOffsets, CodeObjectOffsets, Evaluations, FrameModel, GcBase,
    GcOffsets, InstrPointer, InterpreterFrameOffsets, InterpreterStateOffsets, LineTableFormat,
    NativeThreadId, PyObjectOffsets, RuntimeStateOffsets, ThreadStateOffsets, UnicodeObjectOffsets,
    UnicodeStateBits,
};
pub use tables::{builtin_offsets, named_release, NamedRelease, UNLABELLED_MINORS};
pub use thread_names::{
    DictKeysHeader, DictKeysOffsets, DictObjectOffsets, LongFormat, LongObjectOffsets, ManagedDict,
    ThreadNameOffsets, DICT_KEYS, DICT_KEYS_GENERAL, DICT_KEYS_SLOTS, DICT_KEYS_SPLIT,
    DICT_KEYS_UNICODE, TPFLAGS_INLINE_VALUES, TPFLAGS_MANAGED_DICT,
};
pub use version::PythonVersion;

/// What the one-line refusal of another version says.
pub const SUPPORTED_RANGE: &str = "pyagent reads CPython 3.6 to 3.15";

/// Where the layout of a runtime comes from, by the version its `Py_Version` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayoutSource {
    /// The built-in table of that version (3.11, 3.12).
    BuiltIn,
    /// `_Py_DebugOffsets` at the start of `_PyRuntime` (3.13+): a runtime without its cookie
    /// is not initialised yet.
    DebugOffsets,
}

impl LayoutSource {
    /// The source of `version`'s layout.
    pub fn of(version: PythonVersion) -> LayoutSource {
        if version.minor_version() >= (3, 13) {
            LayoutSource::DebugOffsets
        } else {
            LayoutSource::BuiltIn
        }
    }
}

/// Why a layout could not be produced or trusted.
#[derive(Debug, thiserror::Error)]
pub enum OffsetsError {
    /// The target runs a CPython minor version we have no layout for.
    #[error("CPython {0} is not supported: {SUPPORTED_RANGE}")]
    Unsupported(PythonVersion),
    /// The target's file names a CPython release we have no layout for (2.7, 3.5): known by
    /// name only, which says no patch level.
    #[error("CPython {0}.{1} is not supported: {SUPPORTED_RANGE}")]
    UnsupportedRelease(u8, u8),
    /// Pre-release layouts change between alphas/betas; only exact known ones are accepted.
    #[error(
        "unsupported CPython pre-release {0}: layouts are not frozen before the final release"
    )]
    PreRelease(PythonVersion),
    /// The `_Py_DebugOffsets` cookie is not there.
    #[error("no `xdebugpy` cookie at the start of _PyRuntime")]
    NoCookie,
    /// The debug-offsets table is shorter than its version requires.
    #[error("debug offsets table truncated: {got} bytes, need {need}")]
    Truncated {
        /// bytes available
        got: usize,
        /// bytes the layout needs
        need: usize,
    },
    /// A value of the table fails a sanity check (out of bounds, misaligned).
    #[error("implausible debug offset {field} = {value} (limit {limit})")]
    Implausible {
        /// `group.field` as CPython names it
        field: &'static str,
        /// the value read
        value: u64,
        /// what it was checked against
        limit: u64,
    },
}
/// Everything the unwinder needs to know about one target's CPython build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offsets {
    /// exact version of the target
    pub version: PythonVersion,
    /// `--disable-gil` build
    pub free_threaded: bool,
    /// `_PyRuntimeState`
    pub runtime_state: RuntimeStateOffsets,
    /// `PyInterpreterState`
    pub interpreter_state: InterpreterStateOffsets,
    /// `PyThreadState`
    pub thread_state: ThreadStateOffsets,
    /// `_PyInterpreterFrame`
    pub interpreter_frame: InterpreterFrameOffsets,
    /// `PyCodeObject`
    pub code_object: CodeObjectOffsets,
    /// `PyObject`
    pub pyobject: PyObjectOffsets,
    /// `PyBytesObject`
    pub bytes_object: BytesObjectOffsets,
    /// `PyUnicodeObject`
    pub unicode_object: UnicodeObjectOffsets,
    /// `_gc_runtime_state`
    pub gc: GcOffsets,
    /// where the GIL state is
    pub gil: GilLocation,
    /// frame semantics
    pub frame: FrameModel,
    /// for reading `threading.Thread` names (`None`: names come from /proc only)
    pub thread_names: Option<ThreadNameOffsets>,
    /// for reading asyncio tasks' coroutines (`None` before 3.14: no task stacks)
    pub coroutines: Option<CoroutineOffsets>,
}
/// Largest header prefix we read of a frame, thread state or code object.
pub const MAX_HEADER_READ: u64 = 4096;

impl Offsets {
    /// Bytes of a frame the unwinder reads in one go: every field it needs lies below this.
    pub fn frame_read_len(&self) -> usize {
        let f = &self.interpreter_frame;
        let mut end = [
            f.previous + 8,
            f.executable + 8,
            f.instr_ptr + 8,
            f.owner.map_or(0, |o| o + 1),
        ]
        .into_iter()
        .max()
        .unwrap_or(0);
        if let Some(t) = f.tlbc_index {
            end = end.max(t + 4);
        }
        if let Some(e) = self.frame.is_entry {
            end = end.max(e + 1);
        }
        end as usize
    }

    /// Bytes of a thread state the unwinder reads in one go.
    pub fn thread_read_len(&self) -> usize {
        let t = &self.thread_state;
        let native = match t.native_thread_id {
            NativeThreadId::Field(off) => off,
            NativeThreadId::InPthread { .. } => 0,
        };
        let mut end = [t.next, t.current_frame, t.thread_id, native, t.interp]
            .into_iter()
            .max()
            .unwrap_or(0)
            + 8;
        for off in [
            t.base_frame,
            t.last_profiled_frame,
            t.last_profiled_frame_seq,
        ]
        .into_iter()
        .flatten()
        {
            end = end.max(off + 8);
        }
        match self.gil {
            GilLocation::ThreadFlag { holds_gil, .. } => end = end.max(holds_gil + 4),
            GilLocation::Disabled { thread_state } => end = end.max(thread_state + 4),
            GilLocation::Runtime { .. }
            | GilLocation::Interpreter { .. }
            | GilLocation::Statics { .. }
            | GilLocation::Unknown => {}
        }
        end as usize
    }

    /// Bytes of a code object the symbolizer reads in one go.
    pub fn code_read_len(&self) -> usize {
        let c = &self.code_object;
        let length = match c.bytecode {
            BytecodeLayout::Inline { ob_size, .. } => ob_size,
            BytecodeLayout::Object { co_code } => co_code,
        };
        let mut end = [c.filename, c.name, c.qualname, c.linetable, length]
            .into_iter()
            .max()
            .unwrap_or(0)
            + 8;
        end = end.max(c.firstlineno + 4).max(self.pyobject.ob_type + 8);
        if let Some(t) = c.co_tlbc {
            end = end.max(t + 8);
        }
        end as usize
    }

    /// True when the 3.15 frame-cache protocol (`last_profiled_frame` + sequence) is available.
    pub fn has_frame_cache_anchor(&self) -> bool {
        self.thread_state.last_profiled_frame.is_some()
            && self.thread_state.last_profiled_frame_seq.is_some()
    }
}
