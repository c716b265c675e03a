//! The report's markdown, one method per section, in the order they appear.

use std::fmt::Write as _;

use super::cells::{failed, one_line, opt, pass, python};
use super::machine::Machine;
use super::ranking;
use super::summary::{
    cost_of, depth_cost, marginal_cost, noise_pp, slow_row, slowdowns, toggled_of, Paired, Spread,
};
use super::targets::{self, Target};
use crate::bench::compare::plan::{rate_label, Plan, Suite, RESOLVED_PP};
use crate::bench::compare::profiler::{Profiler, Tools};
use crate::bench::compare::results::{describe, Outcome, Results, SlowRow};
use crate::bench::compare::toggled;
use crate::bench::stats::median;
use crate::bench::util::Table;

/// The first columns of a slowdown table: profiler, Python, and per rate the median with its
/// interval and the verdict against the target.
/// A table of a row per profiler and Python, with two columns per depth.
fn per_depth_table(depths: &[u32], columns: [&str; 2]) -> Table {
    let mut header = vec!["profiler".to_owned(), "Python".to_owned()];
    for d in depths {
        header.extend(columns.iter().map(|c| format!("depth {d}: {c}")));
    }
    let hdr: Vec<&str> = header.iter().map(String::as_str).collect();
    Table::new(&hdr)
}

fn slowdown_header(rates: &[u32]) -> Vec<String> {
    let mut header = vec!["profiler".to_owned(), "Python".to_owned()];
    for r in rates {
        let at = rate_label(*r);
        header.push(format!("{at}: per CPU-s [95% CI]"));
        header.push(format!("{at}: target"));
    }
    header
}

/// `≤ 2%: met (±0.31, resolved)`.
fn verdict_cell(p: &Paired, max_pct: f64) -> String {
    let resolved = if p.half_width() <= RESOLVED_PP {
        "resolved"
    } else {
        "not resolved"
    };
    format!(
        "≤ {max_pct}%: {} (±{:.2}, {resolved})",
        p.verdict(max_pct),
        p.half_width()
    )
}

/// What every section reads.
#[derive(Clone, Copy)]
pub(super) struct Report<'a> {
    pub machine: &'a Machine,
    pub tools: &'a Tools,
    pub suites: &'a [Suite],
    pub plan: &'a Plan,
    pub results: &'a Results,
}

impl<'a> Report<'a> {
    /// What the numbered sections read: the suites, the plan and the results.
    fn measured(&self) -> (&'a [Suite], &'a Plan, &'a Results) {
        (self.suites, self.plan, self.results)
    }

    /// The run: command, machine, plan, profilers and interpreters.
    pub(super) fn header(&self, w: &mut String) {
        let Report {
            machine,
            tools,
            suites,
            plan,
            results,
        } = *self;
        let _ = writeln!(w, "# pyagent beside py-spy, Austin and Tachyon\n");
        let _ = writeln!(w, "- command: `{}`", machine.command);
        let _ = writeln!(
            w,
            "- machine: {} CPUs, {}, Linux {}; `perf_event_max_sample_rate` {} before the throughput \
             runs, {} after",
            machine.cpus,
            machine.cpu_model,
            machine.kernel,
            opt(results.perf_max_rate.0),
            opt(results.perf_max_rate.1)
        );
        let _ = writeln!(
            w,
            "- {} at start, {} at end; the run took {:.1} min",
            machine.load_before, machine.load_after, machine.minutes
        );
        let _ = writeln!(
            w,
            "- plan: {} repetition(s); slowdown window {} s after a {} s lead; accuracy {} s at {}; \
             throughput {} s per rate, {:.0}% of rate × duration to sustain",
            plan.reps,
            plan.window_s,
            plan.lead_s,
            plan.lead_s + plan.accuracy_window_s,
            rate_label(plan.accuracy_rate_hz),
            plan.throughput_s,
            plan.sustain_share * 100.0
        );
        if plan.toggle_s > 0.0 {
            let _ = writeln!(
                w,
                "- toggled slowdown: {} s of pairs of {} s windows per configuration, after a {} s \
                 lead{}",
                plan.toggle_s,
                plan.toggle_window_s,
                plan.toggle_lead_s,
                if plan.toggled_only {
                    " (`--toggled-only`: nothing else was run)"
                } else {
                    ""
                }
            );
        }
        let _ = writeln!(
            w,
            "- profilers: pyagent `{}`, py-spy 0.4.3 `{}`, Austin 3.7.0 `{}`, Tachyon = `python3.15 \
             -m profiling.sampling attach` of the {} chroot",
            tools.agent.display(),
            tools.py_spy.display(),
            tools.austin.display(),
            suites[1].interp.name
        );
        let _ = writeln!(
            w,
            "- Python: the main rows run on {}; Tachyon exists only in 3.15, so it and pyagent also \
             run on {}. Austin 3.7.0 refuses the chroot's 3.14 and 3.15 (\"not a Python process\"), \
             so the 3.15 rows have no Austin.\n",
            python(suites, 0),
            python(suites, 1)
        );
    }

    /// 1. How much each profiler slows the target down.
    pub(super) fn slowdown(&self, w: &mut String) {
        let (suites, plan, results) = self.measured();
        let pinned = plan
            .target_cpu
            .map_or("not pinned (one CPU)".to_owned(), |c| {
                format!("pinned to CPU {c}")
            });
        let _ = writeln!(
            w,
            "## 1. Target slowdown\n\nPaired runs: every round runs none, A, none, B, none, ... \
             with the target {pinned} and the profiler free on the other CPUs; each profiled run \
             is compared with the unprofiled runs just before and after it (positive = slower). \
             The main measure is the work `compare_slowdown.py` does per second of its own CPU \
             time in its {} s window, which the load of a shared machine (waiting for a CPU) does \
             not move: median of the paired differences over the repetitions, with its 95% \
             confidence interval (distribution-free, order statistics). A slowdown is resolved \
             when the interval's half-width is at most {RESOLVED_PP} points; a target is met when \
             the whole interval is within it, not met when the whole interval is beyond it. The \
             `none` row pairs the unprofiled runs with each other (each against the ones two \
             places away): the method's own spread, which should straddle 0. Per CPU-second hides \
             time the target spends stopped (py-spy's default) or waiting for a CPU: the \
             wall-clock column (median [min, max]) keeps it.\n",
            plan.window_s,
        );
        let rates = &plan.slowdown_rates_hz;
        let mut header = slowdown_header(rates);
        header.extend(rates.iter().map(|r| format!("{} (wall)", rate_label(*r))));
        let hdr: Vec<&str> = header.iter().map(String::as_str).collect();
        let mut t = Table::new(&hdr);
        let wall = |row: &SlowRow| {
            Spread::of(&slowdowns(row, false)).map_or_else(|| failed(row), |s| s.pct())
        };
        let paired = |row: &SlowRow, max_pct: Option<f64>| -> [String; 2] {
            match Paired::of(row) {
                Some(p) => {
                    let verdict = max_pct.map_or_else(String::new, |max| verdict_cell(&p, max));
                    [format!("{} n={}", p.pct(), p.n), verdict]
                }
                None => [failed(row), "too few pairs".to_owned()],
            }
        };
        for (si, suite) in suites.iter().enumerate() {
            // A suite whose profilers `--profilers` left out was not measured.
            let Some(base) = slow_row(results, si, Profiler::None, 0) else {
                continue;
            };
            let calls: Vec<f64> = base.runs.iter().map(|r| r.per_cpu_sec).collect();
            let mut cells = vec![
                format!(
                    "none ({} calls per CPU-s)",
                    if calls.is_empty() {
                        "-".into()
                    } else {
                        format!("{:.0}", median(&calls))
                    }
                ),
                python(suites, si),
            ];
            for _ in rates {
                cells.extend(paired(base, None));
            }
            cells.extend(std::iter::repeat_n(wall(base), rates.len()));
            t.row(cells);
            for &p in &suite.profilers {
                let mut cells = vec![p.label().to_owned(), python(suites, si)];
                for &rate in rates {
                    let row = slow_row(results, si, p, rate).expect("row per rate");
                    cells.extend(paired(row, targets::slowdown_target(rate)));
                }
                for &rate in rates {
                    cells.push(wall(slow_row(results, si, p, rate).expect("row per rate")));
                }
                t.row(cells);
            }
        }
        let _ = writeln!(w, "{}", t.render());
    }

    /// 1b. Target slowdown with the profiler paused and resumed within one run.
    pub(super) fn toggled(&self, w: &mut String) {
        let (suites, plan, results) = self.measured();
        let _ = writeln!(
            w,
            "## 1b. Target slowdown, the profiler paused and resumed within one run\n\nOne run per \
             profiler and rate: the profiler stays attached for {:.0} s while the harness pauses \
             and resumes it in alternate {} s windows (SIGSTOP and SIGCONT to its processes; \
             pyagent's eBPF mode also has its perf events disabled and enabled), the order within \
             each pair drawn at random; the first {} ms of each window are left out. Each pair \
             gives the slowdown of the profiled half against the paused half in calls per \
             CPU-second of `compare_toggle.py` (positive = slower): median with its 95% \
             confidence interval (order statistics). The `none` row pairs windows of an \
             unprofiled run: the method's own spread. Resolved: half-width ≤ {RESOLVED_PP} points. \
             A pair is left out when a half saw the target stopped (py-spy paused while it held \
             the target). A row whose first run's interval was wider than that pools a second \
             run's pairs (`pooled from 2 runs`). `cpu-clock events only (control)`: no profiler, a `cpu-clock` perf \
             event on every CPU at the rate with no program and no buffer, opened and toggled by \
             the harness: what any perf-event sampler pays before its own work.\n",
            plan.toggle_s,
            plan.toggle_window_s,
            toggled::guard(plan.toggle_window_s).as_millis(),
        );
        let rates = &plan.slowdown_rates_hz;
        let header = slowdown_header(rates);
        let hdr: Vec<&str> = header.iter().map(String::as_str).collect();
        let mut t = Table::new(&hdr);
        let cells = |si: usize, p: Profiler, rate: u32| -> [String; 2] {
            let row = results
                .toggled
                .iter()
                .find(|r| r.suite == si && r.profiler == p && r.rate_hz == rate);
            let Some(row) = row else {
                return ["-".into(), String::new()];
            };
            let retried = row.first_failure.as_ref().map_or(String::new(), |e| {
                format!(" (second attempt; the first failed: {})", one_line(e))
            });
            if let Some(e) = &row.error {
                return [format!("failed: {}{retried}", one_line(e)), String::new()];
            }
            let Some(paired) = Paired::of_values(&row.pairs) else {
                return [
                    format!("{} pairs{retried}", row.pairs.len()),
                    "too few pairs".into(),
                ];
            };
            let mut left_out = if row.left_out > 0 {
                format!(", {} left out", row.left_out)
            } else {
                String::new()
            };
            left_out += &retried;
            if row.runs > 1 {
                left_out += &format!(", pooled from {} runs", row.runs);
            }
            let verdict = targets::slowdown_target(rate)
                .map_or_else(String::new, |max| verdict_cell(&paired, max));
            [
                format!("{} n={}{left_out}", paired.pct(), paired.n),
                verdict,
            ]
        };
        for (si, suite) in suites
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.profilers.is_empty())
        {
            let mut none = vec!["none".to_owned(), python(suites, si)];
            none.extend(cells(si, Profiler::None, 0).into_iter().take(1));
            none.push(String::new());
            none.extend(std::iter::repeat_n(
                String::new(),
                2 * rates.len().saturating_sub(1),
            ));
            t.row(none);
            let control = results
                .toggled
                .iter()
                .any(|r| r.suite == si && r.profiler == Profiler::TimerOnly)
                .then_some(Profiler::TimerOnly);
            for p in suite.profilers.iter().copied().chain(control) {
                let mut row = vec![p.label().to_owned(), python(suites, si)];
                for &rate in rates {
                    row.extend(cells(si, p, rate));
                }
                t.row(row);
            }
        }
        let _ = writeln!(w, "{}", t.render());
    }

    /// 2. What each profiler costs in CPU.
    pub(super) fn cost(&self, w: &mut String) {
        let (suites, plan, results) = self.measured();
        let rates = &plan.slowdown_rates_hz;
        let _ = writeln!(
            w,
            "## 2. Profiler cost\n\nCPU seconds (user + system, `wait4` rusage of the profiler \
             process from start to exit, startup included) per 1000 samples found in its output, and \
             samples per run: medians of the slowdown runs (each about {:.1} s of sampling). \
             Marginal: the extra CPU seconds per extra 1000 samples from {} to {}, which leaves out \
             the startup both pay. pyagent's eBPF program runs in the perf interrupt on the target's \
             CPU, so its time is charged to the target (it shows in section 1), not here.\n",
            plan.lead_s + plan.window_s,
            rate_label(*rates.first().expect("a slowdown rate")),
            rate_label(*rates.last().expect("a slowdown rate"))
        );
        let mut header = vec!["profiler".to_owned(), "Python".to_owned()];
        for r in rates {
            header.push(format!("{}: CPU s / 1000 samples", rate_label(*r)));
            header.push(format!("{}: samples / run", rate_label(*r)));
        }
        header.push("marginal CPU s / 1000 samples".to_owned());
        header.push("lagged ticks / run".to_owned());
        let hdr: Vec<&str> = header.iter().map(String::as_str).collect();
        let mut t = Table::new(&hdr);
        for (si, suite) in suites.iter().enumerate() {
            for &p in &suite.profilers {
                let mut cells = vec![p.label().to_owned(), python(suites, si)];
                let mut lagged = Vec::new();
                for &rate in rates {
                    match cost_of(results, si, p, rate) {
                        Some(c) => {
                            cells.push(format!("{:.4}", c.per_k));
                            cells.push(format!("{:.0}", c.samples));
                        }
                        None => cells.extend(["-".to_owned(), "-".to_owned()]),
                    }
                    if let Some(row) = slow_row(results, si, p, rate) {
                        let l: Vec<f64> = row
                            .runs
                            .iter()
                            .filter_map(|r| r.profiler?.lagged.map(|l| l as f64))
                            .collect();
                        if !l.is_empty() {
                            lagged.push(format!("{:.0} at {}", median(&l), rate_label(rate)));
                        }
                    }
                }
                cells.push(
                    marginal_cost(results, plan, si, p).map_or("-".into(), |m| format!("{m:.4}")),
                );
                cells.push(if lagged.is_empty() {
                    "-".into()
                } else {
                    lagged.join(", ")
                });
                t.row(cells);
            }
        }
        let _ = writeln!(w, "{}", t.render());
        if let (Some(floor), Some(&rate)) = (results.wake_floor, rates.last()) {
            let _ = writeln!(
                w,
                "Sleeping alone: a thread of this harness that does nothing but sleep to the next \
                 tick at {} (no read, no aggregation), beside the same busy target, used {floor:.4} \
                 CPU s per 1000 wakes. Every sampler that sleeps to each sample pays at least that \
                 (py-spy, Austin, Tachyon, pyagent's userspace mode without `CAP_PERFMON`); not \
                 pyagent's userspace mode with it, woken by a cpu-clock perf event on its own CPU \
                 (re-armed in the kernel's interrupt, not by the sleeper), nor its eBPF mode, whose \
                 samples are taken in the target's perf interrupt.",
                rate_label(rate)
            );
            // What each sampler's extra samples cost above it, on the first interpreter (the
            // peers' one): the marginal cost, which like the floor has no start in it. pyagent's
            // userspace mode, which does not sleep, may cost less than the floor: no line then.
            let above = |p: Profiler| {
                marginal_cost(results, plan, 0, p)
                    .map(|m| m - floor)
                    .filter(|&a| a > 0.0)
            };
            if let Some(ours) = above(Profiler::PyagentUserspace) {
                let peers: Vec<String> = suites
                    .first()
                    .map(|s| s.profilers.as_slice())
                    .unwrap_or_default()
                    .iter()
                    .filter(|p| !p.is_pyagent())
                    .filter_map(|&p| {
                        let theirs = above(p)?;
                        Some(format!("{} {:.2}×", p.label(), ours / theirs))
                    })
                    .collect();
                let _ = write!(
                    w,
                    " Above it, pyagent userspace's marginal cost is {ours:.4} CPU s per 1000 \
                     samples on {} (one floor run against medians of {})",
                    python(suites, 0),
                    plan.reps
                );
                if !peers.is_empty() {
                    let _ = write!(w, "; pyagent ÷ each peer, above it: {}", peers.join(", "));
                }
                let _ = write!(w, ".");
            }
            let _ = writeln!(w, "\n");
        }
    }

    /// 3. How close each profile is to the known split.
    pub(super) fn accuracy(&self, w: &mut String) {
        let (suites, plan, results) = self.measured();
        let _ = writeln!(
            w,
            "## 3. Accuracy\n\n`compare_accuracy.py` spends its CPU time about 60/30/10 in `hot_a`, \
             `hot_b` and `hot_c`, 1, 2 and 4 frames below `run`; the truth is its own \
             `time.process_time()` per function. Each cell: the profiler's share of the samples in \
             the three functions (error in points). σ: one binomial standard error of the 60% share \
             for that many samples, the error a perfect sampler shows. Lines exact: samples whose hot \
             frame has the line of its loop; the others are on its `def` line (entry) or its \
             `return`, where it does spend a little time, unless counted as wrong: no line, or one \
             outside the function. Callers exact: samples with the right callers above the hot frame. \
             One run per profiler at {}.\n",
            rate_label(plan.accuracy_rate_hz)
        );
        let mut t = Table::new(&[
            "profiler",
            "Python",
            "samples (hot)",
            "hot_a",
            "hot_b",
            "hot_c",
            "max error",
            "σ",
            "lines exact",
            "wrong lines",
            "callers exact",
        ]);
        for (si, _) in suites.iter().enumerate() {
            let rows: Vec<_> = results.accuracy.iter().filter(|r| r.suite == si).collect();
            if let Some(truth) = rows
                .iter()
                .find_map(|r| r.result.as_ref().ok())
                .map(|a| a.truth)
            {
                let mut cells = vec![
                    "truth (process_time)".to_owned(),
                    python(suites, si),
                    "-".into(),
                ];
                cells.extend(truth.iter().map(|t| format!("{:.1}%", t * 100.0)));
                t.row(cells);
            }
            for row in rows {
                let mut cells = vec![row.profiler.label().to_owned(), python(suites, si)];
                match &row.result {
                    Ok(a) => {
                        cells.push(format!("{} ({})", a.samples, a.hot_samples));
                        for (measured, truth) in a.measured.iter().zip(&a.truth) {
                            cells.push(format!(
                                "{:.1}% ({:+.1})",
                                measured * 100.0,
                                (measured - truth) * 100.0
                            ));
                        }
                        cells.push(format!("{:.2}", a.max_error_pp()));
                        cells.push(format!("{:.2}", a.sigma_pp()));
                        cells.push(format!("{:.1}%", a.lines_exact * 100.0));
                        cells.push(format!("{:.2}%", a.lines_wrong * 100.0));
                        cells.push(format!("{:.1}%", a.callers_exact * 100.0));
                    }
                    Err(e) => cells.push(format!("failed: {}", one_line(e))),
                }
                t.row(cells);
            }
        }
        let _ = writeln!(w, "{}", t.render());
    }

    /// 4. The rates each profiler sustains.
    pub(super) fn throughput(&self, w: &mut String) {
        let (suites, plan, results) = self.measured();
        let _ = writeln!(
            w,
            "## 4. Throughput\n\nThe highest rate (of {}) at which a profiler collected at least \
             {:.0}% of rate × {} s from `compare_deep.py` holding a stack DEPTH frames deep, and what \
             happened at the next rate. The eBPF sampler fires per CPU, only while the target runs: \
             its expectation is rate × duration × the share of a CPU the target had meanwhile \
             (`/proc/PID/stat`). A profiler must also finish on time: at most 25% of the duration \
             later than its first run (depth {}, {}) took beyond the duration, since py-spy's \
             duration is a number of samples (rate × duration) that it keeps collecting, late, until \
             it has them or the target exits ({} s after the profiler starts). pyagent userspace \
             drops a tick it serves late and counts it as lagged. pyagent refuses rates above 10 kHz. \
             Samples short of the full depth are counted.\n",
            plan.throughput_rates_hz
                .iter()
                .map(|r| rate_label(*r))
                .collect::<Vec<_>>()
                .join(", "),
            plan.sustain_share * 100.0,
            plan.throughput_s,
            plan.depths.first().copied().unwrap_or(0),
            rate_label(plan.throughput_rates_hz.first().copied().unwrap_or(0)),
            3 * plan.throughput_s + 5
        );
        let mut t = per_depth_table(&plan.depths, ["sustained", "next rate"]);
        for (si, suite) in suites.iter().enumerate() {
            for &p in &suite.profilers {
                let mut cells = vec![p.label().to_owned(), python(suites, si)];
                for &d in &plan.depths {
                    let row = results
                        .throughput
                        .iter()
                        .find(|r| r.suite == si && r.profiler == p && r.depth == d);
                    let Some(row) = row else {
                        cells.extend(["-".to_owned(), "-".to_owned()]);
                        continue;
                    };
                    cells.push(row.sustained_hz().map_or("none".into(), rate_label));
                    cells.push(row.first_miss().map_or("- (all sustained)".into(), |s| {
                        format!("{}: {}", rate_label(s.rate_hz), one_line(&describe(s)))
                    }));
                }
                t.row(cells);
            }
        }
        let _ = writeln!(w, "{}", t.render());
        let details: Vec<String> = results
            .throughput
            .iter()
            .map(|r| {
                let steps: Vec<String> = r
                    .steps
                    .iter()
                    .map(|s| format!("{} {}", rate_label(s.rate_hz), one_line(&describe(s))))
                    .collect();
                let cpu: Vec<String> = r
                    .steps
                    .iter()
                    .filter_map(|s| match &s.outcome {
                        Outcome::Measured {
                            cpu_secs,
                            target_cpu_secs,
                            late_s,
                            ..
                        } => Some(format!("{cpu_secs:.2}/{target_cpu_secs:.2}/{late_s:.1}")),
                        _ => None,
                    })
                    .collect();
                format!(
                    "- {} {} depth {}: {} (profiler CPU s / target CPU s / s late: {})",
                    r.profiler.label(),
                    suites[r.suite].interp.name,
                    r.depth,
                    steps.join("; "),
                    cpu.join(", ")
                )
            })
            .collect();
        let _ = writeln!(
            w,
            "<details><summary>every throughput step</summary>\n\n{}\n</details>\n",
            details.join("\n")
        );
        self.cost_by_depth(w);
    }

    /// 4b. CPU per sample at each depth of the throughput runs, at 1 kHz.
    fn cost_by_depth(&self, w: &mut String) {
        let (suites, plan, results) = self.measured();
        const RATE_HZ: u32 = 1000;
        if !plan.throughput_rates_hz.contains(&RATE_HZ) {
            return;
        }
        let lowest = plan.throughput_rates_hz.first().copied().unwrap_or(RATE_HZ);
        let _ = writeln!(
            w,
            "### 4b. Cost per sample by depth\n\nFrom the throughput runs at {}: CPU seconds of \
             the profiler's process per 1000 samples collected (a single run of {} s each, start \
             included), and in parentheses the marginal cost from {} to {} (the two single runs' \
             difference: as noisy as their starts). †: the profiler did not keep up with the rate \
             there (section 4). Against: pyagent userspace's cost divided by this profiler's, \
             whole (marginal). pyagent's eBPF mode walks in the target's perf interrupt, charged \
             to the target, not here. Section 2 is the shallow stack (`compare_slowdown.py`, \
             three frames).\n",
            rate_label(RATE_HZ),
            plan.throughput_s,
            rate_label(lowest),
            rate_label(RATE_HZ),
        );
        let mut t = per_depth_table(
            &plan.depths,
            ["CPU s / 1000 samples", "pyagent userspace against it"],
        );
        let fmt = |(whole, marginal, kept_up): (f64, Option<f64>, bool)| {
            let mark = if kept_up { "" } else { " †" };
            match marginal {
                Some(m) => format!("{whole:.4} ({m:.4}){mark}"),
                None => format!("{whole:.4}{mark}"),
            }
        };
        for (si, suite) in suites.iter().enumerate() {
            for &p in &suite.profilers {
                let mut cells = vec![p.label().to_owned(), python(suites, si)];
                for &d in &plan.depths {
                    let cost = depth_cost(results, si, p, d, RATE_HZ);
                    cells.push(cost.map_or("-".into(), fmt));
                    let ours = depth_cost(results, si, Profiler::PyagentUserspace, d, RATE_HZ);
                    let against = match (ours, cost) {
                        _ if p.is_pyagent() => String::new(),
                        (Some((ow, om, _)), Some((tw, tm, _))) if tw > 0.0 => {
                            let marginal = match (om, tm) {
                                (Some(om), Some(tm)) if tm > 0.0 => format!(" ({:.2}×)", om / tm),
                                _ => String::new(),
                            };
                            format!("{:.2}×{marginal}", ow / tw)
                        }
                        _ => "-".into(),
                    };
                    cells.push(against);
                }
                t.row(cells);
            }
        }
        let _ = writeln!(w, "{}", t.render());
    }

    /// pyagent against each target of the table in `targets`.
    pub(super) fn targets(&self, w: &mut String) {
        let (suites, plan, results) = self.measured();
        let _ = writeln!(w, "## Targets of {}\n", targets::ISSUE);
        for (si, suite) in suites.iter().enumerate() {
            for &p in suite.profilers.iter().filter(|p| p.is_pyagent()) {
                let mut parts = Vec::new();
                let noise =
                    slow_row(results, si, Profiler::None, 0).and_then(|r| noise_pp(r, plan.reps));
                for target in targets::TARGETS {
                    parts.extend(self.against(target, si, p, noise));
                }
                let _ = writeln!(
                    w,
                    "- {} on {}: {}",
                    p.label(),
                    python(suites, si),
                    parts.join("; ")
                );
            }
        }
    }

    /// Every place where pyagent is not ahead of a peer.
    pub(super) fn not_ahead(&self, w: &mut String) {
        let (suites, plan, results) = self.measured();
        let _ = writeln!(
            w,
            "\n## Where pyagent is not ahead\n\nEach pyagent mode against each peer on the same \
             interpreter, every metric above; the reason in parentheses is what the measurements \
             say.\n"
        );
        let misses = ranking::ranking(suites, plan, results);
        if misses.is_empty() {
            let _ = writeln!(
                w,
                "Nowhere: the better pyagent mode is ahead of every peer on every row."
            );
        }
        for m in misses {
            let _ = writeln!(w, "- {m}");
        }
    }

    /// One pyagent mode on one interpreter against one target, if it was measured.
    fn against(
        &self,
        target: &Target,
        suite: usize,
        p: Profiler,
        noise: Option<f64>,
    ) -> Option<String> {
        match *target {
            Target::Slowdown { rate_hz, max_pct } => {
                // The toggled measure where it was taken (it resolves what paired runs do not).
                let (method, paired) = match toggled_of(self.results, suite, p, rate_hz) {
                    Some(t) => ("toggled", Some(t)),
                    None => (
                        "paired runs",
                        Paired::of(slow_row(self.results, suite, p, rate_hz)?),
                    ),
                };
                let verdict = match paired {
                    Some(s) if s.half_width() <= RESOLVED_PP => format!(
                        "{} {} (95% CI, half-width {:.2} points)",
                        s.pct(),
                        s.verdict(max_pct),
                        s.half_width()
                    ),
                    Some(s) => format!(
                        "{} {}, not resolved: half-width {:.2} points (> {RESOLVED_PP})",
                        s.pct(),
                        s.verdict(max_pct),
                        s.half_width()
                    ),
                    None => format!(
                        "too few pairs (noise ±{})",
                        noise.map_or("?".into(), |n| format!("{n:.1}"))
                    ),
                };
                Some(format!(
                    "slowdown at {} per CPU-s, {method} (target ≤ {max_pct}%): {verdict}",
                    rate_label(rate_hz),
                ))
            }
            Target::Accuracy { max_error_pp } => {
                let Some(Ok(a)) = self
                    .results
                    .accuracy
                    .iter()
                    .find(|r| r.suite == suite && r.profiler == p)
                    .map(|r| &r.result)
                else {
                    return None;
                };
                Some(format!(
                    "accuracy max error {:.2} points (target ≤ {max_error_pp}): {}",
                    a.max_error_pp(),
                    pass(a.max_error_pp() <= max_error_pp)
                ))
            }
        }
    }
}
