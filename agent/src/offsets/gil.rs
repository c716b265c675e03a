//! Where the GIL's state is in each kind of build, and how much memory around it belongs to it.

/// Where the interpreter lock's state lives, if anywhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GilLocation {
    /// 3.6: separate statics of the object that holds the interpreter list, at these addresses
    /// in the process (found by their symbols at discovery).
    Statics {
        /// int `gil_locked`
        locked: u64,
        /// `gil_last_holder` tstate pointer
        holder: u64,
        /// the lowest of the GIL's mutexes and conditions (`gil_mutex`, `gil_cond` and the
        /// forced-switch pair): where its futex words begin
        waits: u64,
    },
    /// A build whose GIL statics have no names to be found by (a stripped 3.6): held or not is
    /// not known, and no record says.
    Unknown,
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
            GilLocation::Statics { locked, .. } => Some((GilBase::Process, locked)),
            GilLocation::Runtime { locked, .. } => Some((GilBase::Runtime, locked)),
            GilLocation::Interpreter { locked, .. } | GilLocation::ThreadFlag { locked, .. } => {
                Some((GilBase::Interpreter, locked))
            }
            GilLocation::Disabled { .. } | GilLocation::Unknown => None,
        }
    }

    /// Where the GIL's `locked` word and `last_holder` pointer are, as a base and two offsets:
    /// who holds the GIL while it is locked, in every build with a GIL.
    pub fn holder_words(self) -> Option<(GilBase, u64, u64)> {
        match self {
            GilLocation::Statics { locked, holder, .. } => Some((GilBase::Process, locked, holder)),
            GilLocation::Runtime { locked, holder } => Some((GilBase::Runtime, locked, holder)),
            GilLocation::Interpreter { locked, holder }
            | GilLocation::ThreadFlag { locked, holder, .. } => {
                Some((GilBase::Interpreter, locked, holder))
            }
            GilLocation::Disabled { .. } | GilLocation::Unknown => None,
        }
    }

    /// Where the GIL's futex words begin, for a GIL whose `locked` word is at `locked_addr`
    /// (see [`GIL_WAIT_BYTES`]).
    pub fn waits_start(self, locked_addr: u64) -> u64 {
        match self {
            GilLocation::Statics { waits, .. } => waits,
            _ => locked_addr.saturating_sub(GIL_BYTES_BEFORE_LOCKED),
        }
    }
}

/// What a GIL offset is relative to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GilBase {
    /// nothing: the offsets are the process's addresses (3.6's statics)
    Process,
    /// `_PyRuntime`
    Runtime,
    /// the `PyInterpreterState`
    Interpreter,
}

/// How far a GIL's futex words reach: shared with the BPF program, which tells GIL waits by them
/// too.
pub use common::{GIL_BYTES_BEFORE_LOCKED, GIL_WAIT_BYTES};
