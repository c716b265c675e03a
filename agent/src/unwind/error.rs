//! What goes wrong while unwinding: a whole sample that fails ([`UnwindError`]), a thread that
//! yields no stack ([`LostThread`]), and one attempt at a thread that a re-read may mend.

use std::sync::Arc;

use super::{StackLoss, ThreadSample};
use crate::memory::MemoryError;

/// Why a whole sample failed (a single thread's failure is counted, not returned).
#[derive(Debug, thiserror::Error)]
pub enum UnwindError {
    /// The process exited.
    #[error("process {pid} exited")]
    Gone {
        /// pid
        pid: u32,
    },
    /// Reading was refused.
    #[error(transparent)]
    Denied(MemoryError),
    /// The interpreter list could not be read (the runtime is shutting down, or garbage).
    // The cause is in the message, so it is not also a `#[source]` (it would print twice).
    #[error("reading the interpreter list of process {pid} failed: {error}")]
    Interpreters {
        /// pid
        pid: u32,
        /// the failed read
        error: MemoryError,
    },
}

impl UnwindError {
    pub(in crate::unwind) fn from_memory(pid: u32, e: MemoryError) -> UnwindError {
        match e {
            MemoryError::Gone { .. } => UnwindError::Gone { pid },
            MemoryError::Denied { .. } => UnwindError::Denied(e),
            error => UnwindError::Interpreters { pid, error },
        }
    }
}

/// A sampled thread that yielded no stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostThread {
    /// thread id in the target's namespace
    pub tid: u32,
    /// thread name, if known
    pub thread_name: Option<Arc<str>>,
    /// why no stack came out
    pub reason: StackLoss,
}

/// What sampling one thread gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ThreadOutcome {
    /// its stack
    Stack(ThreadSample),
    /// no stack, and why
    Lost(LostThread),
}

/// Why one attempt at a thread's stack failed: the target moved under the read (worth reading
/// again), or memory could not be read.
#[derive(Debug)]
pub(in crate::unwind) enum AttemptError {
    Lost(StackLoss),
    Memory(MemoryError),
}

impl From<MemoryError> for AttemptError {
    fn from(e: MemoryError) -> AttemptError {
        AttemptError::Memory(e)
    }
}

impl AttemptError {
    /// Whether the process is gone or unreadable: no re-read can help.
    pub(in crate::unwind) fn is_fatal(&self) -> bool {
        matches!(
            self,
            AttemptError::Memory(MemoryError::Gone { .. } | MemoryError::Denied { .. })
        )
    }

    /// What a failed attempt means for the thread: the process is gone or unreadable (the whole
    /// sample fails), or this thread's stack was lost for a reason.
    pub(in crate::unwind) fn into_loss(self) -> Result<StackLoss, MemoryError> {
        match self {
            AttemptError::Lost(loss) => Ok(loss),
            AttemptError::Memory(e @ (MemoryError::Gone { .. } | MemoryError::Denied { .. })) => {
                Err(e)
            }
            // A frame or code object freed between the thread state read and ours.
            AttemptError::Memory(_) => Ok(StackLoss::ReadFault),
        }
    }
}
