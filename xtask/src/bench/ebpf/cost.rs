//! What one load of the sampler measured, and what follows from it: ns per run over the drain
//! intervals, frames per walk, the runs that exited early. Plain numbers, no process.

use common::{Counter, COUNTER_COUNT};

use crate::bench::stats;

/// What one sampler load measured.
#[derive(Debug, Default)]
pub(super) struct Cost {
    pub(super) run_ns: u64,
    pub(super) runs: u64,
    /// runs that exited before walking (idle CPU, untracked task or thread)
    pub(super) early: u64,
    pub(super) idle: u64,
    pub(super) emitted: u64,
    pub(super) frames: u64,
    pub(super) anchor_hits: u64,
    /// records whose walk did not end cleanly (read failure, truncated)
    pub(super) incomplete: u64,
    /// native sections: records that carry one, their stack and kernel bytes
    pub(super) native: NativeCount,
    /// (run ns, runs) of each 100 ms drain interval
    pub(super) windows: Vec<(u64, u64)>,
}

impl Cost {
    /// The cost from the program's totals (`run_ns`, `runs`), its counters summed over the
    /// CPUs, and what this process counted while draining.
    pub(super) fn from_counters(
        (run_ns, runs): (u64, u64),
        sums: &[u64; COUNTER_COUNT],
        incomplete: u64,
        native: NativeCount,
        intervals: Intervals,
    ) -> Cost {
        let c = |k: Counter| sums[k.index() as usize];
        let idle = c(Counter::Idle);
        Cost {
            run_ns,
            runs,
            // An unregistered thread that the program's search did not find exits early too.
            early: idle
                + c(Counter::NotTracked)
                + c(Counter::NoThreadState)
                + c(Counter::ThreadUnknown),
            idle,
            emitted: c(Counter::SamplesEmitted),
            frames: c(Counter::Frames),
            anchor_hits: c(Counter::AnchorHit),
            incomplete,
            native,
            windows: intervals.windows,
        }
    }

    /// ns per run: the quartiles over the intervals. Steal time and other tenants' cache
    /// traffic come in bursts on these VMs; the median interval is what the program costs when
    /// they leave it alone. Walks are measured on the target's thread alone, so there every run
    /// is a walk. Without an interval that ran, the whole load's mean three times.
    pub(super) fn ns_per_run(&self) -> [f64; 3] {
        let v: Vec<f64> = self
            .windows
            .iter()
            .filter(|w| w.1 > 0)
            .map(|&(ns, runs)| ns as f64 / runs as f64)
            .collect();
        if v.is_empty() {
            let mean = self.run_ns as f64 / self.runs.max(1) as f64;
            return [mean; 3];
        }
        stats::quartiles(&v)
    }

    /// Frames per emitted record.
    pub(super) fn frames_per_walk(&self) -> f64 {
        self.frames as f64 / self.emitted.max(1) as f64
    }
}

/// What the native sections of a native run held.
#[derive(Debug, Default)]
pub(super) struct NativeCount {
    pub(super) records: u64,
    pub(super) stack_bytes: u64,
    pub(super) kernel_frames: u64,
    /// records unwound in this process (the first few of each interval) and their frames
    pub(super) unwound: u64,
    pub(super) frames: u64,
}

impl NativeCount {
    /// `v` per record with a native section.
    pub(super) fn per_record(&self, v: u64) -> f64 {
        v as f64 / self.records.max(1) as f64
    }

    /// Native frames per record unwound here.
    pub(super) fn frames_per_unwound(&self) -> f64 {
        self.frames as f64 / self.unwound.max(1) as f64
    }
}

/// The program's run time and run count per drain interval, from its running totals.
#[derive(Debug, Default)]
pub(super) struct Intervals {
    last: (u64, u64),
    windows: Vec<(u64, u64)>,
}

impl Intervals {
    /// Adds the interval that ends at the totals `(run ns, runs)`.
    pub(super) fn record(&mut self, (ns, runs): (u64, u64)) {
        self.windows.push((ns - self.last.0, runs - self.last.1));
        self.last = (ns, runs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_windows(windows: &[(u64, u64)]) -> Cost {
        Cost {
            run_ns: 9_000,
            runs: 3,
            windows: windows.to_vec(),
            ..Cost::default()
        }
    }

    #[test]
    fn ns_per_run_is_taken_over_the_intervals_that_ran() {
        let c = with_windows(&[(1_000, 1), (4_000, 2), (0, 0), (9_000, 3), (5_000, 1)]);
        // 1000, 2000, 3000, 5000 ns per run; the empty interval is left out.
        assert_eq!(c.ns_per_run(), [1_750.0, 2_500.0, 3_500.0]);
    }

    #[test]
    fn without_an_interval_ns_per_run_is_the_whole_mean() {
        assert_eq!(with_windows(&[]).ns_per_run(), [3_000.0; 3]);
        assert_eq!(with_windows(&[(0, 0)]).ns_per_run(), [3_000.0; 3]);
        assert_eq!(Cost::default().ns_per_run(), [0.0; 3]);
    }

    #[test]
    fn per_record_and_per_walk_divide_by_at_least_one() {
        let c = Cost {
            frames: 1_010,
            emitted: 10,
            ..Cost::default()
        };
        assert_eq!(c.frames_per_walk(), 101.0);
        assert_eq!(Cost::default().frames_per_walk(), 0.0);
        let n = NativeCount {
            records: 4,
            stack_bytes: 10_000,
            unwound: 2,
            frames: 51,
            ..NativeCount::default()
        };
        assert_eq!(n.per_record(n.stack_bytes), 2_500.0);
        assert_eq!(n.frames_per_unwound(), 25.5);
        assert_eq!(NativeCount::default().per_record(7), 7.0);
    }

    #[test]
    fn intervals_are_the_differences_of_the_totals() {
        let mut i = Intervals::default();
        for totals in [(100, 1), (350, 3), (350, 3), (1_000, 4)] {
            i.record(totals);
        }
        assert_eq!(i.windows, [(100, 1), (250, 2), (0, 0), (650, 1)]);
    }

    #[test]
    fn early_exits_add_the_idle_and_the_untracked() {
        let mut sums = [0u64; COUNTER_COUNT];
        let mut set = |k: Counter, v| sums[k.index() as usize] = v;
        set(Counter::Idle, 5);
        set(Counter::NotTracked, 7);
        set(Counter::NoThreadState, 11);
        set(Counter::ThreadUnknown, 13);
        set(Counter::SamplesEmitted, 17);
        set(Counter::Frames, 1_700);
        set(Counter::AnchorHit, 16);
        let mut intervals = Intervals::default();
        intervals.record((500, 2));
        let c = Cost::from_counters((500, 53), &sums, 1, NativeCount::default(), intervals);
        assert_eq!((c.run_ns, c.runs), (500, 53));
        assert_eq!((c.early, c.idle), (36, 5));
        assert_eq!((c.emitted, c.frames, c.anchor_hits), (17, 1_700, 16));
        assert_eq!(c.incomplete, 1);
        assert_eq!(c.windows, [(500, 2)]);
        assert_eq!(c.frames_per_walk(), 100.0);
    }
}
