//! The BPF program's counters (`enum pa_counter`, the `pa_counters` per-CPU array), each with a
//! Prometheus name and help string.

/// Number of counters (`PA_CNT__COUNT`), the length of the `pa_counters` array.
pub const COUNTER_COUNT: usize = 30;

/// One counter id (`enum pa_counter`); the discriminant is the `pa_counters` index.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Counter {
    /// `PA_CNT_RUNS`
    Runs = 0,
    /// `PA_CNT_SAMPLES_EMITTED`
    SamplesEmitted = 1,
    /// `PA_CNT_IDLE`
    Idle = 2,
    /// `PA_CNT_NOT_TRACKED`
    NotTracked = 3,
    /// `PA_CNT_NO_THREAD_STATE`
    NoThreadState = 4,
    /// `PA_CNT_NO_CURRENT_FRAME`
    NoCurrentFrame = 5,
    /// `PA_CNT_READ_FAIL_TSTATE`
    ReadFailTstate = 6,
    /// `PA_CNT_READ_FAIL_CFRAME`
    ReadFailCframe = 7,
    /// `PA_CNT_READ_FAIL_FRAME`
    ReadFailFrame = 8,
    /// `PA_CNT_TRUNCATED`
    Truncated = 9,
    /// `PA_CNT_ANCHOR_HIT`
    AnchorHit = 10,
    /// `PA_CNT_COMPLETE`
    Complete = 11,
    /// `PA_CNT_FRAMES`
    Frames = 12,
    /// `PA_CNT_RINGBUF_DROPPED`
    RingbufDropped = 13,
    /// `PA_CNT_WAKEUP_FORCED`
    WakeupForced = 14,
    /// `PA_CNT_BAD_CONFIG`
    BadConfig = 15,
    /// `PA_CNT_NO_SCRATCH`
    NoScratch = 16,
    /// `PA_CNT_THREAD_FOUND`
    ThreadFound = 17,
    /// `PA_CNT_THREAD_UNKNOWN`
    ThreadUnknown = 18,
    /// `PA_CNT_CYCLIC_CHAIN`
    CyclicChain = 19,
    /// `PA_CNT_SWITCHES`
    Switches = 20,
    /// `PA_CNT_OFF_CPU_WALKS`
    OffCpuWalks = 21,
    /// `PA_CNT_WAKES`
    Wakes = 22,
    /// `PA_CNT_OFF_CPU_MAP_FULL`
    OffCpuMapFull = 23,
    /// `PA_CNT_OFF_CPU_CARRIED`
    OffCpuCarried = 24,
    /// `PA_CNT_SPAN_READ_FAIL`
    SpanReadFail = 25,
    /// `PA_CNT_NATIVE_STACKS`
    NativeStacks = 26,
    /// `PA_CNT_NATIVE_STACK_SHORT`
    NativeStackShort = 27,
    /// `PA_CNT_NATIVE_NO_REGS`
    NativeNoRegs = 28,
    /// `PA_CNT_NOTICES`
    Notices = 29,
}

/// What a counter means, for metrics export.
#[derive(Debug, PartialEq, Eq)]
pub struct CounterInfo {
    /// The counter.
    pub counter: Counter,
    /// Its C enumerator (`PA_CNT_*`).
    pub c_name: &'static str,
    /// Prometheus metric name (`pyagent_bpf_<what>_total`).
    pub name: &'static str,
    /// Prometheus help text.
    pub help: &'static str,
}

/// Every counter, indexed by its id.
pub static COUNTERS: [CounterInfo; COUNTER_COUNT] = [
    info(
        Counter::Runs,
        "PA_CNT_RUNS",
        "pyagent_bpf_sample_runs_total",
        "BPF sampler runs (perf events handled).",
    ),
    info(
        Counter::SamplesEmitted,
        "PA_CNT_SAMPLES_EMITTED",
        "pyagent_bpf_samples_emitted_total",
        "Samples written to the ring buffer.",
    ),
    info(
        Counter::Idle,
        "PA_CNT_IDLE",
        "pyagent_bpf_idle_skipped_total",
        "Perf events that interrupted the idle task.",
    ),
    info(
        Counter::NotTracked,
        "PA_CNT_NOT_TRACKED",
        "pyagent_bpf_not_tracked_total",
        "Perf events in a process that is not tracked.",
    ),
    info(
        Counter::NoThreadState,
        "PA_CNT_NO_THREAD_STATE",
        "pyagent_bpf_no_thread_state_total",
        "Perf events in a tracked process on a thread registered as running no Python.",
    ),
    info(
        Counter::NoCurrentFrame,
        "PA_CNT_NO_CURRENT_FRAME",
        "pyagent_bpf_no_current_frame_total",
        "Perf events on a thread that runs no Python code (current frame is NULL).",
    ),
    info(
        Counter::ReadFailTstate,
        "PA_CNT_READ_FAIL_TSTATE",
        "pyagent_bpf_tstate_read_failures_total",
        "Failed reads of a thread state; sample dropped.",
    ),
    info(
        Counter::ReadFailCframe,
        "PA_CNT_READ_FAIL_CFRAME",
        "pyagent_bpf_cframe_read_failures_total",
        "Failed reads of tstate->cframe->current_frame (3.11, 3.12); sample dropped.",
    ),
    info(
        Counter::ReadFailFrame,
        "PA_CNT_READ_FAIL_FRAME",
        "pyagent_bpf_frame_read_failures_total",
        "Failed frame reads; sample emitted with the read-failed flag.",
    ),
    info(
        Counter::Truncated,
        "PA_CNT_TRUNCATED",
        "pyagent_bpf_truncated_samples_total",
        "Walks cut at the frame-count bound.",
    ),
    info(
        Counter::AnchorHit,
        "PA_CNT_ANCHOR_HIT",
        "pyagent_bpf_anchor_hits_total",
        "Walks that stopped at the frame-cache anchor (last_profiled_frame).",
    ),
    info(
        Counter::Complete,
        "PA_CNT_COMPLETE",
        "pyagent_bpf_complete_samples_total",
        "Walks that reached a frame without a previous frame.",
    ),
    info(
        Counter::Frames,
        "PA_CNT_FRAMES",
        "pyagent_bpf_frames_total",
        "Frames recorded in emitted samples.",
    ),
    info(
        Counter::RingbufDropped,
        "PA_CNT_RINGBUF_DROPPED",
        "pyagent_bpf_ringbuf_dropped_total",
        "Samples dropped because the ring buffer was full.",
    ),
    info(
        Counter::WakeupForced,
        "PA_CNT_WAKEUP_FORCED",
        "pyagent_bpf_wakeups_forced_total",
        "Samples submitted with a forced consumer wakeup (ring buffer past the threshold).",
    ),
    info(
        Counter::BadConfig,
        "PA_CNT_BAD_CONFIG",
        "pyagent_bpf_bad_config_total",
        "Samples dropped because the process's offsets were outside the read windows.",
    ),
    info(
        Counter::NoScratch,
        "PA_CNT_NO_SCRATCH",
        "pyagent_bpf_no_scratch_total",
        "Samples dropped because the CPU had no scratch slot.",
    ),
    info(
        Counter::ThreadFound,
        "PA_CNT_THREAD_FOUND",
        "pyagent_bpf_thread_found_total",
        "Walks of a thread not yet registered, found in its interpreter's thread list.",
    ),
    info(
        Counter::ThreadUnknown,
        "PA_CNT_THREAD_UNKNOWN",
        "pyagent_bpf_thread_unknown_total",
        "Samples lost: a thread neither registered nor found in its interpreter's thread list.",
    ),
    info(
        Counter::CyclicChain,
        "PA_CNT_CYCLIC_CHAIN",
        "pyagent_bpf_cyclic_chains_total",
        "Walks stopped because a frame's previous looped back to a recent frame (corrupt chain).",
    ),
    info(
        Counter::Switches,
        "PA_CNT_SWITCHES",
        "pyagent_bpf_context_switches_total",
        "Context switches seen by the off-CPU program (every task on the host).",
    ),
    info(
        Counter::OffCpuWalks,
        "PA_CNT_OFF_CPU_WALKS",
        "pyagent_bpf_off_cpu_walks_total",
        "Tracked Python threads that left the CPU to wait, their stack recorded.",
    ),
    info(
        Counter::Wakes,
        "PA_CNT_WAKES",
        "pyagent_bpf_off_cpu_wakes_total",
        "Off-CPU threads that ran again (their wait's end recorded).",
    ),
    info(
        Counter::OffCpuMapFull,
        "PA_CNT_OFF_CPU_MAP_FULL",
        "pyagent_bpf_off_cpu_map_full_total",
        "Off-CPU waits lost because the table of waiting threads was full.",
    ),
    info(
        Counter::OffCpuCarried,
        "PA_CNT_OFF_CPU_CARRIED",
        "pyagent_bpf_off_cpu_carried_total",
        "Off-CPU waits timed but not walked (a repeat of the thread's last recorded wait, soon after it or from the same place): their time goes to that wait's stack.",
    ),
    info(
        Counter::SpanReadFail,
        "PA_CNT_SPAN_READ_FAIL",
        "pyagent_bpf_span_read_failures_total",
        "Failed reads of a published OpenTelemetry thread context (OTEP 4947); sample emitted without its span.",
    ),
    info(
        Counter::NativeStacks,
        "PA_CNT_NATIVE_STACKS",
        "pyagent_bpf_native_stacks_total",
        "Records that carry user registers and a copy of the user stack for native unwinding.",
    ),
    info(
        Counter::NativeStackShort,
        "PA_CNT_NATIVE_STACK_SHORT",
        "pyagent_bpf_native_stack_short_total",
        "User-stack copies that stopped at an unreadable page before the window's end (usually the top of the stack).",
    ),
    info(
        Counter::NativeNoRegs,
        "PA_CNT_NATIVE_NO_REGS",
        "pyagent_bpf_native_no_regs_total",
        "Ticks of a native-stack process without user registers: recorded with Python frames only.",
    ),
    info(
        Counter::Notices,
        "PA_CNT_NOTICES",
        "pyagent_bpf_notices_total",
        "Changes to the notice map (a new entry or a new bit): a process that exec'd, was forked by a tracked one, or whose threads exited, or one that ran a thread the program could not walk.",
    ),
];

const fn info(
    counter: Counter,
    c_name: &'static str,
    name: &'static str,
    help: &'static str,
) -> CounterInfo {
    CounterInfo {
        counter,
        c_name,
        name,
        help,
    }
}

const _: () = {
    let mut i = 0;
    while i < COUNTER_COUNT {
        assert!(
            COUNTERS[i].counter as usize == i,
            "COUNTERS is indexed by counter id"
        );
        i += 1;
    }
};

impl Counter {
    /// Every counter, in id order.
    pub fn all() -> impl ExactSizeIterator<Item = Counter> {
        COUNTERS.iter().map(|c| c.counter)
    }

    /// The `pa_counters` index.
    pub const fn index(self) -> u32 {
        self as u32
    }

    /// Name and help.
    pub fn info(self) -> &'static CounterInfo {
        &COUNTERS[self as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn names_are_unique_prometheus_counters() {
        let mut seen = HashSet::new();
        for c in &COUNTERS {
            assert!(seen.insert(c.name), "duplicate {}", c.name);
            assert!(
                c.name.starts_with("pyagent_bpf_") && c.name.ends_with("_total"),
                "{}",
                c.name
            );
            assert!(
                c.name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                "{}",
                c.name
            );
            assert!(!c.help.is_empty() && !c.help.contains('\n'), "{}", c.name);
        }
        assert_eq!(Counter::all().count(), COUNTER_COUNT);
        assert_eq!(Counter::NoScratch.info().c_name, "PA_CNT_NO_SCRATCH");
    }
}
