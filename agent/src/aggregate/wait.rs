//! What an off-CPU thread waits in: the `wait` label of off-CPU samples.

/// Why a thread was off the CPU, from the system call it blocked in and, for futexes, from
/// whose futex it was (the GIL's, or any other).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WaitReason {
    /// A call on descriptors: read, write, poll, select, epoll, accept, connect, recv, send.
    Io,
    /// nanosleep, clock_nanosleep, pause; select or poll without descriptors.
    Sleep,
    /// A futex that is not the GIL's: a lock, a condition, a queue, a join.
    Lock,
    /// Waiting to take the GIL (a futex in the interpreter's `_gil_runtime_state`).
    Gil,
    /// Any other call, or none (a page fault, a stop).
    Other,
    /// Runnable, waiting on a run queue for a CPU: preempted, or throttled by a CPU limit.
    Cpu,
}

impl WaitReason {
    /// Every reason, in label order.
    pub const ALL: [WaitReason; 6] = [
        WaitReason::Io,
        WaitReason::Sleep,
        WaitReason::Lock,
        WaitReason::Gil,
        WaitReason::Other,
        WaitReason::Cpu,
    ];

    /// The `wait` label value.
    pub fn label(self) -> &'static str {
        match self {
            WaitReason::Io => "io",
            WaitReason::Sleep => "sleep",
            WaitReason::Lock => "lock",
            WaitReason::Gil => "gil",
            WaitReason::Other => "other",
            WaitReason::Cpu => "cpu",
        }
    }

    /// The reason a `wait` label value names; `None` for any other text.
    pub fn from_label(text: &str) -> Option<WaitReason> {
        WaitReason::ALL.into_iter().find(|w| w.label() == text)
    }
}

impl std::fmt::Display for WaitReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}
