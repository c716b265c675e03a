//! One run of the release agent (`pyagent --all-python`), watched from outside: its CPU time and
//! RSS polled, the run time of the BPF programs it loads read from the kernel.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use super::agent_output::{off_cpu_line, samples_in, summary_line, AgentRun, Readings};
use crate::bench::util::{self, Proc};

/// The sampler's program, as the kernel knows it.
const PROGRAM: &str = "pa_sample";
/// The off-CPU program (on `sched_switch`).
const SWITCH_PROGRAM: &str = "pa_switch";

/// Runs the agent on every Python process for `secs` in `mode` with `extra` arguments, and
/// measures it from outside: its CPU and RSS, and the run time of its BPF programs.
pub(super) fn run_agent(agent: &Path, mode: &str, secs: f64, extra: &[&str]) -> Result<AgentRun> {
    let dir = std::env::temp_dir().join(format!("pyagent-bench-agent-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // Kernel statistics for the agent's program, read from outside it.
    let _stats = aya::sys::enable_stats(aya::sys::Stats::RunTime).ok();
    let before = program_ids(PROGRAM);
    let switch_before = program_ids(SWITCH_PROGRAM);
    let mut cmd = std::process::Command::new(agent);
    cmd.args([
        "--all-python",
        "--mode",
        mode,
        "-r",
        "99",
        "-d",
        &secs.to_string(),
        "-o",
    ])
    .arg(&dir)
    .args(extra);
    let mut p = Proc::spawn(&mut cmd, format!("pyagent --mode {mode}"))?;
    let pid = p.pid();
    let scanned = p
        .wait_stderr_line(
            |l| l.starts_with("pyagent: profiling every CPython process"),
            Duration::from_secs(120),
        )
        .ok()
        .map(|_| {
            (
                Instant::now(),
                util::proc_cpu_secs(pid),
                util::proc_cpu_secs_precise(pid),
            )
        });
    // The agent samples for `secs` after that line, then writes its profiles and exits.
    let sampling_end = scanned
        .as_ref()
        .map(|s| s.0 + Duration::from_secs_f64((secs - 0.5).max(0.0)));
    let mut readings = Readings {
        scanned,
        ..Readings::default()
    };
    let half = scanned
        .as_ref()
        .map(|s| s.0 + Duration::from_secs_f64((secs - 0.5).max(0.0) / 2.0));
    let mut bpf: Option<(u64, Instant, Instant)> = None;
    let mut switch_ns: Option<u64> = None;
    let mut steady_rss: Option<u64> = None;
    let deadline = Instant::now() + Duration::from_secs_f64(secs + 120.0);
    let (usage, stderr) = loop {
        if mode == "ebpf" {
            if let Some(ns) = agent_program_run_ns(PROGRAM, &before) {
                let first = bpf.map_or_else(Instant::now, |(_, f, _)| f);
                bpf = Some((ns, first, Instant::now()));
            }
            switch_ns = agent_program_run_ns(SWITCH_PROGRAM, &switch_before).or(switch_ns);
        }
        if scanned.is_some() {
            if let Some(rss) = util::proc_rss_bytes(pid) {
                steady_rss = Some(steady_rss.map_or(rss, |m| m.max(rss)));
            }
        }
        if sampling_end.is_some_and(|end| Instant::now() < end) {
            if let Some(cpu) = util::proc_cpu_secs_precise(pid) {
                readings.last_sampling = Some((Instant::now(), cpu));
                if readings.halfway.is_none() && half.is_some_and(|h| Instant::now() >= h) {
                    readings.halfway = readings.last_sampling;
                }
            }
        }
        if let Some(done) = p.try_wait()? {
            break done;
        }
        if Instant::now() > deadline {
            p.wait(Duration::ZERO)?;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let end = Instant::now();
    let profiles = std::fs::read_dir(&dir).ok().map(|d| d.count());
    let _ = std::fs::remove_dir_all(&dir);
    let summary = summary_line(&stderr);
    let off_cpu_line = off_cpu_line(&stderr);
    if !usage.success() {
        bail!("pyagent --mode {mode} failed: {}", stderr.trim());
    }
    Ok(AgentRun {
        steady: readings.steady(usage.cpu_secs(), end),
        sampling: readings.sampling(),
        second_half: readings.second_half(),
        usage,
        steady_rss,
        bpf: bpf.map(|(ns, first, last)| (ns, (last - first).as_secs_f64().max(1e-3))),
        switch_ns,
        profiles,
        samples: samples_in(&summary),
        summary,
        off_cpu_line,
    })
}

/// Ids of the loaded programs called `name`.
fn program_ids(name: &str) -> BTreeSet<u32> {
    aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .filter(|p| p.name_as_str() == Some(name))
        .map(|p| p.id())
        .collect()
}

/// Run time (ns) of the one program `name` loaded since `before` was taken (none if zero or
/// several: then it cannot be told apart from someone else's).
fn agent_program_run_ns(name: &str, before: &BTreeSet<u32>) -> Option<u64> {
    let mut new = aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .filter(|p| p.name_as_str() == Some(name) && !before.contains(&p.id()));
    let p = new.next()?;
    if new.next().is_some() {
        return None;
    }
    u64::try_from(p.run_time().as_nanos()).ok()
}
