use std::sync::Arc;

use crate::symbolize::Frame;

/// The stack of one thread at one instant: what the unwinder hands to aggregation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadSample {
    /// Host PID of the process.
    pub pid: u32,
    /// Linux thread id (in the target's PID namespace, as CPython stores it).
    pub tid: u32,
    /// Python-level thread name (`threading.Thread.name`) when it could be read.
    pub thread_name: Option<Arc<str>>,
    /// Whether this thread held the GIL, where the version tells.
    pub holds_gil: Option<bool>,
    /// Frames, innermost first.
    pub frames: Vec<Frame>,
    /// The walk stopped before the bottom of the stack (depth bound, torn read).
    pub truncated: bool,
}
