//! One load of the BPF sampler with run-time statistics on, beside a fresh `deep.py` target,
//! tracked as a [`Walk`] says: the program's run time per drain interval and its counters.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use pyagent::discovery::{locate_runtime, PythonTarget};
use pyagent::sampler::bpf::{pa_proc_for, set_gil, BpfConfig, BpfSampler};
use pyagent::unwind::native::NativeUnwinder;
use pyagent::unwind::{UnwindOptions, Unwinder};

use super::cost::{Cost, Intervals, NativeCount};
use super::targets::READY;
use crate::bench::util::{Interpreter, Proc};

/// Records unwound per 100 ms interval to count native frames: enough for a mean, few enough
/// that the bench's own CPU stays out of the program's way.
pub(super) const UNWOUND_PER_INTERVAL: usize = 20;

/// How to configure the walk of the tracked process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Walk {
    /// nothing tracked: every run exits early (the baseline)
    Untracked,
    /// whole stacks (what the agent does)
    Full,
    /// stop at the anchor, kept on the top frame by a userspace walk every 100 ms (the agent)
    AgentAnchor,
    /// whole stacks of a `deep.py DEPTH native` target (its leaf in C under C under Python),
    /// each record with a native section (`--native`) if `section`; stopping at the anchor if
    /// `anchored` (3.15, as the agent does)
    NativeTarget { section: bool, anchored: bool },
}

impl Walk {
    /// `deep.py`'s second argument.
    pub(super) fn target_kind(self) -> &'static str {
        if matches!(self, Walk::NativeTarget { .. }) {
            "native"
        } else {
            "busy"
        }
    }

    /// Whether the program stops at the anchor, which this process keeps on the top frame.
    pub(super) fn anchored(self) -> bool {
        matches!(
            self,
            Walk::AgentAnchor | Walk::NativeTarget { anchored: true, .. }
        )
    }
}

/// Starts `script ARGS` under `py`, waits for its `ready` line and locates its runtime.
pub(super) fn spawn_target(
    py: &Interpreter,
    script: &Path,
    args: &[String],
) -> Result<(Proc, PythonTarget)> {
    let mut cmd = py.script_command(script, args)?;
    let name = script.file_name().unwrap_or_default().to_string_lossy();
    let what = format!("{} {name} {}", py.name, args.join(" "));
    let target = Proc::spawn_ready(&mut cmd, what, "ready", READY)?;
    let located = locate_runtime(target.pid())
        .with_context(|| format!("locating the runtime of {}", py.name))?;
    Ok((target, located))
}

/// Loads the sampler, tracks a fresh `deep.py DEPTH busy` (or `native`) target as `walk` says
/// for `secs`, and returns the program's run statistics and counters.
pub(super) fn measure(
    py: &Interpreter,
    script: &Path,
    depth: usize,
    walk: Walk,
    stop_after: u32,
    secs: f64,
    rate: u64,
) -> Result<Cost> {
    let kind = walk.target_kind();
    let (target, located) = spawn_target(py, script, &[depth.to_string(), kind.to_owned()])?;
    let pid = target.pid();
    let offsets = located.offsets;
    let anchored = walk.anchored();
    let mut u = Unwinder::new(
        located,
        UnwindOptions {
            frame_cache: anchored,
            ..UnwindOptions::default()
        },
    );
    if anchored && !u.frame_cache_enabled() {
        bail!("{} has no frame-cache anchor", py.name);
    }
    let mut threads = Vec::new();
    let interpreters = u.threads().context("reading the thread list")?;
    // The main interpreter (the oldest, last in the list), whose GIL every record reads.
    let main_interp = interpreters.last().map_or(0, |(i, _)| i.addr);
    for (_, list) in interpreters {
        for t in list {
            let host = u
                .host_tid(t.native_thread_id)
                .context("thread not in /proc")?;
            threads.push((host, t));
        }
    }
    // Walks are measured on the target's thread alone, so that every run is a walk; the
    // baseline samples every CPU, as the agent does.
    let only_thread = match walk {
        Walk::Untracked => None,
        _ => Some(threads.first().context("the target has no thread")?.0),
    };
    let mut s = BpfSampler::load(&BpfConfig {
        rate_hz: rate,
        enable_stats: true,
        only_thread,
        stop_after,
        ..BpfConfig::default()
    })
    .context("loading the BPF sampler (needs root)")?;
    if s.run_stats().is_none() {
        bail!("the kernel's BPF run-time statistics could not be enabled (needs CAP_SYS_ADMIN)");
    }
    if walk != Walk::Untracked {
        for (host, t) in &threads {
            s.set_thread(*host, t.addr)?;
        }
        // As the agent configures it: the walk, and where the GIL is.
        let mut proc = pa_proc_for(&offsets, anchored);
        set_gil(&mut proc, &offsets, u.target().runtime_addr, main_interp);
        if matches!(walk, Walk::NativeTarget { section: true, .. }) {
            proc.flags |= common::PROC_NATIVE;
        }
        s.track_process(pid, &proc)?;
    }
    let mut incomplete = 0;
    let mut native = NativeCount::default();
    let mut native_unwinder = NativeUnwinder::new(pid, pyagent::config::DebugDirs::default());
    let mut intervals = Intervals::default();
    let end = Instant::now() + Duration::from_secs_f64(secs);
    while Instant::now() < end {
        // The agent's cadence: drain, then (3.15) walk in userspace, which moves the anchors.
        std::thread::sleep(Duration::from_millis(100));
        let mut unwound = 0;
        s.drain(|r| {
            let h = r.header();
            if h.read_failed() || h.is_truncated() {
                incomplete += 1;
            }
            if let Some(n) = r.native() {
                native.records += 1;
                native.stack_bytes += u64::from(n.hdr.stack_bytes);
                native.kernel_frames += u64::from(n.hdr.kernel_frames);
                if unwound < UNWOUND_PER_INTERVAL {
                    unwound += 1;
                    native.unwound += 1;
                    native.frames += native_unwinder.stack(n).frames.len() as u64;
                }
            }
        });
        if anchored {
            u.refresh_anchors().context("refreshing the anchors")?;
        }
        intervals.record(s.run_stats().context("BPF statistics vanished")?);
    }
    let totals = s.run_stats().context("BPF statistics vanished")?;
    let sums = s.counter_sums().unwrap_or([0; common::COUNTER_COUNT]);
    Ok(Cost::from_counters(
        totals, &sums, incomplete, native, intervals,
    ))
}
