//! Where the GIL's state is in each kind of build, and how much memory around it belongs to it.

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
        /// `last_holder` tstate pointer of the same `_gil`: who a GIL waiter waits for
        holder: u64,
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

    /// Where the GIL's `locked` word and `last_holder` pointer are, as a base and two offsets:
    /// who holds the GIL while it is locked, in every build with a GIL.
    pub fn holder_words(self) -> Option<(GilBase, u64, u64)> {
        match self {
            GilLocation::Runtime { locked, holder } => Some((GilBase::Runtime, locked, holder)),
            GilLocation::Interpreter { locked, holder }
            | GilLocation::ThreadFlag { locked, holder, .. } => {
                Some((GilBase::Interpreter, locked, holder))
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

/// Where a GIL's state lies around its `locked` word: shared with the BPF program, which tells
/// GIL waits by it too.
pub use common::{GIL_BYTES_AFTER_LOCKED, GIL_BYTES_BEFORE_LOCKED};
