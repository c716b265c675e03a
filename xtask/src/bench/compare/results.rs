//! What the runs measured: a row per configuration of each kind of run (slowdown, accuracy,
//! throughput, toggled slowdown), and a throughput step in words. Plain data, filled in by
//! `measure` and `toggled` and read by `report`.

use super::profiler::{Profiler, Sampled};

/// Everything measured.
#[derive(Debug)]
pub struct Results {
    /// Slowdown and cost: one row per suite, profiler and rate (rate 0 for none).
    pub slowdown: Vec<SlowRow>,
    /// One row per suite and profiler.
    pub accuracy: Vec<AccuracyRow>,
    /// One row per suite, profiler and depth.
    pub throughput: Vec<ThroughputRow>,
    /// Toggled slowdown: one row per suite, profiler and rate (rate 0 for none).
    pub toggled: Vec<ToggledRow>,
    /// `kernel.perf_event_max_sample_rate` before and after the throughput runs.
    pub perf_max_rate: (Option<u64>, Option<u64>),
    /// CPU seconds per 1000 wakes of a thread doing nothing but sleep to the next tick at the
    /// highest slowdown rate, beside a busy target ([`wake_floor`]).
    pub wake_floor: Option<f64>,
}

impl Results {
    /// Measurements that failed outright.
    pub fn failures(&self) -> usize {
        self.slowdown.iter().map(|r| r.errors.len()).sum::<usize>()
            + self.accuracy.iter().filter(|r| r.result.is_err()).count()
            + self
                .throughput
                .iter()
                .flat_map(|r| &r.steps)
                .filter(|s| matches!(s.outcome, Outcome::Failed(_)))
                .count()
            + self.toggled.iter().filter(|r| r.error.is_some()).count()
    }
}

/// One slowdown configuration over the repetitions.
#[derive(Debug)]
pub struct SlowRow {
    /// Index into the suites.
    pub suite: usize,
    /// The profiler.
    pub profiler: Profiler,
    /// Samples per second (0 for none).
    pub rate_hz: u32,
    /// The runs that finished (one per repetition; for none, one before the first profiled run
    /// of each round and one after every profiled run).
    pub runs: Vec<SlowRun>,
    /// Why runs failed.
    pub errors: Vec<String>,
}

/// One slowdown run.
#[derive(Debug, Clone)]
pub struct SlowRun {
    /// Calls of the fixed function per wall-clock second in the window.
    pub per_sec: f64,
    /// Calls per second of the target's own CPU time in the window.
    pub per_cpu_sec: f64,
    /// The profiler's side, when there was one.
    pub profiler: Option<Cost>,
    /// `(per_sec, per_cpu_sec)` of the unprofiled runs just before and after (averaged): the
    /// reference of a profiled run. For an unprofiled run, the average of the unprofiled runs
    /// two places before and after, which measures the noise of that reference.
    pub reference: Option<(f64, f64)>,
}

/// What a profiler spent and collected in one run.
#[derive(Debug, Clone, Copy)]
pub struct Cost {
    /// User + system seconds of the profiler process, start to exit.
    pub cpu_secs: f64,
    /// Samples in its output.
    pub samples: u64,
    /// Lagged ticks (pyagent userspace).
    pub lagged: Option<u64>,
}

impl Cost {
    pub fn of(s: &Sampled) -> Cost {
        Cost {
            cpu_secs: s.usage.cpu_secs(),
            samples: s.samples(),
            lagged: s.lagged,
        }
    }
}

/// The accuracy of one profiler.
#[derive(Debug)]
pub struct AccuracyRow {
    /// Index into the suites.
    pub suite: usize,
    /// The profiler.
    pub profiler: Profiler,
    /// The measurement, or why it failed.
    pub result: Result<Accuracy, String>,
}

/// Shares measured by the target itself and by a profiler.
#[derive(Debug, Clone)]
pub struct Accuracy {
    /// CPU-time shares of the hot functions (`time.process_time()` in the target).
    pub truth: [f64; 3],
    /// Sample shares of the hot functions.
    pub measured: [f64; 3],
    /// Samples in one of the hot functions.
    pub hot_samples: u64,
    /// All samples.
    pub samples: u64,
    /// Share of hot samples whose hot frame carries the hot loop's line.
    pub lines_exact: f64,
    /// Share of hot samples whose hot frame has no line or one outside its function (the rest
    /// of the non-exact ones are on its `def` or `return` line, where it does spend time).
    pub lines_wrong: f64,
    /// Share of hot samples with the right callers above the hot frame.
    pub callers_exact: f64,
}

impl Accuracy {
    /// Error per function, percentage points.
    pub fn errors_pp(&self) -> [f64; 3] {
        std::array::from_fn(|i| (self.measured[i] - self.truth[i]).abs() * 100.0)
    }

    /// The largest error, percentage points.
    pub fn max_error_pp(&self) -> f64 {
        self.errors_pp().into_iter().fold(0.0, f64::max)
    }

    /// One binomial standard error of the largest share, percentage points: the error a
    /// perfect sampler shows with this many samples.
    pub fn sigma_pp(&self) -> f64 {
        let p = self.truth[0];
        (p * (1.0 - p) / self.hot_samples.max(1) as f64).sqrt() * 100.0
    }
}

/// Throughput of one profiler at one depth.
#[derive(Debug)]
pub struct ThroughputRow {
    /// Index into the suites.
    pub suite: usize,
    /// The profiler.
    pub profiler: Profiler,
    /// Python frames on the target's stack.
    pub depth: u32,
    /// Rates tried, rising; the last failed or was the last of the plan.
    pub steps: Vec<Step>,
}

impl ThroughputRow {
    /// The highest rate sustained (each lower one was, too).
    pub fn sustained_hz(&self) -> Option<u32> {
        self.steps
            .iter()
            .take_while(|s| s.sustained())
            .last()
            .map(|s| s.rate_hz)
    }

    /// The first rate not sustained, if one was tried.
    pub fn first_miss(&self) -> Option<&Step> {
        self.steps.iter().find(|s| !s.sustained())
    }
}

/// One rate tried.
#[derive(Debug)]
pub struct Step {
    /// Samples per second asked for.
    pub rate_hz: u32,
    /// What happened.
    pub outcome: Outcome,
    /// Share of rate × duration required.
    pub sustain_share: f64,
    /// Seconds a profiler may finish late and still sustain the rate.
    pub late_allowed_s: f64,
}

impl Step {
    /// Whether the profiler collected enough, in time.
    pub fn sustained(&self) -> bool {
        match &self.outcome {
            Outcome::Measured {
                collected,
                expected,
                late_s,
                ..
            } => {
                *collected as f64 >= self.sustain_share * expected && *late_s <= self.late_allowed_s
            }
            _ => false,
        }
    }
}

/// The result of one throughput step.
#[derive(Debug)]
pub enum Outcome {
    /// The profiler ran.
    Measured {
        /// Samples in its output.
        collected: u64,
        /// Samples a profiler keeping up would have: rate × duration, for eBPF (which samples a
        /// thread only while it is on a CPU) times the share of a CPU the target had meanwhile.
        expected: f64,
        /// Samples whose stack had all `depth` frames.
        full_depth: u64,
        /// The target's CPU seconds while the profiler ran.
        target_cpu_secs: f64,
        /// Lagged ticks (pyagent userspace).
        lagged: Option<u64>,
        /// Dropped samples (pyagent ebpf).
        dropped: Option<u64>,
        /// The profiler's CPU seconds.
        cpu_secs: f64,
        /// Seconds the profiler ran past the duration and the startup and teardown it needed at
        /// the lowest rate: py-spy's duration is a number of samples (rate × duration), which
        /// it keeps collecting, late, until it has them or the target exits.
        late_s: f64,
    },
    /// The profiler does not accept the rate.
    Refused(&'static str),
    /// It failed.
    Failed(String),
}

/// A step in words, for progress lines and the report.
pub fn describe(step: &Step) -> String {
    match &step.outcome {
        Outcome::Measured {
            collected,
            expected,
            full_depth,
            lagged,
            dropped,
            late_s,
            ..
        } => {
            let mut s = format!(
                "{collected} of {expected:.0} samples ({:.0}%)",
                *collected as f64 * 100.0 / expected.max(1.0)
            );
            if full_depth < collected {
                s += &format!(", {} not full depth", collected - full_depth);
            }
            if let Some(l) = lagged {
                s += &format!(", {l} lagged ticks");
            }
            if let Some(d) = dropped.filter(|&d| d > 0) {
                s += &format!(", {d} dropped");
            }
            if *late_s > step.late_allowed_s {
                s += &format!(", {late_s:.1} s late");
            }
            s
        }
        Outcome::Refused(why) => format!("refused ({why})"),
        Outcome::Failed(e) => format!("failed: {e}"),
    }
}

/// One configuration's toggled slowdown pairs (see `toggled`).
#[derive(Debug)]
pub struct ToggledRow {
    /// Index into the suites.
    pub suite: usize,
    pub profiler: Profiler,
    /// Samples per second (0 for none).
    pub rate_hz: u32,
    /// Slowdown of the profiled half against the paused half, percent, per pair.
    pub pairs: Vec<f64>,
    /// Pairs left out (a half with the target stopped).
    pub left_out: usize,
    /// Why it could not be measured.
    pub error: Option<String>,
    /// Why the first attempt failed, when the row comes from a second one.
    pub first_failure: Option<String>,
    /// Runs whose pairs the row pools: 2 when the first run's interval was wider than resolved
    /// (a half-width above [`super::plan::RESOLVED_PP`] points) and a second run's pairs were added.
    pub runs: usize,
}
