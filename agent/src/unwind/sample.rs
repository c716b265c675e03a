use std::sync::Arc;

use crate::symbolize::native::hex;
use crate::symbolize::Frame;

/// The stack of one thread at one instant: what the unwinder hands to aggregation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadSample {
    /// Host PID of the process.
    pub pid: u32,
    /// Linux thread id (in the target's PID namespace, as CPython stores it).
    pub tid: u32,
    /// The same thread's id as the host sees it (equal to `tid` outside PID namespaces; `tid`
    /// when the thread is already gone from `/proc`).
    pub host_tid: u32,
    /// Python-level thread name (`threading.Thread.name`) when it could be read.
    pub thread_name: Option<Arc<str>>,
    /// The thread and the GIL when sampled (`None`: free-threaded build, or unknown).
    pub gil: Option<GilState>,
    /// On or off a CPU when sampled: known only where the sampler takes waiting threads too
    /// (userspace `--idle`); the stacks of an eBPF profile are on-CPU or off-CPU by kind.
    pub cpu: Option<CpuState>,
    /// The trace and span the thread was in, where the process publishes them (OTEP 4947).
    pub trace: Option<TraceContext>,
    /// The asyncio task the thread was running (the `task_name` label), with task-aware
    /// stacks on.
    pub task: Option<Arc<str>>,
    /// Frames, innermost first.
    pub frames: Vec<Frame>,
    /// The walk stopped before the bottom of the stack (depth bound, torn read).
    pub truncated: bool,
}

/// The trace and span a thread was in when sampled (the `trace_id` and `span_id` labels, an
/// OTLP sample's link). A span belongs to one trace, so keeping the trace id adds no distinct
/// stack key beyond what the span id makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TraceContext {
    /// W3C trace id, bytes as the OTEP 4947 record has them
    pub trace_id: [u8; 16],
    /// W3C span id, bytes as the OTEP 4947 record has them
    pub span_id: [u8; 8],
}

impl TraceContext {
    /// The trace id as 32 lowercase hex digits (the `trace_id` label value).
    pub fn trace_id_hex(&self) -> String {
        hex(&self.trace_id)
    }

    /// The span id as 16 lowercase hex digits (the `span_id` label value).
    pub fn span_id_hex(&self) -> String {
        hex(&self.span_id)
    }
}

/// A sampled thread and the GIL: the `gil` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GilState {
    /// The thread held the GIL.
    Held,
    /// The thread did not hold it and was not waiting for it (running C code that released
    /// it, or blocked on something else).
    Released,
    /// The thread was blocked waiting to take it.
    Waiting,
}

impl GilState {
    /// From a holder flag: held, or not.
    pub fn from_held(held: bool) -> GilState {
        if held {
            GilState::Held
        } else {
            GilState::Released
        }
    }

    /// The `gil` label value.
    pub fn label(self) -> &'static str {
        match self {
            GilState::Held => "held",
            GilState::Released => "released",
            GilState::Waiting => "waiting",
        }
    }
}

/// Whether a sampled thread was on a CPU: the `state` label of userspace wall-clock profiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CpuState {
    /// Running or runnable (state R).
    OnCpu,
    /// Sleeping, blocked or stopped.
    OffCpu,
}

impl CpuState {
    /// The `state` label value.
    pub fn label(self) -> &'static str {
        match self {
            CpuState::OnCpu => "on_cpu",
            CpuState::OffCpu => "off_cpu",
        }
    }
}
