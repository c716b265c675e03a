//! The numbers the report shows, summarised from the results: slowdowns per run against their
//! reference, their median with its confidence interval or their spread, the noise of the
//! method, and what each configuration cost its profiler.

use crate::bench::compare::plan::Plan;
use crate::bench::compare::profiler::Profiler;
use crate::bench::compare::results::{Outcome, Results, SlowRow, Step};
use crate::bench::stats;

/// Median, min and max.
#[derive(Debug, Clone, Copy)]
pub(super) struct Spread {
    pub(super) median: f64,
    pub(super) min: f64,
    pub(super) max: f64,
    pub(super) n: usize,
}

impl Spread {
    pub(super) fn of(v: &[f64]) -> Option<Spread> {
        (!v.is_empty()).then(|| Spread {
            median: stats::median(v),
            min: v.iter().copied().fold(f64::INFINITY, f64::min),
            max: v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            n: v.len(),
        })
    }

    /// `+0.4% [-0.3, +1.2]` (or without the range for one value).
    pub(super) fn pct(&self) -> String {
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
pub(super) fn slowdowns(row: &SlowRow, per_cpu: bool) -> Vec<f64> {
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

/// The noise of a median slowdown (per CPU-second): two standard errors of the difference of two
/// medians of `reps` runs, the single-run deviation estimated from the unprofiled runs (see
/// [`stats::median_difference_noise`]). `None` with fewer than 3 unprofiled runs.
pub(super) fn noise_pp(base: &SlowRow, reps: usize) -> Option<f64> {
    stats::median_difference_noise(&slowdowns(base, true), reps)
}

pub(super) fn slow_row(
    results: &Results,
    suite: usize,
    profiler: Profiler,
    rate_hz: u32,
) -> Option<&SlowRow> {
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
    pub(super) median: f64,
    pub(super) lo: f64,
    pub(super) hi: f64,
    pub(super) n: usize,
}

impl Paired {
    pub(super) fn of(row: &SlowRow) -> Option<Paired> {
        Paired::of_values(&slowdowns(row, true))
    }

    /// The median of `v` with its 95% confidence interval (`None` with fewer than 6 values).
    pub(super) fn of_values(v: &[f64]) -> Option<Paired> {
        let (lo, hi) = stats::median_ci95(v)?;
        Some(Paired {
            median: stats::median(v),
            lo,
            hi,
            n: v.len(),
        })
    }

    pub(super) fn half_width(&self) -> f64 {
        (self.hi - self.lo) / 2.0
    }

    /// `+0.4% [-0.1, +0.9]`.
    pub(super) fn pct(&self) -> String {
        format!("{:+.2}% [{:+.2}, {:+.2}]", self.median, self.lo, self.hi)
    }

    /// Against a target of at most `max_pct`.
    pub(super) fn verdict(&self, max_pct: f64) -> Verdict {
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

/// The toggled slowdown of a configuration (see `toggled`), if it has enough pairs.
pub(super) fn toggled_of(
    results: &Results,
    suite: usize,
    profiler: Profiler,
    rate_hz: u32,
) -> Option<Paired> {
    results
        .toggled
        .iter()
        .find(|r| r.suite == suite && r.profiler == profiler && r.rate_hz == rate_hz)
        .and_then(|r| Paired::of_values(&r.pairs))
}

/// Median slowdown of a configuration, per CPU-second of the target (the paired measure).
pub(super) fn slowdown_of(
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
pub(super) struct CostSummary {
    /// CPU seconds per 1000 samples (startup included).
    pub(super) per_k: f64,
    /// Samples per run.
    pub(super) samples: f64,
    /// CPU seconds per run.
    pub(super) cpu_secs: f64,
}

pub(super) fn cost_of(
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
        per_k: stats::median(&per_k),
        samples: stats::median(&samples),
        cpu_secs: stats::median(&cpu),
    })
}

/// CPU seconds per 1000 extra samples between the lowest and highest slowdown rate: the cost
/// of sampling without the startup (which both runs pay alike).
pub(super) fn marginal_cost(
    results: &Results,
    plan: &Plan,
    suite: usize,
    profiler: Profiler,
) -> Option<f64> {
    let lo = cost_of(results, suite, profiler, *plan.slowdown_rates_hz.first()?)?;
    let hi = cost_of(results, suite, profiler, *plan.slowdown_rates_hz.last()?)?;
    let extra = hi.samples - lo.samples;
    (extra > 0.0).then(|| (hi.cpu_secs - lo.cpu_secs) * 1000.0 / extra)
}

/// CPU seconds per 1000 samples in the throughput run at `depth` and `rate_hz`, whole process
/// (start included), the marginal cost from the run's lowest rate up to it (the extra CPU
/// seconds per extra 1000 samples, which leaves the start out), and whether the profiler kept
/// up with the rate.
pub(super) fn depth_cost(
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
    let measured = |step: &Step| match step.outcome {
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
