//! What a recording says on stderr when it ends: one summary for every mode, from the host
//! profiler's counters, in a few short lines: the file, its samples and the sampler; what was
//! lost and why; what was cut; then what was asked for (asyncio tasks, off-CPU time, native
//! stacks, `--gil`). `--verbose` adds every counter.

use std::path::Path;

use pyagent::aggregate::{ProfileWindow, WaitReason};
use pyagent::profiler::HostProfiler;
use pyagent::sampler::tick::TickSource;
use pyagent::sampler::userspace::SamplerStats;
use pyagent::unwind::UnwindStats;

use crate::cli::AsyncModeArg;

/// The parts of the summary a run asked for.
pub struct Shown {
    /// `--async` with its mode
    pub async_tasks: Option<AsyncModeArg>,
    /// `--off-cpu`
    pub off_cpu: bool,
    /// `--native`
    pub native: bool,
    /// threads were stopped around their reads (`--blocking`, or native stacks in userspace)
    pub threads_stopped: bool,
    /// `--gil`: the samples left out
    pub without_gil: Option<u64>,
    /// `--verbose`: every counter
    pub verbose: bool,
}

/// The summary of a recording written to `output`, a line each: what was written, what was
/// lost and why, what was cut, where to read more; with `--verbose` every counter after them.
pub fn record_lines(
    profiler: &HostProfiler,
    window: &ProfileWindow,
    output: &Path,
    shown: &Shown,
) -> Vec<String> {
    let u = profiler.unwind_stats();
    let sampler = match profiler.stats().userspace {
        Some(_) => "userspace",
        None => "eBPF",
    };
    let mut lines = vec![format!(
        "pyagent: wrote {}: {} samples, {} distinct stacks ({sampler} sampler)",
        output.display(),
        window.total_samples(),
        window.counts.len(),
    )];
    lines.extend(lost_line(profiler, &u));
    if u.proven_roots > 0 {
        lines.push(format!(
            "pyagent: {} reads kept only their proven frames, under [stack moved while read]: the thread changed the others while they were read (--mode ebpf or --blocking read them whole)",
            u.proven_roots
        ));
    }
    if shown.verbose {
        let mut details = format!(
            "pyagent: details: {} mode ({} samples, {} stacks",
            profiler.mode_name(),
            window.total_samples(),
            window.counts.len(),
        );
        match profiler.stats().userspace {
            Some(sampler) => details += &userspace_counts(&sampler, &u, profiler, shown),
            None => details += &ebpf_counts(profiler, &u),
        }
        details.push(')');
        lines.push(details);
    } else {
        lines.push(
            "pyagent: every counter with --verbose; what they mean: docs/src/guide/record-dump-top.md and the pyagent_* metrics".to_string(),
        );
    }
    if let Some(n) = shown.without_gil {
        lines.push(format!(
            "pyagent: --gil left out {n} samples of threads that did not hold the GIL"
        ));
    }
    if let Some(mode) = shown.async_tasks {
        lines.push(async_line(&u, mode));
    }
    if shown.off_cpu {
        let waits = window.off_cpu_by_wait();
        lines.extend(off_cpu_line(profiler, Some(&waits), shown.verbose));
    }
    if shown.native {
        lines.push(native_line(profiler));
    }
    lines
}

/// `pyagent: N samples lost: ...`: the reads that gave no stack, by reason (none: no line).
fn lost_line(profiler: &HostProfiler, u: &UnwindStats) -> Option<String> {
    let s = profiler.stats();
    let (lost, why) = match s.userspace {
        Some(sampler) => {
            let mut lost = u.lost.total();
            let mut why = Vec::new();
            if lost > 0 {
                why.push(u.lost.summary());
            }
            if sampler.failed > 0 {
                lost += sampler.failed;
                why.push(format!("{} process reads failed", sampler.failed));
            }
            (lost, why.join(", "))
        }
        None => {
            let reasons = [
                (s.torn, "torn walks"),
                (s.anchor_miss, "anchor misses"),
                (s.incomplete, "incomplete records"),
                (s.unknown_thread, "threads not known yet"),
                (s.cyclic, "looping frame chains"),
                (s.throttled, "ticks throttled by the kernel"),
                (s.ring_full, "records lost to a full ring buffer"),
            ];
            let lost = reasons.iter().map(|(n, _)| n).sum();
            let why: Vec<String> = reasons
                .iter()
                .filter(|(n, _)| *n > 0)
                .map(|(n, what)| format!("{n} {what}"))
                .collect();
            (lost, why.join(", "))
        }
    };
    (lost > 0).then(|| format!("pyagent: {lost} samples lost: {why}"))
}

/// `, N failed, ... re-reads, ...`: the userspace sampler's ticks and the threads that gave no
/// stack, by reason.
fn userspace_counts(
    s: &SamplerStats,
    u: &UnwindStats,
    profiler: &HostProfiler,
    shown: &Shown,
) -> String {
    let mut out = format!(
        ", {} failed, {} lagged ticks, {} sampling ticks, {} thread samples without a stack: {}, {} re-reads, {} proven roots (moved while read, cut under [stack moved while read]), {} unverified stacks, {} frames named after they returned",
        s.failed,
        s.lagged,
        s.ticks,
        u.lost.total(),
        u.lost.summary(),
        u.rereads,
        u.proven_roots,
        u.unverified,
        u.popped_frames_named,
    );
    out += &tick_summary(s);
    out += &time_summary(s);
    if profiler.frame_cache_used() {
        out += &format!(
            ", frame cache {}/{}/{} full/partial/miss",
            u.cache_full_hits, u.cache_partial_hits, u.cache_misses
        );
    }
    if shown.threads_stopped {
        let seize = s.seize;
        out += &format!(
            ", threads not stopped: {} denied (EPERM), {} gone (ESRCH), {} failed",
            seize.skipped_denied, seize.skipped_gone, seize.failed
        );
    }
    out
}

/// `; the threads' time in sampling periods: ...`: where every tick of the threads read went,
/// adding up to their ticks (taken and lagged) for a thread read throughout.
fn time_summary(stats: &SamplerStats) -> String {
    let t = stats.time;
    let p = |ns| t.periods(ns);
    format!(
        "; the threads' time in sampling periods: {:.0} on a CPU and sampled, {:.0} on a CPU without a stack, {:.0} waiting for a CPU, {:.0} off CPU",
        p(t.sampled_ns),
        p(t.lost_ns),
        p(t.runqueue_ns),
        p(t.off_cpu_ns())
    )
}

/// `, ticks from ...`: what woke the sampler (a perf event on its CPU, or sleeping).
fn tick_summary(stats: &SamplerStats) -> String {
    let t = stats.tick;
    match stats.tick_source {
        Some(TickSource::PerfEvent) => format!(
            ", ticks from a cpu-clock perf event: {} from the event, {} from deadlines (the event throttled {} times, or late), {} moves to another CPU",
            t.event_ticks, t.deadline_ticks, t.throttles, t.moves
        ),
        Some(TickSource::Sleep) if t.event_ticks > 0 => format!(
            ", ticks from a cpu-clock perf event ({} from the event), then from sleeping (the event failed)",
            t.event_ticks
        ),
        Some(TickSource::Sleep) => ", ticks from sleeping".to_string(),
        None => String::new(),
    }
}

/// `, N dropped: ...; BPF stopped at the 3.15 anchor ...`: the records that yielded no sample,
/// by reason, and how the frame cache and the thread lists served the BPF walks.
fn ebpf_counts(profiler: &HostProfiler, u: &UnwindStats) -> String {
    let s = profiler.stats();
    let caches = profiler.cache_stats();
    let (cache_hits, cache_misses) = caches.get("frame").copied().unwrap_or((0, 0));
    let (repeated, resolved) = caches.get("record").copied().unwrap_or((0, 0));
    let bpf_counter = |c| profiler.bpf().and_then(|b| b.counter(c).ok()).unwrap_or(0);
    format!(
        ", {}; BPF stopped at the 3.15 anchor {} times, found {} new threads' states itself, frame cache {} hits / {} misses / {} walks past its bounds, walked whole by BPF / {} stored stacks dropped because an anchor write raced the thread; {} records repeated their thread's last stack below the top frame, {} resolved whole; {} thread lists read, {} thread-exit notices",
        s.dropped_summary(),
        bpf_counter(common::Counter::AnchorHit),
        bpf_counter(common::Counter::ThreadFound),
        cache_hits,
        cache_misses,
        profiler.frame_cache_bypassed(),
        u.anchor_write_races,
        repeated,
        resolved,
        s.thread_list_reads,
        s.thread_exit_notices
    )
}

/// `pyagent: N samples in asyncio tasks, ...`.
fn async_line(u: &UnwindStats, mode: AsyncModeArg) -> String {
    let mut line = format!(
        "pyagent: {} samples in asyncio tasks",
        u.task_samples + u.task_ended
    );
    if u.task_ended > 0 {
        line += &format!(
            " ({} of a task that ended before it was read: under its coroutine's name, without \
             its awaiters)",
            u.task_ended
        );
    }
    if u.task_unattributed > 0 {
        // Said as what happened to them: a bare count read as a failure of the samples
        // outside any task (the loop's own), which are not counted here at all.
        line += &format!(
            ", {} more ran in a task that ended or changed before it was read (kept without \
             their task)",
            u.task_unattributed
        );
    }
    if mode == AsyncModeArg::All {
        line += &format!(", {} samples of waiting tasks", u.task_waiting_samples);
    }
    if u.task_read_errors > 0 {
        line += &format!(
            ", {} task reads that made no sense or changed under the read",
            u.task_read_errors
        );
    }
    line
}

/// `pyagent: off-CPU: ...`: the time of the waits `waits` holds (each reason's nanoseconds, a
/// recording's window; `None` where there are many), and how many waits the program saw:
/// those it walked, and those at a stack walked before, timed without a walk. `details` adds
/// the waits under way at attach and the context switches' cost. None without the BPF
/// sampler, which alone sees threads block.
pub fn off_cpu_line(
    profiler: &HostProfiler,
    waits: Option<&[(WaitReason, u64)]>,
    details: bool,
) -> Option<String> {
    let bpf = profiler.bpf()?;
    let counter = |c| bpf.counter(c).unwrap_or(0);
    let walked = counter(common::Counter::OffCpuWalks);
    let repeated = counter(common::Counter::OffCpuCarried);
    let mut line = "pyagent: off-CPU: ".to_string();
    if let Some(waits) = waits {
        let seconds = |ns: u64| ns as f64 / 1e9;
        let total: u64 = waits.iter().map(|(_, ns)| ns).sum();
        let parts: Vec<String> = waits
            .iter()
            .filter(|(_, ns)| *ns > 0)
            .map(|(wait, ns)| format!("{} {:.3} s", wait.label(), seconds(*ns)))
            .collect();
        line += &format!("{:.3} s of waits in the profile", seconds(total));
        if !parts.is_empty() {
            line += &format!(" ({})", parts.join(", "));
        }
        line += "; ";
    }
    line += &format!(
        "{} waits off CPU seen ({repeated} of them at a stack walked before, timed without a \
         walk)",
        walked + repeated
    );
    if details {
        let switch_cost = bpf
            .off_cpu_run_stats()
            .filter(|(_, runs)| *runs > 0)
            .map_or("unknown".to_string(), |(ns, runs)| {
                format!("{:.0} ns", ns as f64 / runs as f64)
            });
        line += &format!(
            "; {} more already under way at attach, {} context switches seen at {switch_cost} each",
            profiler.stats().blocked_at_attach,
            counter(common::Counter::Switches)
        );
    }
    Some(line)
}

/// `pyagent: native stacks: ...`: how the native stacks merged with the Python ones.
fn native_line(profiler: &HostProfiler) -> String {
    let s = profiler.stats();
    let n = s.native;
    let mut line = format!(
        "pyagent: native stacks: {} merged whole, {} cut above the stack's bottom ({} at code without unwind entries), {} mismatched (Python frames kept alone)",
        n.merged, n.cut, n.cut_without_cfi, n.mismatch
    );
    match profiler.bpf() {
        Some(bpf) => line += &format!(
            "; {} stack copies cut at an unreadable page; {} frames outside every mapped object; {:.1} ms of agent CPU resolving {} records (the first parse of each object and of kallsyms included)",
            bpf.counter(common::Counter::NativeStackShort).unwrap_or(0),
            n.unmapped_frames,
            s.drain_cpu_ns as f64 / 1e6,
            s.records
        ),
        None => line += &format!(
            ", {} not copied (each thread stopped while read); {} frames outside every mapped object",
            n.not_copied, n.unmapped_frames
        ),
    }
    line
}
