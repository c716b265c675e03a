//! The report: markdown tables (stdout and `compare.md`), the slowdown chart (`compare.svg`),
//! the targets of issue 5, and every place where pyagent is not ahead of a peer.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use plotters::prelude::*;

use super::measure::{self, Outcome, Plan, Results, SlowRow, Suite};
use super::profiler::{Profiler, Tools};
use super::util::{self, Table};

/// Slowdown targets of issue 5, percent, at 99 Hz and 1 kHz.
const SLOWDOWN_TARGET_PCT: [(u32, f64); 2] = [(99, 0.5), (1000, 2.0)];
/// Accuracy target of issue 5, percentage points.
const ERROR_TARGET_PP: f64 = 1.5;

/// The machine and the run, for the report's header.
#[derive(Debug)]
pub struct Machine {
    command: String,
    cpus: usize,
    cpu_model: String,
    kernel: String,
    /// Load average when the run started.
    pub load_before: String,
    load_after: String,
    started: Instant,
    minutes: f64,
}

impl Machine {
    /// Reads the machine's facts and the load now.
    pub fn probe(command: String) -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, m)| m.trim().to_owned())
            .unwrap_or_else(|| "unknown".into());
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_owned())
            .unwrap_or_else(|_| "unknown".into());
        Machine {
            command,
            cpus: std::thread::available_parallelism().map_or(0, usize::from),
            cpu_model,
            kernel,
            load_before: util::load_average(),
            load_after: String::new(),
            started: Instant::now(),
            minutes: 0.0,
        }
    }

    /// Adds the load and the time at the end of the run.
    pub fn finish(mut self) -> Machine {
        self.load_after = util::load_average();
        self.minutes = self.started.elapsed().as_secs_f64() / 60.0;
        self
    }
}

/// Prints the report and writes `compare.md` and `compare.svg` into `out_dir`.
pub fn write(
    out_dir: &Path,
    machine: &Machine,
    tools: &Tools,
    suites: &[Suite],
    plan: &Plan,
    results: &Results,
) -> Result<()> {
    let md = markdown(machine, tools, suites, plan, results);
    print!("{md}");
    std::fs::create_dir_all(out_dir)
        .with_context(|| format!("cannot create {}", out_dir.display()))?;
    let md_path = out_dir.join("compare.md");
    std::fs::write(&md_path, &md).with_context(|| format!("cannot write {}", md_path.display()))?;
    let svg_path = out_dir.join("compare.svg");
    chart(&svg_path, suites, plan, results)
        .map_err(|e| anyhow::anyhow!("{e}"))
        .with_context(|| format!("cannot draw {}", svg_path.display()))?;
    println!("\nwrote {} and {}", md_path.display(), svg_path.display());
    Ok(())
}

/// Median of non-empty `v`.
fn median(v: &[f64]) -> f64 {
    util::quantile(v, 0.5)
}

/// Median, min and max.
#[derive(Debug, Clone, Copy)]
struct Spread {
    median: f64,
    min: f64,
    max: f64,
    n: usize,
}

impl Spread {
    fn of(v: &[f64]) -> Option<Spread> {
        (!v.is_empty()).then(|| Spread {
            median: median(v),
            min: v.iter().copied().fold(f64::INFINITY, f64::min),
            max: v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            n: v.len(),
        })
    }

    /// `+0.4% [-0.3, +1.2]` (or without the range for one value).
    fn pct(&self) -> String {
        if self.n > 1 {
            format!("{:+.1}% [{:+.1}, {:+.1}]", self.median, self.min, self.max)
        } else {
            format!("{:+.1}%", self.median)
        }
    }
}

/// Slowdown in percent per run against its reference (the unprofiled runs around it; for the
/// unprofiled row, the noise of that reference); `per_cpu` compares calls per CPU second of the
/// target instead of per wall-clock second.
fn slowdowns(row: &SlowRow, per_cpu: bool) -> Vec<f64> {
    row.runs
        .iter()
        .filter_map(|r| {
            let (wall, cpu) = r.reference?;
            Some(if per_cpu {
                (1.0 - r.per_cpu_sec / cpu) * 100.0
            } else {
                (1.0 - r.per_sec / wall) * 100.0
            })
        })
        .collect()
}

/// The noise of a median slowdown: two standard errors of the difference of two medians of
/// `reps` runs, with the single-run deviation estimated from the unprofiled runs (1.4826 × their
/// median absolute deviation). `None` with fewer than 3 unprofiled runs.
fn noise_pp(base: &SlowRow, reps: usize) -> Option<f64> {
    let v = slowdowns(base, false);
    if v.len() < 3 {
        return None;
    }
    let m = median(&v);
    let mad = median(&v.iter().map(|x| (x - m).abs()).collect::<Vec<_>>());
    let sigma_run = 1.4826 * mad;
    // The median of n normal values has a standard error of about 1.2533 σ / √n.
    let sigma_median = 1.2533 * sigma_run / (reps.max(1) as f64).sqrt();
    Some(2.0 * std::f64::consts::SQRT_2 * sigma_median)
}

fn slow_row(results: &Results, suite: usize, profiler: Profiler, rate_hz: u32) -> Option<&SlowRow> {
    results
        .slowdown
        .iter()
        .find(|r| r.suite == suite && r.profiler == profiler && r.rate_hz == rate_hz)
}

/// Median slowdown (wall clock) of a configuration.
fn slowdown_of(
    results: &Results,
    suite: usize,
    profiler: Profiler,
    rate_hz: u32,
) -> Option<Spread> {
    Spread::of(&slowdowns(
        slow_row(results, suite, profiler, rate_hz)?,
        false,
    ))
}

/// What one configuration cost its profiler, medians over the runs.
#[derive(Debug, Clone, Copy)]
struct CostSummary {
    /// CPU seconds per 1000 samples (startup included).
    per_k: f64,
    /// Samples per run.
    samples: f64,
    /// CPU seconds per run.
    cpu_secs: f64,
}

fn cost_of(
    results: &Results,
    suite: usize,
    profiler: Profiler,
    rate_hz: u32,
) -> Option<CostSummary> {
    let row = slow_row(results, suite, profiler, rate_hz)?;
    let costs: Vec<_> = row.runs.iter().filter_map(|r| r.profiler).collect();
    let per_k: Vec<f64> = costs
        .iter()
        .filter(|c| c.samples > 0)
        .map(|c| c.cpu_secs * 1000.0 / c.samples as f64)
        .collect();
    let samples: Vec<f64> = costs.iter().map(|c| c.samples as f64).collect();
    let cpu: Vec<f64> = costs.iter().map(|c| c.cpu_secs).collect();
    (!per_k.is_empty()).then(|| CostSummary {
        per_k: median(&per_k),
        samples: median(&samples),
        cpu_secs: median(&cpu),
    })
}

/// CPU seconds per 1000 extra samples between the lowest and highest slowdown rate: the cost
/// of sampling without the startup (which both runs pay alike).
fn marginal_cost(results: &Results, plan: &Plan, suite: usize, profiler: Profiler) -> Option<f64> {
    let lo = cost_of(results, suite, profiler, *plan.slowdown_rates_hz.first()?)?;
    let hi = cost_of(results, suite, profiler, *plan.slowdown_rates_hz.last()?)?;
    let extra = hi.samples - lo.samples;
    (extra > 0.0).then(|| (hi.cpu_secs - lo.cpu_secs) * 1000.0 / extra)
}

fn python(suites: &[Suite], suite: usize) -> String {
    let i = &suites[suite].interp;
    format!("{} ({})", i.version, i.name)
}

fn markdown(
    machine: &Machine,
    tools: &Tools,
    suites: &[Suite],
    plan: &Plan,
    results: &Results,
) -> String {
    let mut md = String::new();
    let w = &mut md;
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
        measure::rate_label(plan.accuracy_rate_hz),
        plan.throughput_s,
        plan.sustain_share * 100.0
    );
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

    // 1. Slowdown.
    let _ =
        writeln!(
        w,
        "## 1. Target slowdown\n\nCalls per wall-clock second of `compare_slowdown.py` in its {} \
         s window, compared with the unprofiled runs just before and after (every round runs \
         none, A, none, B, none, ...; positive = slower): median [min, max] over the repetitions. \
         The `none` row applies the same comparison to the unprofiled runs themselves (each \
         against the ones two places away): the noise floor. A difference of two medians needs \
         more than ±{} points to stand out of that noise (two standard errors). The \
         per-CPU-second columns divide by the target's own CPU time instead, which hides time the \
         target spends stopped (py-spy's default) or waiting for a CPU.\n",
        plan.window_s,
        noise_pp(slow_row(results, 0, Profiler::None, 0).expect("baseline row"), plan.reps)
            .map_or("? (too few runs to tell)".into(), |n| format!("{n:.1}"))
    );
    let rates = &plan.slowdown_rates_hz;
    let mut header = vec!["profiler".to_owned(), "Python".to_owned()];
    header.extend(
        rates
            .iter()
            .map(|r| format!("{} (wall)", measure::rate_label(*r))),
    );
    header.extend(
        rates
            .iter()
            .map(|r| format!("{} (per CPU-s)", measure::rate_label(*r))),
    );
    let hdr: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut t = Table::new(&hdr);
    for (si, suite) in suites.iter().enumerate() {
        let base = slow_row(results, si, Profiler::None, 0).expect("baseline row");
        let calls: Vec<f64> = base.runs.iter().map(|r| r.per_sec).collect();
        let mut cells = vec![
            format!(
                "none ({} calls/s)",
                if calls.is_empty() {
                    "-".into()
                } else {
                    format!("{:.0}", median(&calls))
                }
            ),
            python(suites, si),
        ];
        for per_cpu in [false, true] {
            let s = Spread::of(&slowdowns(base, per_cpu));
            let cell = s.map_or_else(|| failed(base), |s| s.pct());
            cells.extend(std::iter::repeat_n(cell, rates.len()));
        }
        t.row(cells);
        for &p in &suite.profilers {
            let mut cells = vec![p.label().to_owned(), python(suites, si)];
            for per_cpu in [false, true] {
                for &rate in rates {
                    let row = slow_row(results, si, p, rate).expect("row per rate");
                    let s = Spread::of(&slowdowns(row, per_cpu));
                    cells.push(s.map_or_else(|| failed(row), |s| s.pct()));
                }
            }
            t.row(cells);
        }
    }
    let _ = writeln!(w, "{}", t.render());

    // 2. Cost.
    let _ = writeln!(
        w,
        "## 2. Profiler cost\n\nCPU seconds (user + system, `wait4` rusage of the profiler \
         process from start to exit, startup included) per 1000 samples found in its output, and \
         samples per run: medians of the slowdown runs (each about {:.1} s of sampling). \
         Marginal: the extra CPU seconds per extra 1000 samples from {} to {}, which leaves out \
         the startup both pay. pyagent's eBPF program runs in the perf interrupt on the target's \
         CPU, so its time is charged to the target (it shows in section 1), not here.\n",
        plan.lead_s + plan.window_s,
        measure::rate_label(*rates.first().expect("a slowdown rate")),
        measure::rate_label(*rates.last().expect("a slowdown rate"))
    );
    let mut header = vec!["profiler".to_owned(), "Python".to_owned()];
    for r in rates {
        header.push(format!("{}: CPU s / 1000 samples", measure::rate_label(*r)));
        header.push(format!("{}: samples / run", measure::rate_label(*r)));
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
                        lagged.push(format!(
                            "{:.0} at {}",
                            median(&l),
                            measure::rate_label(rate)
                        ));
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

    // 3. Accuracy.
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
        measure::rate_label(plan.accuracy_rate_hz)
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

    // 4. Throughput.
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
            .map(|r| measure::rate_label(*r))
            .collect::<Vec<_>>()
            .join(", "),
        plan.sustain_share * 100.0,
        plan.throughput_s,
        plan.depths.first().copied().unwrap_or(0),
        measure::rate_label(plan.throughput_rates_hz.first().copied().unwrap_or(0)),
        3 * plan.throughput_s + 5
    );
    let mut header = vec!["profiler".to_owned(), "Python".to_owned()];
    for d in &plan.depths {
        header.push(format!("depth {d}: sustained"));
        header.push(format!("depth {d}: next rate"));
    }
    let hdr: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut t = Table::new(&hdr);
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
                cells.push(
                    row.sustained_hz()
                        .map_or("none".into(), measure::rate_label),
                );
                cells.push(row.first_miss().map_or("- (all sustained)".into(), |s| {
                    format!(
                        "{}: {}",
                        measure::rate_label(s.rate_hz),
                        one_line(&measure::describe(s))
                    )
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
                .map(|s| {
                    format!(
                        "{} {}",
                        measure::rate_label(s.rate_hz),
                        one_line(&measure::describe(s))
                    )
                })
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

    // Targets and ranking.
    let _ = writeln!(w, "## Targets of issue 5\n");
    for (si, suite) in suites.iter().enumerate() {
        for &p in suite.profilers.iter().filter(|p| p.is_pyagent()) {
            let mut parts = Vec::new();
            let noise = noise_pp(
                slow_row(results, si, Profiler::None, 0).expect("baseline row"),
                plan.reps,
            );
            for (rate, target) in SLOWDOWN_TARGET_PCT {
                if let Some(s) = slowdown_of(results, si, p, rate) {
                    let verdict = match noise {
                        Some(n) if n > target => format!(
                            "cannot be told on this machine: the noise of the median is ±{n:.1} \
                             points"
                        ),
                        Some(n) => format!("{} (noise ±{n:.1})", pass(s.median <= target)),
                        None => {
                            format!("{} (noise unknown: too few runs)", pass(s.median <= target))
                        }
                    };
                    parts.push(format!(
                        "slowdown at {} {:+.2}% (target ≤ {target}%): {verdict}",
                        measure::rate_label(rate),
                        s.median,
                    ));
                }
            }
            if let Some(Ok(a)) = results
                .accuracy
                .iter()
                .find(|r| r.suite == si && r.profiler == p)
                .map(|r| &r.result)
            {
                parts.push(format!(
                    "accuracy max error {:.2} points (target ≤ {ERROR_TARGET_PP}): {}",
                    a.max_error_pp(),
                    pass(a.max_error_pp() <= ERROR_TARGET_PP)
                ));
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
    let _ = writeln!(
        w,
        "\n## Where pyagent is not ahead\n\nEach pyagent mode against each peer on the same \
         interpreter, every metric above; the reason in parentheses is what the measurements \
         say.\n"
    );
    let misses = ranking(suites, plan, results);
    if misses.is_empty() {
        let _ = writeln!(
            w,
            "Nowhere: the better pyagent mode is ahead of every peer on every row."
        );
    }
    for m in misses {
        let _ = writeln!(w, "- {m}");
    }
    md
}

fn pass(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "NOT met"
    }
}

fn opt(v: Option<u64>) -> String {
    v.map_or("unknown".into(), |v| v.to_string())
}

fn one_line(s: &str) -> String {
    let s = s.replace(['\n', '|'], " ");
    if s.chars().count() > 120 {
        format!("{}…", s.chars().take(120).collect::<String>())
    } else {
        s
    }
}

fn failed(row: &SlowRow) -> String {
    match row.errors.first() {
        Some(e) => format!("failed: {}", one_line(e)),
        None => "-".into(),
    }
}

/// What a ranking metric measures (for the explanation of a loss).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Slowdown,
    Cost(u32),
    MarginalCost,
    AccuracyError,
    WrongLines,
    Throughput(u32),
}

/// One way of ranking profilers.
struct Metric<'a> {
    name: String,
    kind: Kind,
    /// Whether a higher value is better (a rate) rather than a lower one (a cost, an error).
    higher_is_better: bool,
    /// Decimals to show.
    decimals: usize,
    value: Box<dyn Fn(Profiler) -> Option<f64> + 'a>,
}

/// Every metric where a peer beats a pyagent mode on the same interpreter, with the numbers
/// and what the measurement says about why.
fn ranking(suites: &[Suite], plan: &Plan, results: &Results) -> Vec<String> {
    let mut out = Vec::new();
    for (si, suite) in suites.iter().enumerate() {
        let (ours, peers): (Vec<Profiler>, Vec<Profiler>) =
            suite.profilers.iter().partition(|p| p.is_pyagent());
        let noise = noise_pp(
            slow_row(results, si, Profiler::None, 0).expect("baseline row"),
            plan.reps,
        );
        let accuracy = move |p: Profiler| {
            results
                .accuracy
                .iter()
                .find(|r| r.suite == si && r.profiler == p)
                .and_then(|r| r.result.as_ref().ok())
        };
        let throughput = move |p: Profiler, d: u32| {
            results
                .throughput
                .iter()
                .find(|r| r.suite == si && r.profiler == p && r.depth == d)
        };
        let mut metrics = Vec::new();
        for &rate in &plan.slowdown_rates_hz {
            let at = measure::rate_label(rate);
            metrics.push(Metric {
                name: format!("slowdown at {at} (%)"),
                kind: Kind::Slowdown,
                higher_is_better: false,
                decimals: 2,
                value: Box::new(move |p| slowdown_of(results, si, p, rate).map(|s| s.median)),
            });
            metrics.push(Metric {
                name: format!("CPU s per 1000 samples at {at}"),
                kind: Kind::Cost(rate),
                higher_is_better: false,
                decimals: 4,
                value: Box::new(move |p| cost_of(results, si, p, rate).map(|c| c.per_k)),
            });
        }
        metrics.push(Metric {
            name: "marginal CPU s per 1000 samples".into(),
            kind: Kind::MarginalCost,
            higher_is_better: false,
            decimals: 4,
            value: Box::new(move |p| marginal_cost(results, plan, si, p)),
        });
        metrics.push(Metric {
            name: "accuracy max error (points)".into(),
            kind: Kind::AccuracyError,
            higher_is_better: false,
            decimals: 2,
            value: Box::new(move |p| accuracy(p).map(|a| a.max_error_pp())),
        });
        metrics.push(Metric {
            name: "samples on a wrong line (%)".into(),
            kind: Kind::WrongLines,
            higher_is_better: false,
            decimals: 2,
            value: Box::new(move |p| accuracy(p).map(|a| a.lines_wrong * 100.0)),
        });
        for &d in &plan.depths {
            metrics.push(Metric {
                name: format!("highest sustained rate at depth {d} (Hz)"),
                kind: Kind::Throughput(d),
                higher_is_better: true,
                decimals: 0,
                value: Box::new(move |p| {
                    throughput(p, d).map(|r| f64::from(r.sustained_hz().unwrap_or(0)))
                }),
            });
        }
        // Why a pyagent mode `ours` (value `mine`) lost to `peer` (value `theirs`), as far as
        // the measurements tell.
        let why = |m: &Metric, ours: Profiler, peer: Profiler, mine: f64, theirs: f64| -> String {
            match m.kind {
                Kind::Slowdown => match noise {
                    Some(n) if (mine - theirs).abs() <= n => {
                        format!("within the noise, ±{n:.1} points")
                    }
                    Some(n) => format!("beyond the noise, ±{n:.1} points"),
                    None => "too few runs to estimate the noise".into(),
                },
                Kind::Cost(rate) => {
                    let low = *plan.slowdown_rates_hz.first().expect("a slowdown rate");
                    match (
                        marginal_cost(results, plan, si, ours),
                        marginal_cost(results, plan, si, peer),
                    ) {
                        (Some(a), Some(b)) if rate == low && a < b => format!(
                            "startup dominates at {}: per extra sample pyagent costs {a:.4} s / \
                             1000, {} {b:.4}",
                            measure::rate_label(rate),
                            peer.label()
                        ),
                        _ => "measured".into(),
                    }
                }
                Kind::AccuracyError => {
                    let sigma = accuracy(ours).map_or(0.0, |a| a.sigma_pp());
                    if mine <= 2.0 * sigma {
                        format!(
                            "both are within two binomial standard errors (2σ = {:.2}) of a \
                             perfect sampler",
                            2.0 * sigma
                        )
                    } else {
                        format!("beyond 2σ = {:.2}", 2.0 * sigma)
                    }
                }
                Kind::Throughput(d) => throughput(ours, d).and_then(|r| r.first_miss()).map_or(
                    "measured".into(),
                    |s| {
                        format!(
                            "at {} pyagent got {}",
                            measure::rate_label(s.rate_hz),
                            one_line(&measure::describe(s))
                        )
                    },
                ),
                Kind::MarginalCost | Kind::WrongLines => "measured".into(),
            }
        };
        let py = &suite.interp.name;
        for &mode in &ours {
            for m in &metrics {
                let Some(mine) = (m.value)(mode) else {
                    out.push(format!("{py}, {}: no {} measurement", m.name, mode.label()));
                    continue;
                };
                // Compare in "lower is better" terms.
                let key = |v: f64| if m.higher_is_better { -v } else { v };
                let show = |v: f64| format!("{v:.*}", m.decimals);
                let mut ties = Vec::new();
                for &peer in &peers {
                    let Some(theirs) = (m.value)(peer) else {
                        continue;
                    };
                    if show(theirs) == show(mine) {
                        ties.push(peer.label());
                    } else if key(theirs) < key(mine) {
                        out.push(format!(
                            "{py}, {}: {} {} beats {} {} ({})",
                            m.name,
                            peer.label(),
                            show(theirs),
                            mode.label(),
                            show(mine),
                            why(m, mode, peer, mine, theirs)
                        ));
                    }
                }
                if !ties.is_empty() {
                    out.push(format!(
                        "{py}, {}: {} ties with {} at {}",
                        m.name,
                        mode.label(),
                        ties.join(", "),
                        show(mine)
                    ));
                }
            }
        }
    }
    out
}

/// Grouped bars: the median slowdown of every profiler at each slowdown rate, with min–max
/// whiskers, over a grey band of each interpreter's noise (two standard errors).
fn chart(
    path: &Path,
    suites: &[Suite],
    plan: &Plan,
    results: &Results,
) -> Result<(), Box<dyn std::error::Error>> {
    use plotters::style::text_anchor::{HPos, Pos, VPos};

    let groups: Vec<(usize, Profiler)> = suites
        .iter()
        .enumerate()
        .flat_map(|(si, s)| s.profilers.iter().map(move |&p| (si, p)))
        .collect();
    let rates = &plan.slowdown_rates_hz;
    let values: Vec<Vec<Option<Spread>>> = groups
        .iter()
        .map(|&(si, p)| {
            rates
                .iter()
                .map(|&r| slowdown_of(results, si, p, r))
                .collect()
        })
        .collect();
    let noise: Vec<Option<f64>> = (0..suites.len())
        .map(|si| noise_pp(slow_row(results, si, Profiler::None, 0)?, plan.reps))
        .collect();
    let all: Vec<f64> = values
        .iter()
        .flatten()
        .flatten()
        .flat_map(|s| [s.min, s.max])
        .chain(noise.iter().flatten().flat_map(|n| [*n, -*n]))
        .collect();
    let top = all.iter().copied().fold(1.0, f64::max);
    let bottom = all.iter().copied().fold(0.0, f64::min);
    let pad = (top - bottom) * 0.08;
    let (top, bottom) = (top + pad, bottom - pad);
    let n = groups.len();
    let root = SVGBackend::new(path, (1200, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Target slowdown per profiler: median, min-max whiskers, grey = noise (lower is \
             better)",
            ("sans-serif", 20),
        )
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), bottom..top)?;
    let label = |x: &f64| {
        let i = x.round();
        if (x - i).abs() > 1e-6 || i < 0.0 || i as usize >= n {
            return String::new();
        }
        let (si, p) = groups[i as usize];
        format!("{} ({})", p.short(), suites[si].interp.name)
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .light_line_style(TRANSPARENT)
        .x_labels(n + 1)
        .x_label_formatter(&label)
        .y_desc("slowdown (%)")
        .draw()?;
    // The noise band of each interpreter, under its groups.
    let grey = RGBColor(200, 200, 200);
    let bands = (0..suites.len()).filter_map(|si| {
        let n = noise[si]?;
        let first = groups.iter().position(|g| g.0 == si)? as f64;
        let last = groups.iter().rposition(|g| g.0 == si)? as f64;
        Some(Rectangle::new(
            [(first - 0.5, -n), (last + 0.5, n)],
            grey.mix(0.5).filled(),
        ))
    });
    chart.draw_series(bands)?;
    let palette = [
        RGBColor(66, 133, 244),
        RGBColor(234, 67, 53),
        RGBColor(52, 168, 83),
    ];
    let width = 0.8 / rates.len() as f64;
    for (k, &rate) in rates.iter().enumerate() {
        let color = palette[k % palette.len()];
        let offset = -0.4 + width * (k as f64 + 0.5);
        let bars = values.iter().enumerate().filter_map(|(g, v)| {
            v[k].map(|s| {
                let x = g as f64 + offset;
                Rectangle::new(
                    [(x - width * 0.45, 0.0), (x + width * 0.45, s.median)],
                    color.filled(),
                )
            })
        });
        chart
            .draw_series(bars)?
            .label(measure::rate_label(rate))
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
        chart.draw_series(values.iter().enumerate().filter_map(|(g, v)| {
            v[k].filter(|s| s.n > 1).map(|s| {
                ErrorBar::new_vertical(
                    g as f64 + offset,
                    s.min,
                    s.median,
                    s.max,
                    BLACK.stroke_width(1),
                    6,
                )
            })
        }))?;
        // The value beyond the whisker's end: above positive bars, below negative ones.
        let gap = (top - bottom) * 0.01;
        chart.draw_series(values.iter().enumerate().filter_map(|(g, v)| {
            v[k].map(|s| {
                let (y, vpos) = if s.median >= 0.0 {
                    (s.max.max(s.median) + gap, VPos::Bottom)
                } else {
                    (s.min.min(s.median) - gap, VPos::Top)
                };
                let style = TextStyle::from(("sans-serif", 11).into_font())
                    .pos(Pos::new(HPos::Center, vpos));
                Text::new(format!("{:+.1}", s.median), (g as f64 + offset, y), style)
            })
        }))?;
    }
    chart.draw_series(std::iter::once(PathElement::new(
        vec![(-0.5, 0.0), (n as f64 - 0.5, 0.0)],
        BLACK,
    )))?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
