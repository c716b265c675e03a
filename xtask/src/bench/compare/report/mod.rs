//! The report: markdown tables (stdout and `compare.md`), the slowdown chart (`compare.svg`),
//! the targets ([`targets::TARGETS`]), and every place where pyagent is not ahead of a peer.
//! One file per part: [`sections`] (the markdown, a function per section), [`ranking`] (where
//! pyagent is not ahead), [`chart`] (the SVG).

mod chart;
mod ranking;
mod sections;
mod targets;

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};

use super::measure::{self, Outcome, Plan, Results, SlowRow, Suite};
use super::profiler::{Profiler, Tools};
use super::util::{self, Table};

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
        use procfs::Current;
        let cpu_model = procfs::CpuInfo::current()
            .ok()
            .and_then(|c| c.model_name(0).map(|m| m.trim().to_owned()))
            .unwrap_or_else(|| "unknown".into());
        // Read whole: procfs's kernel Version keeps only the numbers of the release.
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
    chart::chart(&svg_path, suites, plan, results)
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

/// The noise of a median slowdown (per CPU-second): two standard errors of the difference of two medians of
/// `reps` runs, with the single-run deviation estimated from the unprofiled runs (1.4826 × their
/// median absolute deviation). `None` with fewer than 3 unprofiled runs.
fn noise_pp(base: &SlowRow, reps: usize) -> Option<f64> {
    let v = slowdowns(base, true);
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

/// A configuration's paired slowdown: per CPU-second of the target, each profiled run against
/// the unprofiled runs just before and after it on the same CPU; the median of those paired
/// differences with its 95% confidence interval.
#[derive(Debug, Clone, Copy)]
pub(super) struct Paired {
    median: f64,
    lo: f64,
    hi: f64,
    n: usize,
}

/// Half-width, in points, a confidence interval must have for a slowdown to count as resolved.
pub(super) const RESOLVED_PP: f64 = 0.5;

impl Paired {
    fn of(row: &SlowRow) -> Option<Paired> {
        Paired::of_values(&slowdowns(row, true))
    }

    /// The median of `v` with its 95% confidence interval (`None` with fewer than 6 values).
    fn of_values(v: &[f64]) -> Option<Paired> {
        let (lo, hi) = median_ci95(v)?;
        Some(Paired {
            median: median(v),
            lo,
            hi,
            n: v.len(),
        })
    }

    fn half_width(&self) -> f64 {
        (self.hi - self.lo) / 2.0
    }

    /// `+0.4% [-0.1, +0.9]`.
    fn pct(&self) -> String {
        format!("{:+.2}% [{:+.2}, {:+.2}]", self.median, self.lo, self.hi)
    }

    /// Against a target of at most `max_pct`.
    fn verdict(&self, max_pct: f64) -> Verdict {
        if self.hi <= max_pct {
            Verdict::Met
        } else if self.lo > max_pct {
            Verdict::Missed
        } else {
            Verdict::Unresolved
        }
    }
}

/// A slowdown target, decided by the confidence interval of the median.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    /// the whole interval is within the target
    Met,
    /// the whole interval is beyond it
    Missed,
    /// the interval straddles it
    Unresolved,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Verdict::Met => "met",
            Verdict::Missed => "NOT met",
            Verdict::Unresolved => "undecided",
        })
    }
}

/// A distribution-free 95% confidence interval of the median of `v`: the order statistics whose
/// ranks a binomial(n, ½) count puts outside with at most 2.5% on each side (coverage ≥ 95%).
/// `None` with fewer than 6 values, where no such interval exists.
pub(super) fn median_ci95(v: &[f64]) -> Option<(f64, f64)> {
    let n = v.len();
    if n < 6 {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    // P(X < k) for X ~ Bin(n, 1/2), summed until it would exceed 2.5%.
    let mut k = 0;
    let mut below = 0.0;
    let mut term = 0.5f64.powi(n as i32); // P(X = 0)
    while k < n / 2 && below + term <= 0.025 {
        below += term;
        term *= (n - k) as f64 / (k + 1) as f64;
        k += 1;
    }
    // k values lie below the interval on each side; k ≥ 1 for n ≥ 6.
    Some((s[k.max(1) - 1], s[n - k.max(1)]))
}

/// The toggled slowdown of a configuration (see `toggled`), if it has enough pairs.
fn toggled_of(results: &Results, suite: usize, profiler: Profiler, rate_hz: u32) -> Option<Paired> {
    results
        .toggled
        .iter()
        .find(|r| r.suite == suite && r.profiler == profiler && r.rate_hz == rate_hz)
        .and_then(|r| Paired::of_values(&r.pairs))
}

/// Median slowdown of a configuration, per CPU-second of the target (the paired measure).
fn slowdown_of(
    results: &Results,
    suite: usize,
    profiler: Profiler,
    rate_hz: u32,
) -> Option<Spread> {
    Spread::of(&slowdowns(
        slow_row(results, suite, profiler, rate_hz)?,
        true,
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

/// CPU seconds per 1000 samples in the throughput run at `depth` and `rate_hz`, whole process
/// (start included), the marginal cost from the run's lowest rate up to it (the extra CPU
/// seconds per extra 1000 samples, which leaves the start out), and whether the profiler kept
/// up with the rate.
fn depth_cost(
    results: &Results,
    suite: usize,
    profiler: Profiler,
    depth: u32,
    rate_hz: u32,
) -> Option<(f64, Option<f64>, bool)> {
    let row = results
        .throughput
        .iter()
        .find(|r| r.suite == suite && r.profiler == profiler && r.depth == depth)?;
    let measured = |step: &measure::Step| match step.outcome {
        Outcome::Measured {
            collected,
            cpu_secs,
            ..
        } => Some((collected as f64, cpu_secs)),
        _ => None,
    };
    let step = row.steps.iter().find(|s| s.rate_hz == rate_hz)?;
    let (n, cpu) = measured(step)?;
    if n <= 0.0 {
        return None;
    }
    let marginal = row
        .steps
        .first()
        .filter(|s| s.rate_hz < rate_hz)
        .and_then(measured)
        .filter(|&(lo_n, _)| n > lo_n)
        .map(|(lo_n, lo_cpu)| (cpu - lo_cpu) * 1000.0 / (n - lo_n));
    Some((cpu * 1000.0 / n, marginal, step.sustained()))
}

fn python(suites: &[Suite], suite: usize) -> String {
    let i = &suites[suite].interp;
    format!("{} ({})", i.version, i.name)
}
/// The whole markdown report.
fn markdown(
    machine: &Machine,
    tools: &Tools,
    suites: &[Suite],
    plan: &Plan,
    results: &Results,
) -> String {
    let report = sections::Report {
        machine,
        tools,
        suites,
        plan,
        results,
    };
    let mut md = String::new();
    report.header(&mut md);
    if !results.slowdown.is_empty() {
        report.slowdown(&mut md);
        report.cost(&mut md);
    }
    if !results.toggled.is_empty() {
        report.toggled(&mut md);
    }
    if !plan.slowdown_only {
        report.accuracy(&mut md);
        report.throughput(&mut md);
    }
    report.targets(&mut md);
    report.not_ahead(&mut md);
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
    /// At this rate.
    Slowdown(u32),
    Cost(u32),
    MarginalCost,
    AccuracyError,
    WrongLines,
    Throughput(u32),
}

#[cfg(test)]
mod tests {
    use super::median_ci95;

    /// The ranks of the interval are those of the binomial tables: 1 and n for n = 6, 6 and 15
    /// for n = 20, 40 and 61 for n = 100.
    #[test]
    fn the_median_interval_has_the_binomial_ranks() {
        let v = |n: usize| (1..=n).map(|i| i as f64).collect::<Vec<_>>();
        assert_eq!(median_ci95(&v(5)), None);
        assert_eq!(median_ci95(&v(6)), Some((1.0, 6.0)));
        assert_eq!(median_ci95(&v(20)), Some((6.0, 15.0)));
        assert_eq!(median_ci95(&v(100)), Some((40.0, 61.0)));
    }
}
