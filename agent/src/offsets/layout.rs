//! The offsets of the structs every stack walk reads: the runtime, interpreter and thread states,
//! frames, code objects and the strings they name, grouped and named as `_Py_DebugOffsets` does.

/// `_PyRuntimeState` fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuntimeStateOffsets {
    /// sizeof(_PyRuntimeState) (informational: differs between patch releases)
    pub size: u64,
    /// `interpreters.head`: first (newest) `PyInterpreterState*`
    pub interpreters_head: u64,
}
/// `PyInterpreterState` fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InterpreterStateOffsets {
    /// sizeof(PyInterpreterState)
    pub size: u64,
    /// int64 interpreter id
    pub id: u64,
    /// next (older) interpreter
    pub next: u64,
    /// `threads.head`: newest thread state
    pub threads_head: u64,
    /// embedded `_gc_runtime_state`
    pub gc: u64,
    /// u64 bumped on every code-object deallocation (3.14+)
    pub code_object_generation: Option<u64>,
}

/// `PyThreadState` fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadStateOffsets {
    /// sizeof(PyThreadState)
    pub size: u64,
    /// next (older) thread state
    pub next: u64,
    /// owning interpreter
    pub interp: u64,
    /// 3.13+: `current_frame`. 3.11/3.12: the `cframe` pointer, see [`Self::cframe_current_frame`].
    pub current_frame: u64,
    /// 3.11/3.12 only: offset of `current_frame` inside the `_PyCFrame` that `current_frame`
    /// points to (one more indirection).
    pub cframe_current_frame: Option<u64>,
    /// pthread_t of the thread
    pub thread_id: u64,
    /// gettid() of the thread, in the target's PID namespace
    pub native_thread_id: u64,
    /// 3.15: the bottom sentinel frame; a complete walk ends there
    pub base_frame: Option<u64>,
    /// 3.15: frame-cache anchor
    pub last_profiled_frame: Option<u64>,
    /// 3.15: anchor sequence, +1 each time the interpreter moves the anchor
    pub last_profiled_frame_seq: Option<u64>,
}

/// `_PyInterpreterFrame` fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InterpreterFrameOffsets {
    /// sizeof(_PyInterpreterFrame)
    pub size: u64,
    /// calling frame
    pub previous: u64,
    /// `f_code` (≤3.12) / `f_executable` (3.13+, tagged from 3.14)
    pub executable: u64,
    /// `prev_instr` (≤3.12) / `instr_ptr` (3.13+)
    pub instr_ptr: u64,
    /// `owner` (1 byte)
    pub owner: u64,
    /// free-threaded 3.14+: index into `co_tlbc` (int32)
    pub tlbc_index: Option<u64>,
}

/// `PyCodeObject` fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CodeObjectOffsets {
    /// header size (informational)
    pub size: u64,
    /// `ob_size`: bytecode length in code units
    pub ob_size: u64,
    /// `co_filename` (str)
    pub filename: u64,
    /// `co_name` (str)
    pub name: u64,
    /// `co_qualname` (str)
    pub qualname: u64,
    /// `co_linetable` (bytes)
    pub linetable: u64,
    /// `co_firstlineno` (int)
    pub firstlineno: u64,
    /// inline bytecode start
    pub co_code_adaptive: u64,
    /// free-threaded 3.14+: `_PyCodeArray*` of thread-local bytecode copies
    pub co_tlbc: Option<u64>,
}

/// `PyObject` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PyObjectOffsets {
    /// sizeof(PyObject): 16, or 32 in free-threaded builds
    pub size: u64,
    /// `ob_type`
    pub ob_type: u64,
}

/// `PyBytesObject` fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BytesObjectOffsets {
    /// length in bytes
    pub ob_size: u64,
    /// data start
    pub ob_sval: u64,
}

/// Bit positions inside `PyASCIIObject.state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnicodeStateBits {
    /// shift of the 3-bit `kind` (1, 2 or 4 bytes per code point)
    pub kind_shift: u32,
    /// bit of `compact`
    pub compact_bit: u32,
    /// bit of `ascii`
    pub ascii_bit: u32,
}

/// `PyUnicodeObject` fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnicodeObjectOffsets {
    /// 4-byte `state` bitfield
    pub state: u64,
    /// length in code points
    pub length: u64,
    /// data start of a compact ASCII string
    pub asciiobject_size: u64,
    /// data start of a compact non-ASCII string
    pub compactunicodeobject_size: u64,
    /// layout of `state`
    pub state_bits: UnicodeStateBits,
}

/// `_gc_runtime_state` fields (relative to `interpreter_state.gc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GcOffsets {
    /// int, non-zero while a collection runs
    pub collecting: u64,
    /// 3.15: the frame that was current when the collection started
    pub frame: Option<u64>,
}

/// How frames behave, as data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameModel {
    /// The IP field points at the last *started* instruction (`prev_instr`, ≤3.12) rather than
    /// the current one; a frame that has not started holds `base - 1`.
    pub ip_is_prev_instr: bool,
    /// Bits to clear from `f_executable` (3.14+: `_PyStackRef` tags).
    pub executable_tag_mask: u64,
    /// Owner value of frames that mark a C boundary and are not reported (3 in 3.12+).
    pub entry_owner: Option<u8>,
    /// Owner value of generator frames.
    pub generator_owner: u8,
    /// 3.11: `is_entry` bool on the first Python frame of each C-level evaluation.
    pub is_entry: Option<u64>,
}
