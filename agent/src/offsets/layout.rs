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
    /// 3.6–3.10: `sysdict`, the `sys` module's dict, whose `hexversion` is the exact version
    /// (those versions export no `Py_Version`)
    pub sysdict: Option<u64>,
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
    /// where the thread's gettid() (in the target's PID namespace) is
    pub native_thread_id: NativeThreadId,
    /// 3.15: the bottom sentinel frame; a complete walk ends there
    pub base_frame: Option<u64>,
    /// 3.15: frame-cache anchor
    pub last_profiled_frame: Option<u64>,
    /// 3.15: anchor sequence, +1 each time the interpreter moves the anchor
    pub last_profiled_frame_seq: Option<u64>,
}

/// `_PyInterpreterFrame` fields (3.11+), or the same fields of a `PyFrameObject` (3.6–3.10:
/// `f_back`, `f_code`, `f_lasti`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InterpreterFrameOffsets {
    /// sizeof(_PyInterpreterFrame)
    pub size: u64,
    /// calling frame
    pub previous: u64,
    /// `f_code` (≤3.12) / `f_executable` (3.13+, tagged from 3.14)
    pub executable: u64,
    /// `prev_instr` (3.11/3.12) / `instr_ptr` (3.13+) / `f_lasti` (3.6–3.10; see
    /// [`FrameModel::ip`])
    pub instr_ptr: u64,
    /// `owner` (1 byte; 3.11+: a `PyFrameObject` has none)
    pub owner: Option<u64>,
    /// free-threaded 3.14+: index into `co_tlbc` (int32)
    pub tlbc_index: Option<u64>,
}

/// `PyCodeObject` fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CodeObjectOffsets {
    /// header size (informational)
    pub size: u64,
    /// where the bytecode is and how long it is
    pub bytecode: BytecodeLayout,
    /// `co_filename` (str)
    pub filename: u64,
    /// `co_name` (str)
    pub name: u64,
    /// `co_qualname` (str); `co_name` before 3.11, whose code objects hold no qualified name
    pub qualname: u64,
    /// `co_linetable` (bytes); `co_lnotab` before 3.10 (format: [`FrameModel::line_table`])
    pub linetable: u64,
    /// `co_firstlineno` (int)
    pub firstlineno: u64,
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

/// `_gc_runtime_state` fields (relative to where [`GcOffsets::base`] says the state is).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GcOffsets {
    /// the struct the collector's state is embedded in: the interpreter (`interpreter_state.gc`,
    /// 3.9+) or the runtime (its offset there is `gc_in_runtime`, 3.7/3.8)
    pub base: GcBase,
    /// int, non-zero while a collection runs
    pub collecting: u64,
    /// 3.15: the frame that was current when the collection started
    pub frame: Option<u64>,
}

/// Where a thread's kernel thread id is found from its thread state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NativeThreadId {
    /// 3.11+: the thread state's own `native_thread_id` field (offset).
    Field(u64),
    /// 3.6–3.10: the C library's thread descriptor, which `thread_id` (a `pthread_t`) points
    /// to, holds the tid at `offset`. The C library's layout is not CPython's: the offset is
    /// found in each process at discovery (0 until then, which reads as no thread).
    InPthread {
        /// offset of the tid inside the thread descriptor
        offset: u64,
    },
}

/// Where a code object's bytecode lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BytecodeLayout {
    /// 3.11+: inside the code object, from `co_code_adaptive`; `ob_size` is its length in code
    /// units.
    Inline {
        /// `ob_size`
        ob_size: u64,
        /// start of the bytecode
        co_code_adaptive: u64,
    },
    /// 3.6–3.10: a bytes object of its own (`co_code`), whose length is in bytes.
    Object {
        /// `co_code` (bytes)
        co_code: u64,
    },
}

/// What the interpreter's garbage-collector state is embedded in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GcBase {
    /// `PyInterpreterState` at `interpreter_state.gc` (3.9+)
    Interpreter,
    /// `_PyRuntimeState` at this offset (3.7, 3.8)
    Runtime(u64),
    /// nothing: [`GcOffsets::collecting`] is the process's address of 3.6's static
    /// `collecting` (found by its symbol at discovery)
    Process,
    /// a build whose collector statics have no names to be found by (a stripped 3.6): no
    /// collection is seen
    Unknown,
}

/// What a frame's instruction field holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstrPointer {
    /// A pointer into the bytecode (3.11+).
    Address,
    /// `int f_lasti`: the byte offset of the last started instruction, -1 before the first
    /// (3.6–3.9).
    LastiBytes,
    /// `int f_lasti` in code units (3.10).
    LastiUnits,
}

/// The format of the code object's line table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineTableFormat {
    /// 3.11+ `co_linetable`: location entries of 1–8 code units.
    Locations,
    /// 3.10 `co_linetable`: (byte delta, signed line delta) pairs, -128 for "no line".
    LineDeltas,
    /// 3.6–3.9 `co_lnotab`: (byte delta, signed line delta) pairs, increments only.
    Lnotab,
}

/// How a stack's Python frames divide into the C-level evaluations that run them, each of which
/// is one eval-loop frame of the native stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Evaluations {
    /// 3.11+: an evaluation runs frames until the next C boundary, which the resolver marks
    /// with `<native>`.
    AtMarkers,
    /// 3.6–3.10: every Python frame is an evaluation of its own.
    EachFrame,
}

/// How frames behave, as data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameModel {
    /// 3.6–3.10: every frame is a `PyFrameObject` of its own on the heap, never next to its
    /// caller (3.11+ keep frames in per-thread data-stack chunks, callee above caller).
    pub heap_frames: bool,
    /// What the instruction field holds.
    pub ip: InstrPointer,
    /// The format of `co_linetable` / `co_lnotab`.
    pub line_table: LineTableFormat,
    /// The IP field points at the last *started* instruction (`prev_instr`, ≤3.12) rather than
    /// the current one; a frame that has not started holds `base - 1`.
    pub ip_is_prev_instr: bool,
    /// Bits to clear from `f_executable` (3.14+: `_PyStackRef` tags).
    pub executable_tag_mask: u64,
    /// Owner value of frames that mark a C boundary and are not reported (3 in 3.12+).
    pub entry_owner: Option<u8>,
    /// Owner value of generator frames (unused where frames have no owner).
    pub generator_owner: u8,
    /// 3.11: `is_entry` bool on the first Python frame of each C-level evaluation.
    pub is_entry: Option<u64>,
}

impl FrameModel {
    /// How its stacks divide into C-level evaluations.
    pub fn evaluations(&self) -> Evaluations {
        if self.heap_frames {
            Evaluations::EachFrame
        } else {
            Evaluations::AtMarkers
        }
    }

    /// The instruction a frame's raw instruction field `raw` (the 8 bytes at `instr_ptr`) names:
    /// a bytecode address (3.11+), or a byte offset into the bytecode (3.6–3.10), wrapping below
    /// zero for a frame that has not started.
    pub fn instruction(&self, raw: u64) -> u64 {
        let lasti = i64::from(raw as u32 as i32);
        match self.ip {
            InstrPointer::Address => raw,
            InstrPointer::LastiBytes => lasti as u64,
            InstrPointer::LastiUnits => lasti.wrapping_mul(2) as u64,
        }
    }
}
