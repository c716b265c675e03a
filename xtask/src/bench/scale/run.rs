//! What runs processes: the kernel's BPF statistics switched on for the bench, the N target
//! processes, and one run of the service beside them, read at both ends of its window. Every
//! process is killed when its guard is dropped, on error too, and dies with the bench
//! ([`util::die_with_bench`]).

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::args::OffCpu;
use super::proc_files::{process_status, profiles_in, programs_of};
use super::window::{Snapshot, Window};
use crate::bench::util::{self, niced, Interpreter, Proc};

/// The sysctl of the kernel's BPF run-time statistics.
const STATS_SYSCTL: &str = "/proc/sys/kernel/bpf_stats_enabled";
/// Frames of the sleeping targets (the module's included).
const SLEEPER_DEPTH: usize = 20;
/// Frames of the busy targets, as in `bench ebpf`.
const BUSY_DEPTH: usize = 30;
/// The agent's `--interval`, seconds.
pub(super) const INTERVAL_SECS: u64 = 10;

/// `kernel.bpf_stats_enabled` on while this lives; its previous value restored when dropped.
#[derive(Debug)]
pub(super) struct BpfStats {
    previous: String,
}

impl BpfStats {
    /// Switches the statistics on.
    pub(super) fn on() -> Result<BpfStats> {
        let previous = std::fs::read_to_string(STATS_SYSCTL)
            .with_context(|| format!("cannot read {STATS_SYSCTL}"))?
            .trim()
            .to_owned();
        std::fs::write(STATS_SYSCTL, "1")
            .with_context(|| format!("cannot enable {STATS_SYSCTL} (needs root)"))?;
        Ok(BpfStats { previous })
    }
}

impl Drop for BpfStats {
    fn drop(&mut self) {
        if let Err(e) = std::fs::write(STATS_SYSCTL, &self.previous) {
            eprintln!(
                "bench scale: cannot restore {STATS_SYSCTL} to {}: {e}",
                self.previous
            );
        }
    }
}

/// The bench's Python processes: `busy` spinning, the others asleep and waking 10 times a
/// second. Killed when dropped.
#[derive(Debug, Default)]
pub(super) struct Targets {
    procs: Vec<Proc>,
}

impl Targets {
    /// Starts `n` processes of `py`, `busy` of them busy (at nice 19: they take every idle
    /// cycle yet leave the agent the CPU it asks for), and waits for each to say it is ready.
    pub(super) fn start(py: &Interpreter, n: usize, busy: usize) -> Result<Targets> {
        let sleeper = util::bench_script("sleeper.py");
        let deep = util::bench_script("deep.py");
        let mut targets = Targets::default();
        for i in 0..n {
            let mut cmd = if i < busy {
                let inner =
                    py.script_command(&deep, &[BUSY_DEPTH.to_string(), "busy".to_owned()])?;
                niced(&inner, 19)
            } else {
                py.script_command(&sleeper, &[SLEEPER_DEPTH.to_string()])?
            };
            util::die_with_bench(&mut cmd);
            let what = format!(
                "{} {} #{i}",
                py.name,
                if i < busy { "busy" } else { "sleeper" }
            );
            targets.procs.push(Proc::spawn(&mut cmd, what)?);
        }
        // They start together: a generous deadline for the last of them.
        let deadline =
            Instant::now() + Duration::from_secs(60) + Duration::from_millis(200) * n as u32;
        for p in &mut targets.procs {
            p.wait_line(
                |l| l == "ready",
                deadline.saturating_duration_since(Instant::now()),
            )?;
        }
        Ok(targets)
    }

    /// Their pids.
    pub(super) fn pids(&self) -> BTreeSet<u32> {
        self.procs.iter().map(Proc::pid).collect()
    }

    /// Context switches of their threads so far.
    fn switches(&self) -> u64 {
        self.procs
            .iter()
            .filter_map(|p| process_status(p.pid()))
            .map(|s| s.switches)
            .sum()
    }
}

impl Drop for Targets {
    fn drop(&mut self) {
        // All killed first, then reaped: not one at a time.
        for p in &self.procs {
            p.signal(libc::SIGKILL);
        }
        self.procs.clear();
    }
}

/// Everything the window needs, read now.
fn snapshot(agent: u32, targets: &Targets, dir: &Path, origin: Instant) -> Result<Snapshot> {
    let at = origin.elapsed().as_secs_f64();
    let agent_cpu = util::proc_cpu_secs(agent).context("the agent's /proc/PID/stat")?;
    let status = process_status(agent).context("the agent's /proc/PID/status")?;
    Ok(Snapshot {
        at,
        agent_cpu,
        rss_kib: status.rss_kib.unwrap_or(0),
        hwm_kib: status.hwm_kib.unwrap_or(0),
        programs: programs_of(agent),
        switches: targets.switches(),
        profiles: profiles_in(dir),
    })
}

/// Waits `d`, failing if the agent exits meanwhile.
fn watch(agent: &mut Proc, d: Duration) -> Result<()> {
    let end = Instant::now() + d;
    loop {
        if let Some((usage, stderr)) = agent.try_wait()? {
            bail!(
                "the agent exited early (status {}): {}",
                usage.status,
                stderr.trim()
            );
        }
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        std::thread::sleep(left.min(Duration::from_millis(500)));
    }
}

/// Runs the service (`agent`) beside `targets` with off-CPU as `off_cpu`: `warmup` after it
/// started, then the window of `measure`. Returns the window and the agent's last line.
pub(super) fn run_agent(
    agent: &Path,
    off_cpu: OffCpu,
    targets: &Targets,
    warmup: Duration,
    measure: Duration,
) -> Result<(Window, String)> {
    let dir = std::env::temp_dir().join(format!("pyagent-scale-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut cmd = Command::new(agent);
    cmd.args(["--all-python", "--mode", "ebpf", "--interval"])
        .arg(format!("{INTERVAL_SECS}s"))
        .args(["--metrics-addr", "127.0.0.1:0", "-o"])
        .arg(&dir)
        .env("PYAGENT_OFF_CPU", off_cpu.env());
    util::die_with_bench(&mut cmd);
    let mut p = Proc::spawn(&mut cmd, format!("pyagent service, off-CPU {off_cpu}"))?;
    let pid = p.pid();
    let started = p.wait_stderr_line(
        |l| l.contains("pyagent service started"),
        Duration::from_secs(120) + Duration::from_millis(100) * targets.procs.len() as u32,
    );
    if let Err(e) = started {
        // Its own words, if it said any before dying.
        let said = p
            .wait(Duration::from_secs(5))
            .map(|(_, s)| s)
            .unwrap_or_default();
        return Err(e.context(said.trim().to_owned()));
    }
    watch(&mut p, warmup)?;
    let origin = Instant::now();
    let a = snapshot(pid, targets, &dir, origin)?;
    watch(&mut p, measure)?;
    let b = snapshot(pid, targets, &dir, origin)?;
    p.signal(libc::SIGTERM);
    let (usage, stderr) = p.wait(Duration::from_secs(60))?;
    let _ = std::fs::remove_dir_all(&dir);
    if !usage.success() {
        bail!("the agent failed after SIGTERM: {}", stderr.trim());
    }
    let last = stderr.lines().last().unwrap_or("").to_owned();
    Ok((Window::between(&a, &b, &targets.pids()), last))
}
