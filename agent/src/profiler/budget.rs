//! The agent's CPU budget: the operator says how much of one core profiling may cost
//! (`cpu_budget`, 1% by default), and the sampling rate follows.
//!
//! What counts is the agent's own CPU time (every thread: sampling, resolving, encoding,
//! uploading) plus, in eBPF mode, the time the BPF programs run in the kernel on behalf of the
//! profiled processes (the kernel's run-time statistics). At every profile window's end the
//! [`RateGovernor`] compares the recent cost with the budget. Part of the cost falls with the
//! rate (the sampling program, the agent's handling of each record or tick) and part does not
//! (discovery, thread lists, one profile per process and window, off-CPU records). The agent
//! measures the first part itself, as CPU time of the code that handles samples, so each
//! window splits into the two ([`CostModel`]): with 200 processes whose fixed part is most of
//! the budget, the rate falls to where the samples fit in what is left, not ten times further
//! as it did when the whole cost was taken to scale. The decision looks at the last
//! [`HISTORY`] windows (median fixed part, mean cost per hertz): with many processes part of
//! the cost comes in bursts (a scan finding a batch of processes, a thread-list refresh), and a
//! governor that followed each window would halve the rate after one burst while the average
//! stays far under the budget. A lasting overload of samples still moves the rate within one
//! window (it dominates the mean), a lasting rise of the fixed part within two.
//! - over the budget, the rate drops to where the predicted cost is 90% of the budget (so that
//!   the next window lands under it, not on it);
//! - when that rate is well above the current one (where, were all of the cost per sample, the
//!   cost is under 70% of the budget), the rate rises to it, at most doubling per window and
//!   never past the configured rate;
//! - in between, it stays: the band keeps noise from moving the rate every window.
//!
//! The rate changes only between windows, so each window has one sampling period and its
//! samples scale to CPU time exactly (the period is in every profile, the rate is a metric).
//! Part of the cost does not fall with the rate (discovery, thread-list reads, encoding one
//! profile per process, off-CPU records): when even the lowest rate costs more than the budget
//! the governor says so ([`Decision::OverAtLowestRate`]) instead of going quiet.

use std::collections::VecDeque;
use std::fmt;
use std::time::{Duration, Instant};

/// A share of one CPU core, in millionths (1% is 10,000).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CoreShare(u32);

impl CoreShare {
    /// The default budget: 1% of one core.
    pub const DEFAULT: CoreShare = CoreShare(10_000);
    /// The smallest budget that can be set: 0.01% of one core.
    pub const MIN: CoreShare = CoreShare(100);
    /// The largest: a whole core.
    pub const MAX: CoreShare = CoreShare(1_000_000);

    /// `millionths` of one core, if within [`CoreShare::MIN`]..=[`CoreShare::MAX`].
    pub fn from_millionths(millionths: u32) -> Option<CoreShare> {
        (Self::MIN.0..=Self::MAX.0)
            .contains(&millionths)
            .then_some(CoreShare(millionths))
    }

    /// The share as a fraction of one core (0.01 for 1%).
    pub fn fraction(self) -> f64 {
        f64::from(self.0) / 1e6
    }
}

impl fmt::Display for CoreShare {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}%", f64::from(self.0) / 1e4)
    }
}

/// What the operator allows profiling to cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CpuBudget {
    /// No budget: always the configured rate.
    Off,
    /// At most this share of one core.
    Limit(CoreShare),
}

impl Default for CpuBudget {
    fn default() -> CpuBudget {
        CpuBudget::Limit(CoreShare::DEFAULT)
    }
}

impl fmt::Display for CpuBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CpuBudget::Off => f.write_str("off"),
            CpuBudget::Limit(share) => share.fmt(f),
        }
    }
}

/// The lowest rate the governor goes to: one sample a second per CPU (or per process).
pub const LOWEST_RATE_HZ: u32 = 1;

/// A rate is raised when the budget allows [`AIM`] / this times it: when all of the cost is per
/// sample, when the cost is under this share of the budget.
const RAISE_BELOW: f64 = 0.7;
/// A change aims at this share of the budget.
const AIM: f64 = 0.9;
/// A rate at most doubles per window: a quiet window may be followed by a busy one.
const MAX_RAISE: f64 = 2.0;
/// How many windows the decision looks back on.
pub const HISTORY: usize = 3;

/// CPU time spent since the start, as read at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CostReading {
    /// When it was read.
    pub at: Instant,
    /// The agent's user and system CPU time, all threads.
    pub agent: Duration,
    /// Run time of the BPF programs (zero in userspace mode, or without statistics).
    pub bpf: Duration,
    /// Of `agent` and `bpf`, what samples cost: the sampling program's run time and the
    /// agent's handling of records (eBPF), the sampling ticks (userspace).
    pub per_sample: Duration,
}

impl CostReading {
    /// The agent's CPU time now (`getrusage(RUSAGE_SELF)`), with the BPF programs' `bpf` and
    /// the part of both that samples cost.
    pub fn now(bpf: Duration, per_sample: Duration) -> CostReading {
        let agent = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF)
            .map(|u| {
                let tv = |t: nix::sys::time::TimeVal| {
                    Duration::from_secs(t.tv_sec().max(0) as u64)
                        + Duration::from_micros(t.tv_usec().max(0) as u64)
                };
                tv(u.user_time()) + tv(u.system_time())
            })
            .unwrap_or_default();
        CostReading {
            at: Instant::now(),
            agent,
            bpf,
            per_sample,
        }
    }
}

/// What one window cost, as shares of one core.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WindowCost {
    /// The agent's own share.
    pub agent: f64,
    /// The BPF programs' share.
    pub bpf: f64,
    /// Of both, the share samples cost (the rest does not depend on the rate).
    pub per_sample: f64,
    /// What the decision was made on: the cost of this window's rate as the last [`HISTORY`]
    /// windows, this one included, predict it (their fixed part, and their cost per sample at
    /// this rate).
    pub recent: f64,
}

impl WindowCost {
    /// Both together: what the budget is compared with.
    pub fn total(&self) -> f64 {
        self.agent + self.bpf
    }
}

/// What the governor decided at the end of a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// The rate stays.
    Keep,
    /// Over the budget: sample at this lower rate.
    Lower(u32),
    /// Well under the budget and below the configured rate: sample at this higher rate.
    Raise(u32),
    /// Over the budget at the lowest rate already: the fixed costs alone exceed it.
    OverAtLowestRate,
}

/// Keeps the sampling rate where the agent's cost stays within its budget.
#[derive(Debug)]
pub struct RateGovernor {
    budget: CoreShare,
    configured_hz: u32,
    min_window: Duration,
    last: Option<CostReading>,
    /// The last [`HISTORY`] windows, oldest first.
    history: VecDeque<PastWindow>,
}

/// A window the governor remembers.
#[derive(Debug, Clone, Copy)]
struct PastWindow {
    /// Its length, in seconds: longer windows weigh more.
    wall: f64,
    /// What of its cost (agent and BPF, share of one core) did not depend on the rate.
    fixed: f64,
    /// What the rest cost per hertz of its rate.
    per_hz: f64,
}

impl RateGovernor {
    /// A governor for `budget`, never sampling faster than `configured_hz`, deciding on
    /// windows of at least `min_window` (a shorter one is added to the next: a loaded host
    /// cuts late, then twice in a row, and a window of a few milliseconds measures noise).
    pub fn new(budget: CoreShare, configured_hz: u32, min_window: Duration) -> RateGovernor {
        RateGovernor {
            budget,
            configured_hz: configured_hz.max(LOWEST_RATE_HZ),
            min_window,
            last: None,
            history: VecDeque::with_capacity(HISTORY),
        }
    }

    /// The budget it keeps.
    pub fn budget(&self) -> CoreShare {
        self.budget
    }

    /// Starts the first window (its cost is measured from here).
    pub fn start(&mut self, reading: CostReading) {
        self.last = Some(reading);
    }

    /// Ends a window sampled at `rate_hz`: its cost, and the rate for the next one. `None`
    /// for a window too short to measure (it goes on), or before [`RateGovernor::start`]
    /// (which this call then stands for: the next window starts at `reading`).
    pub fn end_window(
        &mut self,
        reading: CostReading,
        rate_hz: u32,
    ) -> Option<(WindowCost, Decision)> {
        let Some(last) = self.last else {
            self.last = Some(reading);
            return None;
        };
        let wall = reading.at.checked_duration_since(last.at)?;
        if wall < self.min_window.max(Duration::from_millis(100)) {
            return None;
        }
        self.last = Some(reading);
        let wall = wall.as_secs_f64();
        let share = |now: Duration, then: Duration| now.saturating_sub(then).as_secs_f64() / wall;
        let (agent, bpf) = (
            share(reading.agent, last.agent),
            share(reading.bpf, last.bpf),
        );
        // The per-sample part is measured inside the total; clocks read at slightly different
        // instants cannot make it more than the whole.
        let per_sample = share(reading.per_sample, last.per_sample).min(agent + bpf);
        if self.history.len() == HISTORY {
            self.history.pop_front();
        }
        self.history.push_back(PastWindow {
            wall,
            fixed: agent + bpf - per_sample,
            per_hz: per_sample / f64::from(rate_hz.max(LOWEST_RATE_HZ)),
        });
        let model = self.model();
        let recent = model.at(f64::from(rate_hz.max(LOWEST_RATE_HZ)));
        let cost = WindowCost {
            agent,
            bpf,
            per_sample,
            recent,
        };
        Some((cost, self.decide(&model, recent, rate_hz)))
    }

    /// What the remembered windows say a rate costs: the median of their fixed parts (one
    /// window of bursts, a scan finding a batch of new processes, does not move it; a lasting
    /// change moves it from its second window) and their length-weighted mean cost per hertz
    /// (where a lasting overload of samples shows in its first window).
    fn model(&self) -> CostModel {
        let weight: f64 = self.history.iter().map(|w| w.wall).sum();
        let per_hz = if weight > 0.0 {
            self.history.iter().map(|w| w.wall * w.per_hz).sum::<f64>() / weight
        } else {
            0.0
        };
        let mut fixed: Vec<f64> = self.history.iter().map(|w| w.fixed).collect();
        fixed.sort_by(f64::total_cmp);
        let fixed = match fixed.len() {
            0 => 0.0,
            n if n % 2 == 1 => fixed[n / 2],
            n => (fixed[n / 2 - 1] + fixed[n / 2]) / 2.0,
        };
        CostModel { fixed, per_hz }
    }

    /// The rate for the next window, given that `rate_hz` costs `used` of a core as `model`
    /// predicts it.
    fn decide(&self, model: &CostModel, used: f64, rate_hz: u32) -> Decision {
        let budget = self.budget.fraction();
        let rate = f64::from(rate_hz.max(LOWEST_RATE_HZ));
        // The rate whose predicted cost is the aim (as high as wanted when samples cost
        // nothing measurable; zero when the fixed part alone is over it).
        let fits = model.rate_for(AIM * budget);
        if used > budget {
            if rate_hz <= LOWEST_RATE_HZ {
                return Decision::OverAtLowestRate;
            }
            return Decision::Lower((fits.floor() as u32).clamp(LOWEST_RATE_HZ, rate_hz - 1));
        }
        if fits > rate * AIM / RAISE_BELOW && rate_hz < self.configured_hz {
            let higher = fits.min(rate * MAX_RAISE);
            return Decision::Raise((higher.floor() as u32).clamp(rate_hz + 1, self.configured_hz));
        }
        Decision::Keep
    }
}

/// What a sampling rate costs, as shares of one core: a part that does not depend on the rate
/// and a part per hertz, both measured (see [`CostReading::per_sample`]). Splitting them by
/// fitting a line through windows at different rates would need no measurement, but on a host
/// with many processes the fixed part of a 5 s window varies by a third of the budget from one
/// window to the next, more than the samples of a few hundred hertz cost: the line's slope
/// would be noise.
#[derive(Debug, Clone, Copy, PartialEq)]
struct CostModel {
    fixed: f64,
    per_hz: f64,
}

impl CostModel {
    /// The cost at `rate_hz`.
    fn at(&self, rate_hz: f64) -> f64 {
        self.fixed + self.per_hz * rate_hz
    }

    /// The rate that costs `cost`.
    fn rate_for(&self, cost: f64) -> f64 {
        if self.per_hz <= 0.0 {
            return f64::MAX;
        }
        ((cost - self.fixed) / self.per_hz).max(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn governor(budget_percent: f64, configured: u32) -> RateGovernor {
        RateGovernor::new(
            CoreShare::from_millionths((budget_percent * 1e4) as u32).unwrap(),
            configured,
            Duration::from_secs(1),
        )
    }

    /// A window of 10 s whose agent and BPF cost were `agent` and `bpf` shares of a core, all
    /// of it spent on samples.
    fn window(g: &mut RateGovernor, agent: f64, bpf: f64, rate: u32) -> (WindowCost, Decision) {
        split_window(g, agent, bpf, agent + bpf, rate)
    }

    /// A window of 10 s: `agent` and `bpf` shares of a core, of which `per_sample` on samples.
    fn split_window(
        g: &mut RateGovernor,
        agent: f64,
        bpf: f64,
        per_sample: f64,
        rate: u32,
    ) -> (WindowCost, Decision) {
        let start = Instant::now();
        let seconds = |share: f64| Duration::from_secs_f64(share * 10.0);
        g.start(CostReading {
            at: start,
            agent: Duration::ZERO,
            bpf: Duration::ZERO,
            per_sample: Duration::ZERO,
        });
        g.end_window(
            CostReading {
                at: start + Duration::from_secs(10),
                agent: seconds(agent),
                bpf: seconds(bpf),
                per_sample: seconds(per_sample),
            },
            rate,
        )
        .unwrap()
    }

    #[test]
    fn over_the_budget_the_rate_falls_in_proportion_with_a_margin() {
        let mut g = governor(1.0, 999);
        let (cost, decision) = window(&mut g, 0.03, 0.01, 999);
        assert!((cost.total() - 0.04).abs() < 1e-9, "{cost:?}");
        // 4% at 999 Hz: 1% allows ~250 Hz; aiming at 90% of it gives 224.
        assert_eq!(decision, Decision::Lower(224));
    }

    #[test]
    fn the_bpf_time_counts_against_the_budget() {
        assert_eq!(
            window(&mut governor(1.0, 99), 0.004, 0.0, 99).1,
            Decision::Keep
        );
        assert!(matches!(
            window(&mut governor(1.0, 99), 0.004, 0.008, 99).1,
            Decision::Lower(_)
        ));
    }

    #[test]
    fn well_under_the_budget_the_rate_rises_at_most_twofold_and_never_past_the_configured_rate() {
        let decide = |used: f64, rate: u32| window(&mut governor(1.0, 999), used, 0.0, rate).1;
        assert_eq!(decide(0.0001, 100), Decision::Raise(200));
        assert_eq!(decide(0.0, 600), Decision::Raise(999));
        // 0.5% at 100 Hz: aiming at 0.9% gives 180 Hz.
        assert_eq!(decide(0.005, 100), Decision::Raise(180));
        assert_eq!(decide(0.0001, 999), Decision::Keep);
    }

    #[test]
    fn between_70_and_100_percent_of_the_budget_the_rate_stays() {
        let mut g = governor(1.0, 999);
        for used in [0.0071, 0.0085, 0.01] {
            assert_eq!(window(&mut g, used, 0.0, 300).1, Decision::Keep, "{used}");
        }
    }

    #[test]
    fn one_costly_window_among_cheap_ones_keeps_the_rate() {
        // CI's debug build with 200 processes on a 3% budget: windows of about 2%, then one
        // of bursts (a scan finding processes, thread-list refreshes) at 4.5%. Deciding on that
        // window alone cut the rate by a third.
        let mut g = governor(3.0, 999);
        assert_eq!(window(&mut g, 0.022, 0.0, 54).1, Decision::Keep);
        assert_eq!(window(&mut g, 0.022, 0.0, 54).1, Decision::Keep);
        let (cost, decision) = window(&mut g, 0.045, 0.0, 54);
        assert_eq!(decision, Decision::Keep, "{cost:?}");
        assert!((cost.recent - 0.089 / 3.0).abs() < 1e-9, "{cost:?}");
        // Alone, that window lowers the rate.
        assert!(matches!(
            window(&mut governor(3.0, 999), 0.045, 0.0, 54).1,
            Decision::Lower(_)
        ));
    }

    #[test]
    fn a_lasting_overload_lowers_the_rate_at_once_and_windows_scale_to_the_new_rate() {
        let mut g = governor(1.0, 999);
        window(&mut g, 0.004, 0.0, 999);
        window(&mut g, 0.004, 0.0, 999);
        // Twelve times the budget among cheap windows: the mean (4.27%) is over, at once.
        let Decision::Lower(lower) = window(&mut g, 0.12, 0.0, 999).1 else {
            panic!("a 12% window among 0.4% ones must lower the rate");
        };
        assert_eq!(lower, 210, "999 Hz * 90% * 1% / 4.27%");
        // At the lower rate the remembered windows count at that rate.
        let (cost, _) = window(&mut g, 0.008, 0.0, lower);
        let expected = (0.004 + 0.12) * f64::from(lower) / 999.0 / 3.0 + 0.008 / 3.0;
        assert!(
            (cost.recent - expected).abs() < 1e-9,
            "{cost:?} vs {expected}"
        );
    }

    /// Runs the governor over `windows` windows from `rate`, applying each decision; a window
    /// at a rate costs `fixed` plus `per_hz` for each hertz. The rates it sampled at.
    fn run(
        g: &mut RateGovernor,
        mut rate: u32,
        windows: usize,
        fixed: f64,
        per_hz: f64,
    ) -> Vec<u32> {
        let mut rates = vec![rate];
        for _ in 0..windows {
            let samples = per_hz * f64::from(rate);
            match split_window(g, fixed + samples, 0.0, samples, rate).1 {
                Decision::Lower(r) | Decision::Raise(r) => rate = r,
                Decision::Keep | Decision::OverAtLowestRate => {}
            }
            rates.push(rate);
        }
        rates
    }

    #[test]
    fn a_large_fixed_part_leaves_the_rate_where_the_samples_fit_in_the_rest() {
        // The release agent with 200 processes: 1.1% of a core whatever the rate, 0.7% more
        // at 999 Hz, on a 1.5% budget. Scaling the whole cost with the rate settled at 39 Hz;
        // 90% of the budget is 357 Hz.
        let rates = run(&mut governor(1.5, 999), 999, 6, 0.011, 0.007 / 999.0);
        assert_eq!(rates, [999, 356, 356, 356, 356, 356, 356]);
    }

    #[test]
    fn bursts_of_fixed_cost_are_averaged_and_a_lasting_one_lowers_to_the_lowest_rate() {
        let mut g = governor(1.5, 999);
        let per_hz = 0.007 / 999.0;
        let samples = per_hz * 356.0;
        // Settled at 356 Hz; one window whose fixed part doubles (a batch of new processes).
        assert_eq!(run(&mut g, 356, 3, 0.011, per_hz).last(), Some(&356));
        let (cost, decision) = split_window(&mut g, 0.022 + samples, 0.0, samples, 356);
        assert_eq!(decision, Decision::Keep, "{cost:?}");
        // A start-up with 200 processes at once: 4% of a core for discovery alone. No rate
        // fits; the samples are cut to the lowest, and the rate comes back when it passes.
        let mut g = governor(1.5, 999);
        assert_eq!(run(&mut g, 999, 3, 0.04, per_hz), [999, 1, 1, 1]);
        let rates = run(&mut g, 1, 12, 0.011, per_hz);
        assert_eq!(rates.last(), Some(&356), "{rates:?}");
    }

    #[test]
    fn with_the_fixed_part_measured_the_rate_rises_when_the_work_goes_away() {
        let mut g = governor(1.5, 999);
        let rates = run(&mut g, 999, 4, 0.011, 0.007 / 999.0);
        assert_eq!(rates.last(), Some(&356), "{rates:?}");
        // Two processes left: a tenth of a percent in all.
        let rates = run(&mut g, 356, 3, 0.0005, 0.0005 / 999.0);
        assert_eq!(
            rates,
            [356, 516, 999, 999],
            "the fixed part follows from the second light window"
        );
    }

    #[test]
    fn a_per_sample_reading_above_the_whole_counts_as_the_whole() {
        // Two clocks read a moment apart: the part must not exceed the total.
        let (cost, decision) = split_window(&mut governor(1.0, 999), 0.02, 0.0, 0.021, 999);
        assert!((cost.recent - 0.02).abs() < 1e-9, "{cost:?}");
        assert_eq!(decision, Decision::Lower(449));
    }

    #[test]
    fn fixed_costs_over_the_budget_at_the_lowest_rate_are_said() {
        let mut g = governor(0.5, 19);
        assert_eq!(window(&mut g, 0.02, 0.0, 2).1, Decision::Lower(1));
        assert_eq!(
            window(&mut g, 0.02, 0.0, LOWEST_RATE_HZ).1,
            Decision::OverAtLowestRate
        );
    }

    #[test]
    fn a_window_too_short_or_unstarted_decides_nothing() {
        let mut g = governor(1.0, 99);
        let now = Instant::now();
        let reading = CostReading {
            at: now,
            agent: Duration::from_secs(1),
            bpf: Duration::ZERO,
            per_sample: Duration::ZERO,
        };
        assert_eq!(g.end_window(reading, 99), None);
        assert_eq!(g.end_window(reading, 99), None, "no wall time passed");
        let short = CostReading {
            at: now + Duration::from_millis(500),
            ..reading
        };
        assert_eq!(
            g.end_window(short, 99),
            None,
            "shorter than the 1 s minimum"
        );
        let later = CostReading {
            at: now + Duration::from_secs(2),
            agent: Duration::from_secs(1),
            ..reading
        };
        // Measured from the first reading, not from the short window's end.
        let (cost, _) = g.end_window(later, 99).expect("a whole window");
        assert_eq!(cost.agent, 0.0);
    }

    #[test]
    fn shares_print_as_percent_and_are_bounded() {
        assert_eq!(CoreShare::DEFAULT.to_string(), "1%");
        assert_eq!(
            CoreShare::from_millionths(2_500).unwrap().to_string(),
            "0.25%"
        );
        assert_eq!(CoreShare::from_millionths(99), None);
        assert_eq!(CoreShare::from_millionths(1_000_001), None);
    }

    #[test]
    fn the_agent_s_own_cpu_time_is_read() {
        let before = CostReading::now(Duration::ZERO, Duration::ZERO);
        let mut x = 0u64;
        let until = Instant::now() + Duration::from_millis(30);
        while Instant::now() < until {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let after = CostReading::now(Duration::ZERO, Duration::ZERO);
        assert!(after.agent > before.agent, "{before:?} {after:?}");
    }
}
