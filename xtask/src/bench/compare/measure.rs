//! The three kinds of runs: slowdown (which also gives the profilers' cost), accuracy and
//! throughput, then the toggled slowdown ([`super::toggled`]). Every process is bounded by a
//! deadline and killed when its handle drops.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde::Deserialize;

use super::plan::{configurations, rate_label, Plan, Suite};
use super::profiled_run::{script, ProfiledRun, READY, SLACK};
use super::profiler::{self, Profiler, Sampled, Tools};
use super::results::{
    describe, Accuracy, AccuracyRow, Cost, Outcome, Results, SlowRow, SlowRun, Step, ThroughputRow,
};
use super::toggled;
use crate::bench::util::{self, Interpreter, Proc};

/// The hot functions of compare_accuracy.py, with the callers each must have above it
/// (innermost first).
pub const HOT: [(&str, &[&str]); 3] = [
    ("hot_a", &["run"]),
    ("hot_b", &["b1", "run"]),
    ("hot_c", &["c3", "c2", "c1", "run"]),
];

/// What `compare_slowdown.py` prints at exit.
#[derive(Debug, Deserialize)]
struct SlowdownReport {
    per_sec: f64,
    calls: f64,
    cpu_secs: f64,
}

/// What `compare_accuracy.py` prints at exit.
#[derive(Debug, Deserialize)]
struct AccuracyReport {
    share: std::collections::BTreeMap<String, f64>,
    lines: std::collections::BTreeMap<String, u32>,
    spans: std::collections::BTreeMap<String, [u32; 2]>,
}

/// Runs everything in `plan`.
pub fn run(tools: &Tools, suites: &[Suite], plan: &Plan) -> Result<Results> {
    let slowdown = if plan.toggled_only {
        Vec::new()
    } else {
        slowdown(tools, suites, plan)
    };
    let wake_floor = match (
        plan.toggled_only,
        suites.first(),
        plan.slowdown_rates_hz.last(),
    ) {
        (false, Some(suite), Some(&rate_hz)) => wake_floor(tools, &suite.interp, rate_hz, plan)
            .map_err(|e| eprintln!("wake floor: failed: {e:#}"))
            .ok(),
        _ => None,
    };
    let toggled = if plan.toggle_s > 0.0 {
        toggled::measure(tools, suites, plan)
    } else {
        Vec::new()
    };
    if plan.slowdown_only || plan.toggled_only {
        return Ok(Results {
            slowdown,
            accuracy: Vec::new(),
            throughput: Vec::new(),
            toggled,
            perf_max_rate: (None, None),
            wake_floor,
        });
    }
    let accuracy = accuracy(tools, suites, plan);
    let before = perf_max_sample_rate();
    let throughput = throughput(tools, suites, plan);
    Ok(Results {
        slowdown,
        accuracy,
        throughput,
        toggled,
        perf_max_rate: (before, perf_max_sample_rate()),
        wake_floor,
    })
}

/// What waking alone costs: a thread that sleeps to the next tick at `rate_hz` and does nothing
/// else, for the slowdown window, beside the busy target of the slowdown runs (one run). Every
/// sampler that wakes once a sample (pyagent's userspace mode, py-spy, Austin, Tachyon) pays at
/// least this per sample. Returns CPU seconds (the thread's own, `RUSAGE_THREAD`) per 1000
/// wakes; a pass that found itself behind and did not sleep is not a wake.
fn wake_floor(tools: &Tools, interp: &Interpreter, rate_hz: u32, plan: &Plan) -> Result<f64> {
    let args = [plan.lead_s.to_string(), plan.window_s.to_string()];
    let run = ProfiledRun::start(
        tools,
        interp,
        "compare_slowdown.py",
        &args,
        Profiler::None,
        rate_hz,
        0,
        plan.target_cpu,
    )?;
    let window = Duration::from_secs_f64(plan.window_s);
    let period = Duration::from_secs_f64(1.0 / f64::from(rate_hz.max(1)));
    let (cpu_secs, wakes) = std::thread::spawn(move || {
        let thread_cpu = || {
            // SAFETY: rusage is plain data (zeroes are valid), and getrusage fills it.
            let u = unsafe {
                let mut u: libc::rusage = std::mem::zeroed();
                libc::getrusage(libc::RUSAGE_THREAD, &mut u);
                u
            };
            let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
            secs(u.ru_utime) + secs(u.ru_stime)
        };
        let before = thread_cpu();
        let start = Instant::now();
        let (mut next, mut wakes) = (start, 0u64);
        while start.elapsed() < window {
            next += period;
            if let Some(wait) = next.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
                wakes += 1;
            }
        }
        (thread_cpu() - before, wakes)
    })
    .join()
    .map_err(|_| anyhow!("the waking thread panicked"))?;
    run.finish(plan.lead_s + plan.window_s)?;
    eprintln!(
        "wake floor {}: {wakes} wakes, {cpu_secs:.4} CPU s",
        rate_label(rate_hz)
    );
    Ok(cpu_secs * 1000.0 / wakes.max(1) as f64)
}

/// `kernel.perf_event_max_sample_rate`: the kernel lowers it when perf interrupts take long.
pub fn perf_max_sample_rate() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate")
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn slowdown(tools: &Tools, suites: &[Suite], plan: &Plan) -> Vec<SlowRow> {
    let mut rows = Vec::new();
    for (suite, s) in suites.iter().enumerate() {
        for (profiler, rate_hz) in configurations(s, plan) {
            rows.push(SlowRow {
                suite,
                profiler,
                rate_hz,
                runs: Vec::new(),
                errors: Vec::new(),
            });
        }
    }
    let profiled = rows.iter().filter(|r| r.profiler != Profiler::None).count();
    let baselines = rows.iter().filter(|r| r.profiler == Profiler::None).count();
    let total = (2 * profiled + baselines) * plan.reps;
    let mut done = 0;
    for rep in 0..plan.reps {
        for (suite, s) in suites.iter().enumerate() {
            // A suite whose profilers `--profilers` left out has no rows at all.
            let Some(base) = rows
                .iter()
                .position(|r| r.suite == suite && r.profiler == Profiler::None)
            else {
                continue;
            };
            let mut order: Vec<usize> = (0..rows.len())
                .filter(|&i| rows[i].suite == suite && i != base)
                .collect();
            // Round robin, rotated each round so that no configuration always follows another.
            let len = order.len().max(1);
            order.rotate_left(rep * 3 % len);
            // none, A, none, B, none, ...: every profiled run sits between two unprofiled ones,
            // which cancels the drift of a shared machine's load over the minutes of a round.
            let mut seq: Vec<(usize, Option<SlowRun>)> = Vec::new();
            for i in std::iter::once(base).chain(order.into_iter().flat_map(|i| [i, base])) {
                done += 1;
                let row = &mut rows[i];
                let what = format!(
                    "slowdown [{done}/{total}] rep {} {} {} {}",
                    rep + 1,
                    s.interp.name,
                    row.profiler.label(),
                    rate_label(row.rate_hz)
                );
                match slowdown_run(tools, &s.interp, row.profiler, row.rate_hz, plan) {
                    Ok(r) => {
                        eprintln!(
                            "{what}: {:.0} calls/s{}",
                            r.per_sec,
                            r.profiler
                                .map(|c| format!(
                                    ", {} samples, {:.3} CPU s",
                                    c.samples, c.cpu_secs
                                ))
                                .unwrap_or_default()
                        );
                        seq.push((i, Some(r)));
                    }
                    Err(e) => {
                        eprintln!("{what}: failed: {e:#}");
                        row.errors.push(format!("{e:#}"));
                        seq.push((i, None));
                    }
                }
            }
            let at = |k: Option<usize>| {
                k.and_then(|k| seq.get(k))
                    .and_then(|(_, r)| r.as_ref())
                    .map(|r| (r.per_sec, r.per_cpu_sec))
            };
            let mean = |a: Option<(f64, f64)>, b: Option<(f64, f64)>| match (a, b) {
                (Some(a), Some(b)) => Some(((a.0 + b.0) / 2.0, (a.1 + b.1) / 2.0)),
                (a, b) => a.or(b),
            };
            for k in 0..seq.len() {
                let Some(mut run) = seq[k].1.clone() else {
                    continue;
                };
                // Profiled runs sit at odd places, unprofiled ones at even places.
                let (before, after) = if k % 2 == 1 {
                    (k.checked_sub(1), Some(k + 1))
                } else {
                    (k.checked_sub(2), Some(k + 2))
                };
                run.reference = match (at(before), at(after)) {
                    // An unprofiled run at either end has one neighbour only: no reference, so
                    // the noise estimate uses the same two-sided average as the profiled runs.
                    (Some(a), Some(b)) => mean(Some(a), Some(b)),
                    (a, b) if k % 2 == 1 => mean(a, b),
                    _ => None,
                };
                rows[seq[k].0].runs.push(run);
            }
        }
    }
    rows
}

fn slowdown_run(
    tools: &Tools,
    interp: &Interpreter,
    profiler: Profiler,
    rate_hz: u32,
    plan: &Plan,
) -> Result<SlowRun> {
    let args = [plan.lead_s.to_string(), plan.window_s.to_string()];
    let (json, sampled) = ProfiledRun::start(
        tools,
        interp,
        "compare_slowdown.py",
        &args,
        profiler,
        rate_hz,
        plan.attached_secs(plan.window_s),
        plan.target_cpu,
    )?
    .finish(plan.lead_s + plan.window_s)?;
    let r: SlowdownReport = serde_json::from_str(&json)
        .with_context(|| format!("compare_slowdown.py printed {json:?}"))?;
    Ok(SlowRun {
        per_sec: r.per_sec,
        per_cpu_sec: r.calls / r.cpu_secs.max(1e-9),
        profiler: sampled.as_ref().map(Cost::of),
        reference: None,
    })
}

fn accuracy(tools: &Tools, suites: &[Suite], plan: &Plan) -> Vec<AccuracyRow> {
    let mut rows = Vec::new();
    for (suite, s) in suites.iter().enumerate() {
        for &profiler in &s.profilers {
            let result =
                accuracy_run(tools, &s.interp, profiler, plan).map_err(|e| format!("{e:#}"));
            match &result {
                Ok(a) => eprintln!(
                    "accuracy {} {}: {} samples, max error {:.2} points, lines {:.1}% exact",
                    s.interp.name,
                    profiler.label(),
                    a.samples,
                    a.max_error_pp(),
                    a.lines_exact * 100.0
                ),
                Err(e) => eprintln!(
                    "accuracy {} {}: failed: {e}",
                    s.interp.name,
                    profiler.label()
                ),
            }
            rows.push(AccuracyRow {
                suite,
                profiler,
                result,
            });
        }
    }
    rows
}

fn accuracy_run(
    tools: &Tools,
    interp: &Interpreter,
    profiler: Profiler,
    plan: &Plan,
) -> Result<Accuracy> {
    let args = [plan.lead_s.to_string(), plan.accuracy_window_s.to_string()];
    let (json, sampled) = ProfiledRun::start(
        tools,
        interp,
        "compare_accuracy.py",
        &args,
        profiler,
        plan.accuracy_rate_hz,
        plan.attached_secs(plan.accuracy_window_s),
        plan.target_cpu,
    )?
    .finish(plan.lead_s + plan.accuracy_window_s)?;
    let report: AccuracyReport = serde_json::from_str(&json)
        .with_context(|| format!("compare_accuracy.py printed {json:?}"))?;
    let sampled = sampled.ok_or_else(|| anyhow!("no profiler"))?;
    score(&report, &sampled)
}

/// Compares a profiler's stacks with what compare_accuracy.py measured.
fn score(report: &AccuracyReport, sampled: &Sampled) -> Result<Accuracy> {
    let mut truth = [0.0; 3];
    let mut lines = [0; 3];
    let mut spans = [[0; 2]; 3];
    for (i, (name, _)) in HOT.iter().enumerate() {
        truth[i] = *report
            .share
            .get(*name)
            .with_context(|| format!("compare_accuracy.py reported no share for {name}"))?;
        lines[i] = *report
            .lines
            .get(*name)
            .with_context(|| format!("compare_accuracy.py reported no line for {name}"))?;
        spans[i] = *report
            .spans
            .get(*name)
            .with_context(|| format!("compare_accuracy.py reported no span for {name}"))?;
    }
    let (mut counts, mut exact, mut wrong, mut callers) = ([0u64; 3], 0u64, 0u64, 0u64);
    for stack in &sampled.stacks {
        // The innermost hot frame (they call nothing, so it is the leaf when present).
        let hit = stack
            .frames
            .iter()
            .enumerate()
            .rev()
            .find_map(|(at, f)| HOT.iter().position(|(name, _)| f.is(name)).map(|i| (at, i)));
        let Some((at, i)) = hit else { continue };
        counts[i] += stack.count;
        match stack.frames[at].line {
            Some(l) if l == lines[i] => exact += stack.count,
            Some(l) if (spans[i][0]..=spans[i][1]).contains(&l) => {}
            _ => wrong += stack.count,
        }
        let above = stack.frames[..at].iter().rev();
        if HOT[i].1.len() <= at && above.zip(HOT[i].1).all(|(f, name)| f.is(name)) {
            callers += stack.count;
        }
    }
    let hot: u64 = counts.iter().sum();
    if hot == 0 {
        bail!(
            "no sample in hot_a, hot_b or hot_c among {} samples",
            sampled.samples()
        );
    }
    Ok(Accuracy {
        truth,
        measured: counts.map(|c| c as f64 / hot as f64),
        hot_samples: hot,
        samples: sampled.samples(),
        lines_exact: exact as f64 / hot as f64,
        lines_wrong: wrong as f64 / hot as f64,
        callers_exact: callers as f64 / hot as f64,
    })
}

fn throughput(tools: &Tools, suites: &[Suite], plan: &Plan) -> Vec<ThroughputRow> {
    let mut rows = Vec::new();
    for (suite, s) in suites.iter().enumerate() {
        for &profiler in &s.profilers {
            // Startup and teardown: the wall time past the duration in the first run (the
            // shallowest stack at the lowest rate, which every profiler keeps up with).
            let mut overhead_s = None;
            for &depth in &plan.depths {
                let mut steps = Vec::new();
                for &rate_hz in &plan.throughput_rates_hz {
                    let mut outcome = match profiler.refuses(rate_hz) {
                        Some(why) => Outcome::Refused(why),
                        None => throughput_run(tools, &s.interp, profiler, depth, rate_hz, plan)
                            .unwrap_or_else(|e| Outcome::Failed(format!("{e:#}"))),
                    };
                    if let Outcome::Measured { late_s, .. } = &mut outcome {
                        let over = *overhead_s.get_or_insert(*late_s);
                        *late_s = (*late_s - over).max(0.0);
                    }
                    let step = Step {
                        rate_hz,
                        outcome,
                        sustain_share: plan.sustain_share,
                        late_allowed_s: 0.25 * f64::from(plan.throughput_s),
                    };
                    eprintln!(
                        "throughput {} {} depth {depth} {}: {}",
                        s.interp.name,
                        profiler.label(),
                        rate_label(rate_hz),
                        describe(&step)
                    );
                    let stop = !step.sustained();
                    steps.push(step);
                    if stop {
                        break;
                    }
                }
                rows.push(ThroughputRow {
                    suite,
                    profiler,
                    depth,
                    steps,
                });
            }
        }
    }
    rows
}

fn throughput_run(
    tools: &Tools,
    interp: &Interpreter,
    profiler: Profiler,
    depth: u32,
    rate_hz: u32,
    plan: &Plan,
) -> Result<Outcome> {
    let secs = plan.throughput_s;
    // Long enough for any startup, short enough that a profiler running late (py-spy's duration
    // is a number of samples) is cut off by the target's exit soon after.
    let lifetime = Duration::from_secs(3 * u64::from(secs) + 5);
    let args = [depth.to_string(), lifetime.as_secs().to_string()];
    let mut cmd = interp.script_command(&script("compare_deep.py"), &args)?;
    let mut target = Proc::spawn(&mut cmd, format!("{} compare_deep.py {depth}", interp.name))?;
    target.wait_line(|l| l.starts_with("ready"), READY)?;
    let watch = CpuWatch::start(target.pid());
    let attached = profiler::attach(tools, profiler, interp, target.pid(), rate_hz, secs)?;
    let sampled = attached.finish(lifetime + SLACK);
    let cpu = watch.stop();
    drop(target);
    let sampled = sampled?;
    let wall_expected = f64::from(rate_hz) * f64::from(secs);
    // The target's share of a CPU over the last `secs` seconds before the profiler exited: the
    // sampling, since teardown (writing the output) takes milliseconds.
    let end = cpu
        .last()
        .map(|c| c.0)
        .context("no CPU reading of the target")?;
    let start = end
        .checked_sub(Duration::from_secs(secs.into()))
        .context("clock too young")?;
    let before = cpu
        .iter()
        .rev()
        .find(|c| c.0 <= start)
        .or(cpu.first())
        .context("no CPU reading of the target")?;
    let last = cpu.last().expect("checked above");
    let target_cpu_secs = last.1 - before.1;
    let on_cpu = (target_cpu_secs / (last.0 - before.0).as_secs_f64().max(1e-9)).min(1.0);
    let expected = if profiler == Profiler::PyagentEbpf {
        wall_expected * on_cpu
    } else {
        wall_expected
    };
    let full_depth = sampled
        .stacks
        .iter()
        .filter(|s| s.frames.len() >= depth as usize)
        .map(|s| s.count)
        .sum();
    Ok(Outcome::Measured {
        collected: sampled.samples(),
        expected,
        full_depth,
        target_cpu_secs,
        lagged: sampled.lagged,
        dropped: sampled.dropped,
        cpu_secs: sampled.usage.cpu_secs(),
        late_s: sampled.usage.wall.as_secs_f64() - f64::from(secs),
    })
}

/// Reads a process's CPU time every 20 ms in a thread, until stopped.
struct CpuWatch {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<(Instant, f64)>>,
}

impl CpuWatch {
    fn start(pid: u32) -> CpuWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut readings = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                if let Some(cpu) = util::proc_cpu_secs(pid) {
                    readings.push((Instant::now(), cpu));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            if let Some(cpu) = util::proc_cpu_secs(pid) {
                readings.push((Instant::now(), cpu));
            }
            readings
        });
        CpuWatch { stop, thread }
    }

    /// `(when, CPU seconds)` readings, oldest first.
    fn stop(self) -> Vec<(Instant, f64)> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::super::profiler::{Frame, Stack};
    use super::*;

    fn stack(frames: &[(&str, u32)], count: u64) -> Stack {
        Stack {
            frames: frames
                .iter()
                .map(|&(f, l)| Frame {
                    function: f.into(),
                    line: Some(l),
                })
                .collect(),
            count,
        }
    }

    #[test]
    fn scores_shares_lines_and_callers() {
        let report: AccuracyReport = serde_json::from_str(
            r#"{"share": {"hot_a": 0.6, "hot_b": 0.3, "hot_c": 0.1},
                "lines": {"hot_a": 24, "hot_b": 30, "hot_c": 36},
                "spans": {"hot_a": [22, 25], "hot_b": [28, 31], "hot_c": [34, 37]}}"#,
        )
        .expect("fixture");
        let m = ("<module>", 80);
        let run = ("run", 70);
        let sampled = Sampled {
            usage: util::Usage {
                status: 0,
                user: Duration::ZERO,
                sys: Duration::ZERO,
                max_rss: 0,
                wall: Duration::ZERO,
            },
            stacks: vec![
                stack(&[m, run, ("hot_a", 24)], 58),
                // entry line: right, not exact
                stack(&[m, run, ("hot_a", 22)], 1),
                // outside hot_a: wrong
                stack(&[m, run, ("hot_a", 99)], 1),
                stack(&[m, run, ("b1", 45), ("hot_b", 30)], 30),
                // a caller missing: the share counts, the callers do not
                stack(&[m, run, ("c1", 48), ("c3", 56), ("hot_c", 36)], 2),
                stack(
                    &[m, run, ("c1", 48), ("c2", 52), ("c3", 56), ("hot_c", 36)],
                    8,
                ),
                // in none of the hot functions
                stack(&[m, run], 5),
            ],
            lagged: None,
            dropped: None,
        };
        let a = score(&report, &sampled).expect("scores");
        assert_eq!((a.samples, a.hot_samples), (105, 100));
        assert_eq!(a.measured, [0.6, 0.3, 0.1]);
        assert!(a.max_error_pp() < 1e-9);
        assert!((a.lines_exact - 0.98).abs() < 1e-9);
        assert!((a.lines_wrong - 0.01).abs() < 1e-9);
        assert!((a.callers_exact - 0.98).abs() < 1e-9);
    }

    #[test]
    fn a_late_profiler_does_not_sustain_its_rate() {
        let step = |collected, late_s| Step {
            rate_hz: 1000,
            outcome: Outcome::Measured {
                collected,
                expected: 2000.0,
                full_depth: collected,
                target_cpu_secs: 2.0,
                lagged: None,
                dropped: None,
                cpu_secs: 0.1,
                late_s,
            },
            sustain_share: 0.9,
            late_allowed_s: 0.5,
        };
        assert!(step(1800, 0.0).sustained());
        assert!(!step(1799, 0.0).sustained());
        assert!(!step(2000, 8.0).sustained());
    }
}
