//! What is compared and how: the suites (an interpreter and its profilers), the plan (durations,
//! rates, repetitions), the configurations a suite runs, and how a rate is written. The modules
//! that measure and report read these; this one reads none of them.

use super::profiler::Profiler;
use crate::bench::util::Interpreter;

/// Half-width, in points, a confidence interval must have for a slowdown to count as resolved:
/// a toggled run whose interval is wider pools a second run's pairs, and the report says which
/// rows are resolved.
pub const RESOLVED_PP: f64 = 0.5;

/// An interpreter and the profilers compared on it.
#[derive(Debug)]
pub struct Suite {
    /// The interpreter every target of the suite runs on.
    pub interp: Interpreter,
    /// The profilers, besides none.
    pub profilers: Vec<Profiler>,
}

/// Durations, rates and repetitions.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Slowdown repetitions.
    pub reps: usize,
    /// Seconds a target runs before its measured window: the profiler attaches meanwhile.
    pub lead_s: f64,
    /// Seconds of the slowdown window.
    pub window_s: f64,
    /// Rates of the slowdown runs.
    pub slowdown_rates_hz: Vec<u32>,
    /// Rate of the accuracy runs.
    pub accuracy_rate_hz: u32,
    /// Seconds of an accuracy run after the lead.
    pub accuracy_window_s: f64,
    /// Stack depths of the throughput runs.
    pub depths: Vec<u32>,
    /// Rates tried, rising, in the throughput runs.
    pub throughput_rates_hz: Vec<u32>,
    /// Seconds each profiler samples in a throughput run.
    pub throughput_s: u32,
    /// Share of rate × duration a profiler must collect to sustain a rate.
    pub sustain_share: f64,
    /// Only the slowdown runs.
    pub slowdown_only: bool,
    /// Only the toggled slowdown runs (no paired runs, so no cost per sample either).
    pub toggled_only: bool,
    /// Seconds of pairs in each toggled slowdown run (one run per configuration; 0: none).
    pub toggle_s: f64,
    /// Seconds of each half of a toggled pair.
    pub toggle_window_s: f64,
    /// Seconds between attaching and the first toggled pair.
    pub toggle_lead_s: f64,
    /// The CPU every target is pinned to, so that a profiled run and the unprofiled runs it is
    /// paired with run on the same CPU (`None` on a single-CPU machine).
    pub target_cpu: Option<usize>,
}

impl Plan {
    /// The full plan, or the quick one for the smoke test; `window_s` replaces the slowdown
    /// window (and its lead, half of it up to 1 s).
    pub fn new(
        quick: bool,
        reps: Option<usize>,
        window_s: Option<f64>,
        slowdown_only: bool,
    ) -> Plan {
        let mut plan = Plan::defaults(quick, reps);
        if let Some(w) = window_s.filter(|w| *w > 0.0) {
            plan.window_s = w;
            plan.lead_s = (w / 2.0).min(1.0);
        }
        plan.slowdown_only = slowdown_only;
        // The last CPU: the first takes most of the machine's interrupts and daemons.
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        plan.target_cpu = (cpus > 1).then(|| cpus - 1);
        plan
    }

    fn defaults(quick: bool, reps: Option<usize>) -> Plan {
        if quick {
            Plan {
                reps: reps.unwrap_or(1).max(1),
                lead_s: 0.6,
                window_s: 0.6,
                slowdown_rates_hz: vec![99, 1000],
                accuracy_rate_hz: 1000,
                accuracy_window_s: 1.0,
                depths: vec![100],
                throughput_rates_hz: vec![1000],
                throughput_s: 1,
                sustain_share: 0.9,
                slowdown_only: false,
                toggled_only: false,
                toggle_s: 2.0,
                toggle_window_s: 0.05,
                toggle_lead_s: 2.0,
                target_cpu: None,
            }
        } else {
            Plan {
                // Six: the fewest paired runs whose median has a distribution-free 95% interval
                // (with five, section 1 reads "too few pairs" in every profiled row).
                reps: reps.unwrap_or(6).max(1),
                lead_s: 1.0,
                window_s: 2.0,
                slowdown_rates_hz: vec![99, 1000],
                accuracy_rate_hz: 1000,
                accuracy_window_s: 10.0,
                depths: vec![30, 100, 1000],
                throughput_rates_hz: vec![100, 1000, 5000, 10_000, 20_000],
                throughput_s: 2,
                sustain_share: 0.9,
                slowdown_only: false,
                toggled_only: false,
                toggle_s: 60.0,
                toggle_window_s: 0.05,
                toggle_lead_s: 2.0,
                target_cpu: None,
            }
        }
    }

    /// How long a profiler is told to sample in a slowdown or accuracy run: past the target's
    /// end, which stops every profiler compared here.
    pub fn attached_secs(&self, window_s: f64) -> u32 {
        (self.lead_s + window_s).ceil() as u32 + 5
    }
}

/// The slowdown configurations of a suite: none (rate 0), then each profiler at each rate;
/// nothing for a suite whose profilers were all left out (`--profilers`).
pub fn configurations<'a>(
    suite: &'a Suite,
    plan: &'a Plan,
) -> impl Iterator<Item = (Profiler, u32)> + 'a {
    let baseline = (!suite.profilers.is_empty()).then_some((Profiler::None, 0));
    baseline.into_iter().chain(
        suite
            .profilers
            .iter()
            .flat_map(|&p| plan.slowdown_rates_hz.iter().map(move |&r| (p, r))),
    )
}

/// `99 Hz`, `1 kHz`.
pub fn rate_label(rate_hz: u32) -> String {
    match rate_hz {
        0 => "-".to_owned(),
        r if r >= 1000 && r % 1000 == 0 => format!("{} kHz", r / 1000),
        r => format!("{r} Hz"),
    }
}
