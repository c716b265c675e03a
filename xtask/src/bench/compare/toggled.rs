//! Target slowdown measured within one run: the profiler stays attached, and the harness pauses
//! and resumes it in alternate windows of 50 ms while the target counts its work.
//!
//! Separate runs (a process started, attached to, measured and ended for every pair) leave a
//! spread of about 3 points between two unprofiled runs on these VMs: resolving ±0.5 points took
//! some 300 pairs per configuration. Within one run the two halves of a pair are on the same
//! process, CPU and warmed-up interpreter. How far apart they may be is set by how the host's
//! noise moves: on these VMs the target's calls per CPU-second wander by some 27% (a 60 s
//! unprofiled run, 10 ms slices), slowly (the rate 10 ms later correlates 0.9 with this one,
//! 100 ms later 0.6, 1 s later 0.14). Two adjacent halves of 500 ms then differ by 13 points
//! (robust spread), two of 50 ms by 5, of 10 ms by 3: short windows cancel what drifts, and give
//! ten times the pairs in the same time.
//!
//! Pausing a profiler: every process of it gets SIGSTOP (a sampler that is stopped reads
//! nothing), and for pyagent's eBPF mode, whose cost is the BPF program run in the target's own
//! context, its perf events are disabled too (the harness takes copies of the agent's perf event
//! descriptors with `pidfd_getfd` and sends `PERF_EVENT_IOC_DISABLE`). A profiler that catches up
//! on missed samples when resumed (Tachyon does, in a burst) does so in the first fifth of a
//! window ([`guard`]), which is left out; so is the same time after a pause.
//!
//! `compare_toggle.py` records slices of about 2 ms (start and end on `CLOCK_MONOTONIC`, calls,
//! its thread's CPU time); each window sums the slices inside it, and each pair gives the
//! slowdown of the profiled half against the paused half in calls per CPU-second of the target.
//! The order within a pair is drawn at random so that a trend inside a pair cancels.

use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::io::AsRawFd;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::Deserialize;

use super::plan::{configurations, rate_label, Plan, Suite, RESOLVED_PP};
use super::profiled_run::ProfiledRun;
use super::profiler::{Profiler, Tools};
use super::results::ToggledRow;
use crate::bench::stats;
use crate::bench::util::Interpreter;

/// Left out at the start of every window of `window_s` seconds: the change of state takes effect
/// (signals delivered, a resumed profiler's catch-up burst). A fifth of the window: 10 ms of
/// 50 ms, in which a profiler resumed after 50 ms catches up on at most 50 samples.
pub fn guard(window_s: f64) -> Duration {
    Duration::from_secs_f64(window_s / 5.0)
}
/// A window whose target used less CPU than this share of it is left out: the target was
/// stopped (a blocking profiler paused while it held the target).
const MIN_CPU_SHARE: f64 = 0.5;

/// What `compare_toggle.py` prints at exit.
#[derive(Debug, Deserialize)]
struct Slices {
    /// `[start_ns, end_ns, calls, cpu_ns]`
    slices: Vec<[u64; 4]>,
}

/// Every configuration of every suite, none included (its two halves are both unpaused: the
/// noise floor of the method), and beside pyagent's eBPF mode the timer-only control.
pub fn measure(tools: &Tools, suites: &[Suite], plan: &Plan) -> Vec<ToggledRow> {
    let mut rows = Vec::new();
    for (suite, s) in suites.iter().enumerate() {
        // Beside pyagent's eBPF mode, the perf events alone: what of its slowdown is the timer.
        let control = s.profilers.contains(&Profiler::PyagentEbpf).then(|| {
            plan.slowdown_rates_hz
                .iter()
                .map(|&r| (Profiler::TimerOnly, r))
        });
        let configurations = configurations(s, plan).chain(control.into_iter().flatten());
        for (profiler, rate_hz) in configurations {
            let what = format!(
                "toggled slowdown {} {} {}",
                s.interp.name,
                profiler.label(),
                rate_label(rate_hz)
            );
            // A target that dies mid-run (once, py-spy's blocking mode at 1 kHz) loses the row
            // of a 40-minute run: one more attempt, and the report says why it was needed.
            let mut first_failure = None;
            let mut result = run(tools, &s.interp, profiler, rate_hz, plan);
            if let Err(e) = &result {
                eprintln!("{what}: failed, once more: {e:#}");
                first_failure = Some(format!("{e:#}"));
                result = run(tools, &s.interp, profiler, rate_hz, plan);
            }
            // An interval too wide to resolve the target (py-spy's blocking mode at 1 kHz,
            // whose stopped halves are left out: a half-width of 0.53 points once) gets a second
            // run's pairs: the same configuration, so the pairs pool.
            let mut runs = 1;
            if let Ok((pairs, left_out)) = &mut result {
                let wide =
                    stats::median_ci95(pairs).is_some_and(|(lo, hi)| (hi - lo) / 2.0 > RESOLVED_PP);
                if wide {
                    eprintln!("{what}: interval wider than resolved, one more run to pool");
                    match run(tools, &s.interp, profiler, rate_hz, plan) {
                        Ok((more, more_left_out)) => {
                            pairs.extend(more);
                            *left_out += more_left_out;
                            runs = 2;
                        }
                        Err(e) => eprintln!("{what}: the second run failed, kept the first: {e:#}"),
                    }
                }
            }
            let row = match result {
                Ok((pairs, left_out)) => {
                    let median = stats::median(&pairs);
                    eprintln!(
                        "{what}: {} pairs ({left_out} left out), median {median:+.2}%",
                        pairs.len()
                    );
                    ToggledRow {
                        suite,
                        profiler,
                        rate_hz,
                        pairs,
                        left_out,
                        error: None,
                        first_failure,
                        runs,
                    }
                }
                Err(e) => {
                    eprintln!("{what}: failed: {e:#}");
                    ToggledRow {
                        suite,
                        profiler,
                        rate_hz,
                        pairs: Vec::new(),
                        left_out: 0,
                        error: Some(format!("{e:#}")),
                        first_failure,
                        runs,
                    }
                }
            };
            rows.push(row);
        }
    }
    rows
}

/// A half of a pair.
#[derive(Debug, Clone, Copy)]
struct Window {
    profiled: bool,
    start_ns: u64,
    end_ns: u64,
}

fn run(
    tools: &Tools,
    interp: &Interpreter,
    profiler: Profiler,
    rate_hz: u32,
    plan: &Plan,
) -> Result<(Vec<f64>, usize)> {
    let lead = Duration::from_secs_f64(plan.toggle_lead_s);
    let span = Duration::from_secs_f64(plan.toggle_s);
    let window = Duration::from_secs_f64(plan.toggle_window_s);
    // Each half also costs its signals, ioctls and the sleep's overshoot (well under a
    // millisecond): a tenth more than the span keeps the last halves within the target's run.
    let target_secs = (lead + span.mul_f64(1.1) + Duration::from_secs(1)).as_secs_f64();
    let timer_only = profiler == Profiler::TimerOnly;
    let run = ProfiledRun::start(
        tools,
        interp,
        "compare_toggle.py",
        &[target_secs.to_string()],
        if timer_only { Profiler::None } else { profiler },
        rate_hz,
        target_secs.ceil() as u32 + 5,
        plan.target_cpu,
    )?;
    // Opened before the lead, as a profiler attaches before it.
    let timers = timer_only.then(|| Pause::timers(rate_hz)).transpose()?;
    // The lead is the warm-up all profilers get (Tachyon's interpreter starts, the target's
    // caches settle with the profiler on); pyagent's eBPF attach is also waited for, below.
    std::thread::sleep(lead);
    let pause = match (timers, run.profiler_pid()) {
        (Some(timers), _) => Some(timers),
        (None, Some(pid)) => Some(Pause::of(profiler, pid)?),
        (None, None) => None,
    };
    let mut windows = Vec::new();
    let mut order = Order::new(u64::from(rate_hz) ^ (profiler as u64) << 32);
    let pairs = (span.as_secs_f64() / (2.0 * window.as_secs_f64())).floor() as usize;
    for _ in 0..pairs {
        let first_profiled = order.coin();
        for profiled in [first_profiled, !first_profiled] {
            if let Some(p) = &pause {
                p.set(!profiled)?;
            }
            let start_ns = monotonic_ns();
            std::thread::sleep(window);
            windows.push(Window {
                profiled,
                start_ns,
                end_ns: monotonic_ns(),
            });
        }
    }
    if let Some(p) = &pause {
        p.set(false)?;
    }
    let (json, _) = run.finish(target_secs)?;
    let slices: Slices = serde_json::from_str(&json)
        .with_context(|| format!("compare_toggle.py printed {:.200}", json))?;
    Ok(pair_slowdowns(
        &windows,
        &slices.slices,
        guard(plan.toggle_window_s),
    ))
}

/// The slowdown of each pair of `windows` (profiled against not) from the target's slices, and
/// the number of pairs left out.
fn pair_slowdowns(windows: &[Window], slices: &[[u64; 4]], guard: Duration) -> (Vec<f64>, usize) {
    let guard = guard.as_nanos() as u64;
    // Calls per CPU-second inside a window, past its guard; None when the target hardly ran.
    let rate = |w: &Window| -> Option<f64> {
        let from = w.start_ns + guard;
        let (calls, cpu) = slices
            .iter()
            .filter(|s| s[0] >= from && s[1] <= w.end_ns)
            .fold((0u64, 0u64), |(c, t), s| (c + s[2], t + s[3]));
        let span = w.end_ns.saturating_sub(from) as f64;
        (cpu as f64 >= MIN_CPU_SHARE * span && cpu > 0).then(|| calls as f64 / cpu as f64)
    };
    let mut out = Vec::new();
    let mut left_out = 0;
    for pair in windows.chunks_exact(2) {
        let (on, off) = if pair[0].profiled {
            (&pair[0], &pair[1])
        } else {
            (&pair[1], &pair[0])
        };
        match (rate(on), rate(off)) {
            (Some(on), Some(off)) => out.push((1.0 - on / off) * 100.0),
            _ => left_out += 1,
        }
    }
    (out, left_out)
}

/// `CLOCK_MONOTONIC` in ns: Python's `time.monotonic_ns` on Linux.
fn monotonic_ns() -> u64 {
    // SAFETY: a zeroed timespec is a valid out-parameter.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: clock_gettime with a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A coin for each pair's order (xorshift: reproducible, no dependency).
struct Order(u64);

impl Order {
    fn new(seed: u64) -> Order {
        Order(seed | 1)
    }

    fn coin(&mut self) -> bool {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 & 1 == 1
    }
}

/// How a running profiler is paused and resumed.
struct Pause {
    /// The profiler's processes (itself and its descendants: a chroot's interpreter).
    pids: Vec<i32>,
    /// Copies of its perf event descriptors (pyagent's eBPF mode).
    perf_events: Vec<OwnedFd>,
}

/// `PERF_EVENT_IOC_ENABLE` and `_DISABLE`: `_IO('$', 0)` and `_IO('$', 1)`.
const PERF_EVENT_IOC_ENABLE: libc::c_ulong = 0x2400;
const PERF_EVENT_IOC_DISABLE: libc::c_ulong = 0x2401;

impl Pause {
    fn of(profiler: Profiler, pid: u32) -> Result<Pause> {
        let pids = with_descendants(pid as i32);
        let perf_events = if profiler == Profiler::PyagentEbpf {
            attached_perf_events(pid as i32)?
        } else {
            Vec::new()
        };
        Ok(Pause { pids, perf_events })
    }

    /// The control [`Profiler::TimerOnly`]: a `cpu-clock` event on every online CPU sampling at
    /// `rate_hz`, enabled, with no buffer and no program (each overflow is dropped).
    fn timers(rate_hz: u32) -> Result<Pause> {
        let online = std::fs::read_to_string("/sys/devices/system/cpu/online")
            .context("cannot read /sys/devices/system/cpu/online")?;
        let period_ns = 1_000_000_000 / u64::from(rate_hz.max(1));
        let perf_events = cpu_list(&online)
            .with_context(|| format!("/sys/devices/system/cpu/online: {online:?}"))?
            .into_iter()
            .map(|cpu| cpu_clock_event(-1, cpu, period_ns, false))
            .collect::<Result<_>>()?;
        Ok(Pause {
            pids: Vec::new(),
            perf_events,
        })
    }

    /// Pauses (`true`) or resumes the profiler.
    fn set(&self, paused: bool) -> Result<()> {
        let request = if paused {
            PERF_EVENT_IOC_DISABLE
        } else {
            PERF_EVENT_IOC_ENABLE
        };
        for fd in &self.perf_events {
            // SAFETY: an ioctl without argument on a perf event descriptor we own.
            if unsafe { libc::ioctl(fd.as_raw_fd(), request, 0) } != 0 {
                bail!(
                    "perf event ioctl {request:#x}: {}",
                    std::io::Error::last_os_error()
                );
            }
        }
        let sig = if paused { libc::SIGSTOP } else { libc::SIGCONT };
        for &pid in &self.pids {
            // SAFETY: kill(2); a profiler process that exited meanwhile makes it fail, harmlessly.
            unsafe { libc::kill(pid, sig) };
        }
        Ok(())
    }
}

/// The CPUs of a kernel CPU list (`0-1,3`).
fn cpu_list(text: &str) -> Result<Vec<i32>> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let (first, last) = part.split_once('-').unwrap_or((part, part));
        let (first, last): (i32, i32) = (first.parse()?, last.parse()?);
        cpus.extend(first..=last);
    }
    if cpus.is_empty() {
        bail!("no CPU listed");
    }
    Ok(cpus)
}

/// A `cpu-clock` perf event (`perf_event_open`) of `pid` (-1: every process) on `cpu` (-1: any),
/// sampling every `period_ns` when that is not 0, and created disabled or not.
fn cpu_clock_event(pid: i32, cpu: i32, period_ns: u64, disabled: bool) -> Result<OwnedFd> {
    // perf_event_attr, its first 64 bytes (PERF_ATTR_SIZE_VER0): type PERF_TYPE_SOFTWARE (1) and
    // size; config PERF_COUNT_SW_CPU_CLOCK (0); sample_period; sample_type PERF_SAMPLE_IP |
    // PERF_SAMPLE_TID; flags, bit 0 `disabled`.
    let mut attr = [0u64; 8];
    attr[0] = 1 | (64 << 32);
    attr[2] = period_ns;
    attr[3] = if period_ns > 0 { 0x1 | 0x2 } else { 0 };
    attr[5] = u64::from(disabled);
    const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;
    // SAFETY: perf_event_open(2) with a valid attr of the size it states; result checked.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr.as_ptr(),
            pid,
            cpu,
            -1,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        bail!(
            "perf_event_open(cpu-clock, cpu {cpu}): {}",
            std::io::Error::last_os_error()
        );
    }
    // SAFETY: a descriptor perf_event_open just returned, owned here alone.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// `pid` and every process below it.
fn with_descendants(pid: i32) -> Vec<i32> {
    let parents: Vec<(i32, i32)> = procfs::process::all_processes()
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|p| p.stat().ok().map(|s| (s.pid, s.ppid)))
        .collect();
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() {
        let parent = out[i];
        out.extend(
            parents
                .iter()
                .filter(|(_, pp)| *pp == parent)
                .map(|(p, _)| *p),
        );
        i += 1;
    }
    out
}

/// Copies of pyagent's perf event descriptors once it has opened them all: their number
/// unchanged over three looks 100 ms apart (one per CPU, opened one after the other).
fn attached_perf_events(pid: i32) -> Result<Vec<OwnedFd>> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let (mut last, mut same) = (0, 0);
    loop {
        let fds = perf_event_fds(pid)?;
        same = if fds.len() == last { same + 1 } else { 0 };
        last = fds.len();
        if last > 0 && same >= 2 {
            return Ok(fds);
        }
        if std::time::Instant::now() >= deadline {
            bail!("pyagent (pid {pid}) holds {last} perf events after 30 s: not attached");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Copies of the perf event descriptors `pid` holds.
fn perf_event_fds(pid: i32) -> Result<Vec<OwnedFd>> {
    // SAFETY: pidfd_open(2) with no flags; the result is checked.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if pidfd < 0 {
        bail!("pidfd_open({pid}): {}", std::io::Error::last_os_error());
    }
    // SAFETY: a descriptor pidfd_open just returned, owned here alone.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as i32) };
    let dir = format!("/proc/{pid}/fd");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).with_context(|| format!("cannot list {dir}"))? {
        let entry = entry?;
        let is_perf = std::fs::read_link(entry.path())
            .is_ok_and(|l| l.as_os_str() == "anon_inode:[perf_event]");
        let Some(fd) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if !is_perf {
            continue;
        }
        // SAFETY: pidfd_getfd(2) on a pidfd we own; the result is checked.
        let copy = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
        if copy < 0 {
            bail!(
                "pidfd_getfd({pid}, {fd}): {}",
                std::io::Error::last_os_error()
            );
        }
        // SAFETY: a descriptor pidfd_getfd just returned, owned here alone.
        out.push(unsafe { OwnedFd::from_raw_fd(copy as i32) });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Slices of 10 ms from 0 to 2 s: `calls_at(start_ns)` calls, 10 ms of CPU each.
    fn slices(calls_at: impl Fn(u64) -> u64) -> Vec<[u64; 4]> {
        (0..200)
            .map(|i| {
                let start = i * 10_000_000;
                [start, start + 10_000_000, calls_at(start), 10_000_000]
            })
            .collect()
    }

    #[test]
    fn each_pair_compares_its_profiled_half_with_its_paused_half_past_the_guard() {
        // Two pairs of 500 ms windows, the second pair in the other order. In the profiled
        // halves the target makes 98 calls a slice instead of 100, except for a burst of 50 in
        // the guard at the start of each window, which must not count.
        let windows = [
            (true, 0),
            (false, 500_000_000),
            (false, 1_000_000_000),
            (true, 1_500_000_000),
        ]
        .map(|(profiled, start_ns)| Window {
            profiled,
            start_ns,
            end_ns: start_ns + 500_000_000,
        });
        let profiled = |t: u64| {
            windows
                .iter()
                .any(|w| w.profiled && (w.start_ns..w.end_ns).contains(&t))
        };
        let s = slices(|t| {
            let in_guard = t % 500_000_000 < 100_000_000;
            match (profiled(t), in_guard) {
                (true, true) => 50,
                (true, false) => 98,
                (false, _) => 100,
            }
        });
        let (pairs, left_out) = pair_slowdowns(&windows, &s, guard(0.5));
        assert_eq!(left_out, 0);
        assert_eq!(pairs.len(), 2);
        for p in pairs {
            assert!((p - 2.0).abs() < 1e-9, "{p}");
        }
    }

    /// The default geometry: halves of 50 ms, a guard of 10 ms, slices of 2 ms. A slice that
    /// straddles the guard's end or the window's is left out; the rest gives the slowdown.
    #[test]
    fn fifty_ms_halves_of_two_ms_slices() {
        assert_eq!(guard(0.05), Duration::from_millis(10));
        let windows = [(false, 1_000_000), (true, 51_000_000)].map(|(profiled, start_ns)| Window {
            profiled,
            start_ns,
            end_ns: start_ns + 50_000_000,
        });
        let s: Vec<[u64; 4]> = (0..60)
            .map(|i| {
                let start = i * 2_000_000;
                let calls = if start >= 51_000_000 { 49 } else { 50 };
                [start, start + 2_000_000, calls, 2_000_000]
            })
            .collect();
        let (pairs, left_out) = pair_slowdowns(&windows, &s, guard(0.05));
        assert_eq!(left_out, 0);
        assert_eq!(pairs.len(), 1);
        assert!((pairs[0] - 2.0).abs() < 1e-9, "{pairs:?}");
    }

    #[test]
    fn a_half_with_the_target_stopped_leaves_its_pair_out() {
        let windows = [(true, 0), (false, 500_000_000)].map(|(profiled, start_ns)| Window {
            profiled,
            start_ns,
            end_ns: start_ns + 500_000_000,
        });
        // The paused half: the target ran 1 ms of every 10 (a blocking profiler held it).
        let mut s = slices(|_| 100);
        for slice in s.iter_mut().filter(|s| s[0] >= 500_000_000) {
            slice[3] = 1_000_000;
        }
        assert_eq!(pair_slowdowns(&windows, &s, guard(0.5)), (Vec::new(), 1));
    }

    /// A disabled software counter of this process's CPU clock.
    fn cpu_clock_counter() -> OwnedFd {
        cpu_clock_event(0, -1, 0, true).expect("perf_event_open")
    }

    fn count(fd: &OwnedFd) -> u64 {
        let mut v = 0u64;
        // SAFETY: read(2) of 8 bytes into a u64.
        let n = unsafe { libc::read(fd.as_raw_fd(), (&raw mut v).cast(), 8) };
        assert_eq!(n, 8);
        v
    }

    fn spin(ms: u64) {
        let until = std::time::Instant::now() + Duration::from_millis(ms);
        let mut x = 0u64;
        while std::time::Instant::now() < until {
            x = std::hint::black_box(x.wrapping_add(1));
        }
    }

    #[test]
    fn cpu_lists_are_read_with_their_ranges() {
        assert_eq!(cpu_list("0-1\n").expect("list"), [0, 1]);
        assert_eq!(cpu_list("0,2-3,7").expect("list"), [0, 2, 3, 7]);
        assert!(cpu_list("\n").is_err());
        assert!(cpu_list("0-x").is_err());
    }

    /// The tests that open perf events in this process: one at a time (the other counts them).
    static PERF_EVENTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// The control's events count on every CPU while resumed, and stop while paused.
    #[test]
    fn the_timer_only_control_counts_while_resumed_and_stops_while_paused() {
        let _one = PERF_EVENTS.lock().unwrap_or_else(|e| e.into_inner());
        let timers = Pause::timers(1000).expect("cpu-clock events on every CPU");
        let total = |p: &Pause| p.perf_events.iter().map(count).sum::<u64>();
        let before = total(&timers);
        spin(20);
        assert!(total(&timers) > before, "enabled at once, they count");
        timers.set(true).expect("pause");
        let paused = total(&timers);
        spin(20);
        assert_eq!(total(&timers), paused, "paused, they stand still");
        timers.set(false).expect("resume");
        spin(20);
        assert!(total(&timers) > paused, "resumed, they count again");
    }

    #[test]
    fn the_perf_events_a_process_holds_are_found_and_paused_through_their_copies() {
        let _one = PERF_EVENTS.lock().unwrap_or_else(|e| e.into_inner());
        let counter = cpu_clock_counter();
        let copies = perf_event_fds(std::process::id() as i32).expect("our own descriptors");
        assert_eq!(copies.len(), 1, "the one perf event this test opened");
        let pause = Pause {
            pids: Vec::new(),
            perf_events: copies,
        };
        pause.set(false).expect("enable");
        spin(20);
        let running = count(&counter);
        assert!(running > 0, "enabled through the copy, it counts");
        pause.set(true).expect("disable");
        let paused = count(&counter);
        spin(20);
        assert_eq!(
            count(&counter),
            paused,
            "disabled through the copy, it stops"
        );
    }
}
