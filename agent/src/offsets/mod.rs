//! Offsets stage: CPython version → the byte layout of every struct the unwinder reads.
//!
//! In: the first bytes of `_PyRuntime` (3.13+: `_Py_DebugOffsets`) or the exported `Py_Version`
//! (3.11/3.12). Out: one [`Offsets`] value, plain data grouped and named as `_Py_DebugOffsets`
//! groups them, so a grep in CPython's source finds each field. This is the only module that
//! compares version numbers: behaviour differences (how the IP is stored, which frame owner marks
//! a C boundary, tag bits) are fields too, so `unwind` and `symbolize` never ask "which version?".
//! Offsets read from a target are untrusted and checked once by [`Offsets::validate`].

mod debug_offsets;
mod tables;
mod version;

pub use debug_offsets::{
    debug_offsets_len, parse_debug_offsets, DEBUG_OFFSETS_COOKIE, DEBUG_OFFSETS_PREFIX_LEN,
};
pub use tables::builtin_offsets;
pub use version::PythonVersion;

/// Why a layout could not be produced or trusted.
#[derive(Debug, thiserror::Error)]
pub enum OffsetsError {
    /// The target runs a CPython minor version we have no layout for.
    #[error("unsupported CPython version {0}")]
    Unsupported(PythonVersion),
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

/// `_PyRuntimeState` fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuntimeStateOffsets {
    /// sizeof(_PyRuntimeState) (informational: differs between patch releases)
    pub size: u64,
    /// `interpreters.head`: first (newest) `PyInterpreterState*`
    pub interpreters_head: u64,
}

/// Where the interpreter lock's state lives, if anywhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GilLocation {
    /// 3.11: one GIL in the runtime: `ceval.gil.locked` / `last_holder` (runtime offsets).
    Runtime {
        /// int `locked`
        locked: u64,
        /// `last_holder` tstate pointer
        holder: u64,
    },
    /// 3.12–3.14: the interpreter's own `_gil` (absolute interpreter offsets).
    Interpreter {
        /// int `locked`
        locked: u64,
        /// `last_holder` tstate pointer
        holder: u64,
    },
    /// 3.15: `holds_gil` flag in each thread state.
    ThreadFlag {
        /// int `holds_gil` in PyThreadState
        holds_gil: u64,
        /// int `locked` of the interpreter's own `_gil` (absolute interpreter offset): where
        /// the GIL's condition and mutex are, for telling a GIL wait from other futex waits
        locked: u64,
    },
    /// Free-threaded build: there is no GIL to hold. Each thread state's `state` word says
    /// whether the thread is attached (running Python or C code on the interpreter's behalf).
    Disabled {
        /// int `state` in PyThreadState: 0 detached, 1 attached, 2 suspended (stopped world)
        thread_state: u64,
    },
}

impl GilLocation {
    /// Where the GIL's `locked` word is, as a base and an offset: the runtime for 3.11, the
    /// interpreter otherwise; `None` on free-threaded builds.
    pub fn locked_word(self) -> Option<(GilBase, u64)> {
        match self {
            GilLocation::Runtime { locked, .. } => Some((GilBase::Runtime, locked)),
            GilLocation::Interpreter { locked, .. } | GilLocation::ThreadFlag { locked, .. } => {
                Some((GilBase::Interpreter, locked))
            }
            GilLocation::Disabled { .. } => None,
        }
    }
}

/// What a GIL offset is relative to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GilBase {
    /// `_PyRuntime`
    Runtime,
    /// the `PyInterpreterState`
    Interpreter,
}

/// The bytes around the GIL's `locked` word that hold the whole `_gil_runtime_state`: the
/// interval and last holder before it; the switch number, the condition and mutex (and the
/// switching pair) after it, about 200 bytes in every supported version. A thread blocked on a
/// futex in there waits for the GIL.
pub const GIL_BYTES_BEFORE_LOCKED: u64 = 32;
/// See [`GIL_BYTES_BEFORE_LOCKED`].
pub const GIL_BYTES_AFTER_LOCKED: u64 = 256;

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

/// `PyDictObject` fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DictObjectOffsets {
    /// `PyDictKeysObject*`
    pub ma_keys: u64,
    /// `PyDictValues*` of a split dict (NULL for a combined one)
    pub ma_values: u64,
}

/// `PyDictKeysObject` fields (`Include/internal/pycore_dict.h`): the same in 3.11–3.15 and in
/// 3.13t, where `dk_mutex` takes the byte after `dk_kind` (offsetof() against the 3.11.7,
/// 3.12.1, 3.13.0, 3.13.15 and 3.13.15t headers; dicts of the 3.14.10 and 3.15.2 interpreters
/// read with these numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DictKeysOffsets {
    /// u8 `dk_log2_size`: the hash table has `1 << dk_log2_size` slots
    pub log2_size: u64,
    /// u8 `dk_log2_index_bytes`: the index table takes `1 << dk_log2_index_bytes` bytes
    pub log2_index_bytes: u64,
    /// u8 `dk_kind`: [`DICT_KEYS_GENERAL`], [`DICT_KEYS_UNICODE`] or [`DICT_KEYS_SPLIT`]
    pub kind: u64,
    /// Py_ssize_t `dk_nentries`: entries used so far (deleted ones included, their key NULL)
    pub nentries: u64,
    /// `dk_indices`: the index table, followed by the entries
    pub indices: u64,
    /// sizeof(PyDictKeyEntry) {hash, key, value}: entries of a general dict
    pub general_entry_size: u64,
    /// sizeof(PyDictUnicodeEntry) {key, value}: entries of a str-keyed or split dict
    pub unicode_entry_size: u64,
}

/// `dk_kind` of a dict with keys of any type: entries are `PyDictKeyEntry`.
pub const DICT_KEYS_GENERAL: u8 = 0;
/// `dk_kind` of a dict with only str keys: entries are `PyDictUnicodeEntry`.
pub const DICT_KEYS_UNICODE: u8 = 1;
/// `dk_kind` of keys shared by instances (values live apart, `PyDictValues`).
pub const DICT_KEYS_SPLIT: u8 = 2;

/// The `PyDictKeysObject` layout of every supported version.
pub const DICT_KEYS: DictKeysOffsets = DictKeysOffsets {
    log2_size: 8,
    log2_index_bytes: 9,
    kind: 10,
    nentries: 24,
    indices: 32,
    general_entry_size: 24,
    unicode_entry_size: 16,
};

/// How an int's size and sign are stored (`PyLongObject`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LongFormat {
    /// 3.11: `ob_size` is the digit count, negative for a negative number.
    SignedSize,
    /// 3.12+: `lv_tag` = digit count << 3 | sign (0 positive, 1 zero, 2 negative).
    LvTag,
}

/// `PyLongObject` fields: 30-bit digits in u32s, least significant first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LongObjectOffsets {
    /// `lv_tag` (3.12+) or `ob_size` (3.11)
    pub lv_tag: u64,
    /// `ob_digit[0]`
    pub ob_digit: u64,
    /// what `lv_tag` holds
    pub format: LongFormat,
}

/// `Py_TPFLAGS_MANAGED_DICT`: the instance dict (or its values) lives at a fixed place outside
/// the object rather than at `tp_dictoffset` (3.11+, `Include/object.h`).
pub const TPFLAGS_MANAGED_DICT: u64 = 1 << 4;
/// `Py_TPFLAGS_INLINE_VALUES`: the attribute values follow the object (3.13+).
pub const TPFLAGS_INLINE_VALUES: u64 = 1 << 2;

/// Where the attributes of an instance of a `Py_TPFLAGS_MANAGED_DICT` type are: the
/// version-specific part of reading `Thread._name`. "Values" are a `PyDictValues`, whose
/// `values[i]` is the value of entry `i` of the type's shared keys (`ht_cached_keys`); a
/// "dict" is a `PyDictObject*` (NULL until someone asks for `__dict__`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ManagedDict {
    /// 3.11: `PyDictValues*` at `values_before` bytes before the object (`_PyObject_ValuesPointer`:
    /// `((PyDictValues **)obj) - 4`), the dict at `dict_before` (`_PyObject_ManagedDictPointer`:
    /// `- 3`); the values pointer is NULL once the dict exists.
    ValuesOrDict {
        /// bytes between the values pointer and the object
        values_before: u64,
        /// bytes between the dict pointer and the object
        dict_before: u64,
    },
    /// 3.12: one `PyDictOrValues` word `before` bytes before the object: with its low bit set
    /// it is the `PyDictValues*` minus 1 (`_PyDictOrValues_GetValues` returns `values + 1`,
    /// `Include/internal/pycore_object.h`), else the dict.
    TaggedDictOrValues {
        /// bytes between the word and the object
        before: u64,
    },
    /// 3.13+: with `Py_TPFLAGS_INLINE_VALUES` the `PyDictValues` follows the object, at
    /// `tp_basicsize`: u8 `capacity`, `size`, `embedded`, `valid`, padding, then `values[]`. Once
    /// `valid` is 0 (the values moved to a dict) or without the flag, the dict pointer at
    /// `dict_before` bytes before the object (`MANAGED_DICT_OFFSET`) holds the attributes.
    InlineValues {
        /// bytes between the dict pointer and the object: 24, or 8 in free-threaded builds
        /// (no `PyGC_Head` before objects)
        dict_before: u64,
        /// u8 `capacity` in `PyDictValues`: the number of `values` slots
        capacity: u64,
        /// u8 `valid` in `PyDictValues`
        valid: u64,
    },
}

/// What reading Python thread names (`threading._active[ident]._name`) needs: `sys.modules`,
/// module dicts, dicts, ints and instance attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadNameOffsets {
    /// `PyInterpreterState.imports.modules` (3.11: `.modules`): the `sys.modules` dict
    pub imports_modules: u64,
    /// `PyModuleObject.md_dict`: right after the object header
    pub md_dict: u64,
    /// `PyDictObject`
    pub dict_object: DictObjectOffsets,
    /// `PyDictKeysObject`
    pub dict_keys: DictKeysOffsets,
    /// offset of `values[]` in `PyDictValues`: 0 (3.11, 3.12), 8 (3.13+: a header comes first)
    pub dict_values: u64,
    /// `PyTypeObject.tp_flags` (unsigned long)
    pub tp_flags: u64,
    /// `PyTypeObject.tp_basicsize` (where inline values start, 3.13+)
    pub tp_basicsize: u64,
    /// `PyHeapTypeObject.ht_cached_keys`: the keys its instances share
    pub ht_cached_keys: u64,
    /// `PyLongObject`
    pub long_object: LongObjectOffsets,
    /// where instance attributes are
    pub managed_dict: ManagedDict,
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
}

/// Largest struct we accept from a table: guards against garbage sizes.
const MAX_STRUCT_SIZE: u64 = 1 << 20;
/// Largest header prefix we read of a frame, thread state or code object.
pub const MAX_HEADER_READ: u64 = 4096;

impl Offsets {
    /// Checks every offset the unwinder dereferences against the struct sizes the table
    /// reports, and their alignment, so garbage tables fail here and not mid-walk.
    pub fn validate(&self) -> Result<(), OffsetsError> {
        fn check(
            field: &'static str,
            off: u64,
            width: u64,
            limit: u64,
        ) -> Result<(), OffsetsError> {
            let end = off.saturating_add(width);
            if end > limit || !off.is_multiple_of(width.min(8)) {
                return Err(OffsetsError::Implausible {
                    field,
                    value: off,
                    limit,
                });
            }
            Ok(())
        }
        let r = &self.runtime_state;
        let i = &self.interpreter_state;
        let t = &self.thread_state;
        let f = &self.interpreter_frame;
        let c = &self.code_object;
        for (field, size) in [
            ("runtime_state.size", r.size),
            ("interpreter_state.size", i.size),
            ("thread_state.size", t.size),
            ("interpreter_frame.size", f.size),
            ("code_object.size", c.size),
        ] {
            if size == 0 || size > MAX_STRUCT_SIZE {
                return Err(OffsetsError::Implausible {
                    field,
                    value: size,
                    limit: MAX_STRUCT_SIZE,
                });
            }
        }
        check(
            "runtime_state.interpreters_head",
            r.interpreters_head,
            8,
            r.size,
        )?;
        check("interpreter_state.next", i.next, 8, i.size)?;
        check("interpreter_state.threads_head", i.threads_head, 8, i.size)?;
        check("interpreter_state.gc", i.gc, 8, i.size)?;
        if let Some(g) = i.code_object_generation {
            check("interpreter_state.code_object_generation", g, 8, i.size)?;
        }
        let tmax = t.size.min(MAX_HEADER_READ);
        check("thread_state.next", t.next, 8, tmax)?;
        check("thread_state.current_frame", t.current_frame, 8, tmax)?;
        check("thread_state.thread_id", t.thread_id, 8, tmax)?;
        check("thread_state.native_thread_id", t.native_thread_id, 8, tmax)?;
        for (field, off) in [
            ("thread_state.base_frame", t.base_frame),
            ("thread_state.last_profiled_frame", t.last_profiled_frame),
            (
                "thread_state.last_profiled_frame_seq",
                t.last_profiled_frame_seq,
            ),
        ] {
            if let Some(off) = off {
                check(field, off, 8, tmax)?;
            }
        }
        let fmax = f.size.min(MAX_HEADER_READ);
        check("interpreter_frame.previous", f.previous, 8, fmax)?;
        check("interpreter_frame.executable", f.executable, 8, fmax)?;
        check("interpreter_frame.instr_ptr", f.instr_ptr, 8, fmax)?;
        check("interpreter_frame.owner", f.owner, 1, fmax)?;
        if let Some(off) = f.tlbc_index {
            check("interpreter_frame.tlbc_index", off, 4, fmax)?;
        }
        let cmax = c.size.min(MAX_HEADER_READ);
        check("code_object.filename", c.filename, 8, cmax)?;
        check("code_object.qualname", c.qualname, 8, cmax)?;
        check("code_object.linetable", c.linetable, 8, cmax)?;
        check("code_object.firstlineno", c.firstlineno, 4, cmax)?;
        check(
            "code_object.co_code_adaptive",
            c.co_code_adaptive,
            2,
            cmax + 8,
        )?;
        check(
            "pyobject.ob_type",
            self.pyobject.ob_type,
            8,
            self.pyobject.size,
        )?;
        check("bytes_object.ob_sval", self.bytes_object.ob_sval, 1, 256)?;
        check(
            "unicode_object.asciiobject_size",
            self.unicode_object.asciiobject_size,
            1,
            256,
        )?;
        // The rest is read too (header lengths are summed from these), so a garbage table must
        // fail here rather than overflow an addition later.
        check("thread_state.interp", t.interp, 8, tmax)?;
        check("code_object.name", c.name, 8, cmax)?;
        check("code_object.ob_size", c.ob_size, 8, cmax)?;
        if let Some(off) = c.co_tlbc {
            check("code_object.co_tlbc", off, 8, cmax)?;
        }
        let u = &self.unicode_object;
        check("unicode_object.state", u.state, 4, 256)?;
        check("unicode_object.length", u.length, 8, 256)?;
        check(
            "unicode_object.compactunicodeobject_size",
            u.compactunicodeobject_size,
            1,
            256,
        )?;
        check("bytes_object.ob_size", self.bytes_object.ob_size, 8, 256)?;
        // `collecting` and `frame` are relative to the interpreter's `gc` member.
        let gc_max = i.size.saturating_sub(i.gc);
        check("gc.collecting", self.gc.collecting, 4, gc_max)?;
        if let Some(off) = self.gc.frame {
            check("gc.frame", off, 8, gc_max)?;
        }
        match self.gil {
            GilLocation::Runtime { locked, holder } => {
                check("runtime_state.gil_locked", locked, 4, r.size)?;
                check("runtime_state.gil_holder", holder, 8, r.size)?;
            }
            GilLocation::Interpreter { locked, holder } => {
                check(
                    "interpreter_state.gil_runtime_state_locked",
                    locked,
                    4,
                    i.size,
                )?;
                check(
                    "interpreter_state.gil_runtime_state_holder",
                    holder,
                    8,
                    i.size,
                )?;
            }
            GilLocation::ThreadFlag { holds_gil, locked } => {
                check("thread_state.holds_gil", holds_gil, 4, tmax)?;
                check(
                    "interpreter_state.gil_runtime_state_locked",
                    locked,
                    4,
                    i.size,
                )?;
            }
            GilLocation::Disabled { thread_state } => {
                check("thread_state.state", thread_state, 4, tmax)?;
            }
        }
        if let Some(n) = &self.thread_names {
            check(
                "interpreter_state.imports_modules",
                n.imports_modules,
                8,
                i.size,
            )?;
            // Object fields are read one at a time, at most a header's length in.
            for (field, off) in [
                ("module_object.md_dict", n.md_dict),
                ("dict_object.ma_keys", n.dict_object.ma_keys),
                ("dict_object.ma_values", n.dict_object.ma_values),
                ("dict_values.values", n.dict_values),
                ("type_object.tp_flags", n.tp_flags),
                ("type_object.tp_basicsize", n.tp_basicsize),
                ("heap_type_object.ht_cached_keys", n.ht_cached_keys),
                ("long_object.lv_tag", n.long_object.lv_tag),
            ] {
                check(field, off, 8, MAX_HEADER_READ)?;
            }
            check(
                "long_object.ob_digit",
                n.long_object.ob_digit,
                4,
                MAX_HEADER_READ,
            )?;
            let k = &n.dict_keys;
            for (field, off, width) in [
                ("dict_keys.log2_size", k.log2_size, 1),
                ("dict_keys.log2_index_bytes", k.log2_index_bytes, 1),
                ("dict_keys.kind", k.kind, 1),
                ("dict_keys.nentries", k.nentries, 8),
                ("dict_keys.indices", k.indices, 8),
            ] {
                check(field, off, width, 256)?;
            }
            for (field, size) in [
                ("dict_keys.general_entry_size", k.general_entry_size),
                ("dict_keys.unicode_entry_size", k.unicode_entry_size),
            ] {
                check(field, size, 8, 64)?;
                if size == 0 {
                    return Err(OffsetsError::Implausible {
                        field,
                        value: size,
                        limit: 64,
                    });
                }
            }
            match n.managed_dict {
                ManagedDict::ValuesOrDict {
                    values_before,
                    dict_before,
                } => {
                    check("managed_dict.values_before", values_before, 8, 64)?;
                    check("managed_dict.dict_before", dict_before, 8, 64)?;
                }
                ManagedDict::TaggedDictOrValues { before } => {
                    check("managed_dict.before", before, 8, 64)?;
                }
                ManagedDict::InlineValues {
                    dict_before,
                    capacity,
                    valid,
                } => {
                    check("managed_dict.dict_before", dict_before, 8, 64)?;
                    check("dict_values.capacity", capacity, 1, n.dict_values)?;
                    check("dict_values.valid", valid, 1, n.dict_values)?;
                }
            }
        }
        Ok(())
    }

    /// Bytes of a frame the unwinder reads in one go: every field it needs lies below this.
    pub fn frame_read_len(&self) -> usize {
        let f = &self.interpreter_frame;
        let mut end = [
            f.previous + 8,
            f.executable + 8,
            f.instr_ptr + 8,
            f.owner + 1,
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
        let mut end = [
            t.next,
            t.current_frame,
            t.thread_id,
            t.native_thread_id,
            t.interp,
        ]
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
            GilLocation::Runtime { .. } | GilLocation::Interpreter { .. } => {}
        }
        end as usize
    }

    /// Bytes of a code object the symbolizer reads in one go.
    pub fn code_read_len(&self) -> usize {
        let c = &self.code_object;
        let mut end = [c.filename, c.name, c.qualname, c.linetable, c.ob_size]
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
