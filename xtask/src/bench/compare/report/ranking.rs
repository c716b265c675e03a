//! Where pyagent is not ahead: each pyagent mode against each peer on the same interpreter, on
//! every metric of the report.

use super::cells::one_line;
use super::summary::{cost_of, marginal_cost, noise_pp, slow_row, slowdown_of, toggled_of};
use crate::bench::compare::plan::{rate_label, Plan, Suite};
use crate::bench::compare::profiler::Profiler;
use crate::bench::compare::results::{describe, Results};

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
pub(super) fn ranking(suites: &[Suite], plan: &Plan, results: &Results) -> Vec<String> {
    let mut out = Vec::new();
    for (si, suite) in suites.iter().enumerate() {
        let (ours, peers): (Vec<Profiler>, Vec<Profiler>) =
            suite.profilers.iter().partition(|p| p.is_pyagent());
        let noise = slow_row(results, si, Profiler::None, 0).and_then(|r| noise_pp(r, plan.reps));
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
            let at = rate_label(rate);
            metrics.push(Metric {
                name: format!("slowdown at {at} (%)"),
                kind: Kind::Slowdown(rate),
                higher_is_better: false,
                decimals: 2,
                // The toggled measure where it was taken: it resolves what paired runs do not.
                value: Box::new(move |p| {
                    toggled_of(results, si, p, rate)
                        .map(|t| t.median)
                        .or_else(|| slowdown_of(results, si, p, rate).map(|s| s.median))
                }),
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
                Kind::Slowdown(rate) if toggled_of(results, si, ours, rate).is_some() => {
                    match (
                        toggled_of(results, si, ours, rate),
                        toggled_of(results, si, peer, rate),
                    ) {
                        (Some(a), Some(b)) if a.lo <= b.hi && b.lo <= a.hi => {
                            format!("their 95% intervals overlap: {} and {}", a.pct(), b.pct())
                        }
                        (Some(a), Some(b)) => {
                            format!("beyond both 95% intervals: {} and {}", a.pct(), b.pct())
                        }
                        _ => "measured".into(),
                    }
                }
                Kind::Slowdown(_) => match noise {
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
                            rate_label(rate),
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
                            rate_label(s.rate_hz),
                            one_line(&describe(s))
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
