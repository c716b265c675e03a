use std::sync::Arc;

use crate::symbolize::native::hex;
use crate::symbolize::Frame;

/// Which thread a sample is of and the state it was in: what, with the frames, tells two
/// samples apart in a profile (its labels). A sample carries it, and the aggregator keeps it as
/// the sample's key ([`crate::aggregate::StackKey`]), not a copy field by field.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SampleThread {
    /// Host PID of the process.
    pub pid: u32,
    /// Linux thread id as the host sees it (the `thread_id` label, like `pid`; the id in the
    /// target's namespace when the thread is already gone from `/proc`).
    pub tid: u32,
    /// The thread's id in the target's PID namespace, as CPython stores it, when it differs
    /// (`ns_thread_id`, like `ns_pid`).
    pub ns_tid: Option<u32>,
    /// Python-level thread name (`threading.Thread.name`) when it could be read.
    pub thread_name: Option<Arc<str>>,
    /// The thread and the GIL when sampled (the `gil` label; `None`: free-threaded build, or
    /// unknown).
    pub gil: Option<GilState>,
    /// On or off a CPU when sampled (the `state` label): known only where the sampler takes
    /// waiting threads too (userspace `--idle`); the stacks of an eBPF profile are on-CPU or
    /// off-CPU by kind.
    pub cpu: Option<CpuState>,
    /// The trace and span the thread was in, where the process publishes them (OTEP 4947; the
    /// `trace_id` and `span_id` labels).
    pub trace: Option<TraceContext>,
    /// The asyncio task the thread was running (the `task_name` label), with task-aware
    /// stacks on.
    pub task: Option<Arc<str>>,
    /// Who held the GIL while the thread waited for it (the `gil_holder` label), where the
    /// sampler read that at the same instant: only with [`GilState::Waiting`].
    pub gil_holder: Option<GilHolder>,
}

impl SampleThread {
    /// A thread of `pid` with no state known: `tid` in the target's namespace, `host_tid` as
    /// the host sees it.
    pub fn new(pid: u32, tid: u32, host_tid: u32) -> SampleThread {
        SampleThread {
            pid,
            tid: host_tid,
            ns_tid: (tid != host_tid).then_some(tid),
            thread_name: None,
            gil: None,
            cpu: None,
            trace: None,
            task: None,
            gil_holder: None,
        }
    }

    /// The thread's id in the target's PID namespace (CPython's `native_thread_id`).
    pub fn ns_tid(&self) -> u32 {
        self.ns_tid.unwrap_or(self.tid)
    }
}

/// The stack of one thread at one instant: what the unwinder hands to aggregation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadSample {
    /// The thread and its state.
    pub thread: SampleThread,
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

/// The thread holding the GIL another thread waits for, and what it ran: the `gil_holder`
/// label, `NAME in FUNCTION` (`go tool pprof -tagfocus=gil=waiting -tagroot=gil_holder` puts
/// the waiters' stacks under their blockers).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GilHolder {
    /// The holder's Python thread name, or `thread TID` when none is known.
    pub thread: Arc<str>,
    /// The function of the holder's innermost Python frame, when it could be read.
    pub function: Option<Arc<str>>,
}

impl GilHolder {
    /// The holder `ns_tid` (named `name` when known) running `function`.
    pub fn new(ns_tid: u32, name: Option<Arc<str>>, function: Option<Arc<str>>) -> GilHolder {
        GilHolder {
            thread: name.unwrap_or_else(|| format!("thread {ns_tid}").into()),
            function,
        }
    }

    /// The `gil_holder` label value.
    pub fn label(&self) -> String {
        match &self.function {
            Some(f) => format!("{} in {f}", self.thread),
            None => self.thread.to_string(),
        }
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

    /// The state a `gil` label value names; `None` for any other text.
    pub fn from_label(text: &str) -> Option<GilState> {
        [GilState::Held, GilState::Released, GilState::Waiting]
            .into_iter()
            .find(|g| g.label() == text)
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

    /// The state a `state` label value names; `None` for any other text.
    pub fn from_label(text: &str) -> Option<CpuState> {
        [CpuState::OnCpu, CpuState::OffCpu]
            .into_iter()
            .find(|c| c.label() == text)
    }
}
