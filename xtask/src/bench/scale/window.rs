//! The measured window: two readings of the agent, its programs, the targets and the output
//! directory, and what follows from their difference (CPU share, BPF time per run and per
//! context switch of a tracked thread, profiles per window). No process is run here.

use std::collections::{BTreeMap, BTreeSet};

use super::proc_files::{profile_pid, Kind, Program};

/// Everything read at one end of the window.
#[derive(Debug, Clone, Default)]
pub(super) struct Snapshot {
    /// wall seconds since an origin of the caller's choice
    pub(super) at: f64,
    /// the agent's user + system CPU seconds (`/proc/PID/stat`)
    pub(super) agent_cpu: f64,
    /// the agent's `VmRSS` and `VmHWM`, KiB
    pub(super) rss_kib: u64,
    pub(super) hwm_kib: u64,
    /// the agent's programs, by id
    pub(super) programs: BTreeMap<u32, Program>,
    /// context switches of the targets' threads so far
    pub(super) switches: u64,
    /// the profiles in the output directory
    pub(super) profiles: BTreeSet<String>,
}

/// Runs and run time of the agent's programs of one kind over the window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Runs {
    pub(super) count: u64,
    pub(super) ns: u64,
}

impl Runs {
    /// Mean run time, ns (`None` without runs).
    pub(super) fn ns_per_run(self) -> Option<f64> {
        (self.count > 0).then(|| self.ns as f64 / self.count as f64)
    }
}

/// What the window measured.
#[derive(Debug, Clone, Default)]
pub(super) struct Window {
    pub(super) wall: f64,
    pub(super) agent_cpu: f64,
    /// `VmRSS` at the end and `VmHWM` (the peak since the agent started), KiB
    pub(super) rss_kib: u64,
    pub(super) hwm_kib: u64,
    pub(super) programs: BTreeMap<Kind, Runs>,
    /// context switches of the targets' threads
    pub(super) switches: u64,
    /// profiles written in the window: of any process, and of the targets
    pub(super) profiles: usize,
    pub(super) target_profiles: usize,
}

impl Window {
    /// The window from `a` to `b`; `targets` are the pids of the bench's processes.
    pub(super) fn between(a: &Snapshot, b: &Snapshot, targets: &BTreeSet<u32>) -> Window {
        let mut programs: BTreeMap<Kind, Runs> = BTreeMap::new();
        for (id, p) in &b.programs {
            // A program loaded during the window ran only in it.
            let (cnt0, ns0) = a
                .programs
                .get(id)
                .map_or((0, 0), |q| (q.run_cnt, q.run_time_ns));
            let r = programs.entry(p.kind).or_default();
            r.count += p.run_cnt.saturating_sub(cnt0);
            r.ns += p.run_time_ns.saturating_sub(ns0);
        }
        let new: Vec<&String> = b.profiles.difference(&a.profiles).collect();
        Window {
            wall: b.at - a.at,
            agent_cpu: b.agent_cpu - a.agent_cpu,
            rss_kib: b.rss_kib,
            hwm_kib: b.hwm_kib.max(a.hwm_kib),
            programs,
            switches: b.switches.saturating_sub(a.switches),
            profiles: new.len(),
            target_profiles: new
                .iter()
                .filter(|n| profile_pid(n).is_some_and(|p| targets.contains(&p)))
                .count(),
        }
    }

    /// The agent's CPU, % of one core.
    pub(super) fn cpu_pct(&self) -> f64 {
        100.0 * self.agent_cpu / self.wall.max(1e-9)
    }

    /// The runs of the programs of `kind` (none if not loaded).
    pub(super) fn runs(&self, kind: Kind) -> Runs {
        self.programs.get(&kind).copied().unwrap_or_default()
    }

    /// All of the agent's programs' run time, % of one core.
    pub(super) fn bpf_pct(&self) -> f64 {
        let ns: u64 = self.programs.values().map(|r| r.ns).sum();
        100.0 * ns as f64 / 1e9 / self.wall.max(1e-9)
    }

    /// Per second of the window.
    pub(super) fn per_sec(&self, n: u64) -> f64 {
        n as f64 / self.wall.max(1e-9)
    }

    /// Run time of the off-CPU program per context switch of a tracked thread, ns: what the
    /// window's runs took beyond `untracked_ns` per run (the mean of a run on untracked tasks,
    /// from the agent alone), over the tracked threads' switches. Each such switch is one run
    /// (the thread leaving the CPU: its stack is walked) and shares another (the thread taking
    /// the CPU again: the end of its wait) with whichever task left the CPU then, which the
    /// subtraction counts as untracked. `None` without switches or runs.
    pub(super) fn tracked_ns_per_switch(&self, untracked_ns: f64) -> Option<f64> {
        let runs = self.runs(Kind::Switch);
        if self.switches == 0 || runs.count == 0 {
            return None;
        }
        let untracked_runs = runs.count.saturating_sub(self.switches) as f64;
        Some((runs.ns as f64 - untracked_runs * untracked_ns) / self.switches as f64)
    }

    /// Profiles written per `interval` of the window, of any process.
    pub(super) fn profiles_per_interval(&self, interval: f64) -> f64 {
        self.profiles as f64 * interval / self.wall.max(1e-9)
    }

    /// The share of the `n` targets that got a profile per `interval`, % (`None` for none).
    pub(super) fn targets_profiled_pct(&self, n: usize, interval: f64) -> Option<f64> {
        (n > 0).then(|| {
            100.0 * self.target_profiles as f64 * interval / self.wall.max(1e-9) / n as f64
        })
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    fn program(id: u32, kind: Kind, run_cnt: u64, run_time_ns: u64) -> Program {
        Program {
            id,
            kind,
            run_time_ns,
            run_cnt,
        }
    }

    fn snapshot(
        at: f64,
        cpu: f64,
        programs: &[Program],
        switches: u64,
        profiles: &[&str],
    ) -> Snapshot {
        Snapshot {
            at,
            agent_cpu: cpu,
            rss_kib: 30 << 10,
            hwm_kib: 32 << 10,
            programs: programs.iter().map(|p| (p.id, *p)).collect(),
            switches,
            profiles: profiles.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    /// 40 s with the agent at 1% of a core, 4 windows of 2 targets (pids 10 and 11) and one
    /// other process (pid 99); the off-CPU program ran 1M times for 0.5 s, 40,000 of them the
    /// targets' switches; the sampler 8,000 times for 40 ms; a notice program was loaded
    /// during the window.
    pub(crate) fn window() -> Window {
        let a = snapshot(
            5.0,
            1.0,
            &[
                program(1, Kind::Sample, 1_000, 5_000_000),
                program(2, Kind::Switch, 50_000, 10_000_000),
            ],
            7_000,
            &["py-10-1000.pb.gz", "py-11-1000.pb.gz"],
        );
        let mut profiles = vec!["py-10-1000.pb.gz".to_owned(), "py-11-1000.pb.gz".to_owned()];
        for w in 0..4 {
            for pid in [10, 11, 99] {
                profiles.push(format!("py-{pid}-{}.pb.gz", 2000 + w));
            }
        }
        let profiles: Vec<&str> = profiles.iter().map(String::as_str).collect();
        let b = snapshot(
            45.0,
            1.4,
            &[
                program(1, Kind::Sample, 9_000, 45_000_000),
                program(2, Kind::Switch, 1_050_000, 510_000_000),
                program(3, Kind::Notice, 10, 20_000),
            ],
            47_000,
            &profiles,
        );
        Window::between(&a, &b, &BTreeSet::from([10, 11]))
    }

    #[test]
    fn a_window_is_the_difference_of_its_ends() {
        let w = window();
        assert!((w.wall - 40.0).abs() < 1e-12);
        assert!((w.cpu_pct() - 1.0).abs() < 1e-9, "{}", w.cpu_pct());
        assert_eq!(
            w.runs(Kind::Sample),
            Runs {
                count: 8_000,
                ns: 40_000_000
            }
        );
        assert_eq!(
            w.runs(Kind::Switch),
            Runs {
                count: 1_000_000,
                ns: 500_000_000
            }
        );
        assert_eq!(
            w.runs(Kind::Notice),
            Runs {
                count: 10,
                ns: 20_000
            }
        );
        assert_eq!(w.runs(Kind::Other), Runs::default());
        assert_eq!(w.switches, 40_000);
        assert_eq!((w.profiles, w.target_profiles), (12, 8));
        assert_eq!((w.rss_kib, w.hwm_kib), (30 << 10, 32 << 10));
    }

    #[test]
    fn bpf_time_per_run_and_as_a_share_of_a_core() {
        let w = window();
        assert_eq!(w.runs(Kind::Sample).ns_per_run(), Some(5_000.0));
        assert_eq!(w.runs(Kind::Switch).ns_per_run(), Some(500.0));
        assert_eq!(Runs::default().ns_per_run(), None);
        // 540.02 ms over 40 s
        assert!((w.bpf_pct() - 1.35005).abs() < 1e-9, "{}", w.bpf_pct());
        assert!((w.per_sec(w.switches) - 1_000.0).abs() < 1e-9);
    }

    #[test]
    fn a_tracked_switch_costs_what_the_untracked_runs_leave() {
        let w = window();
        // 960,000 untracked runs at 300 ns: 288 ms; the other 212 ms over 40,000 switches.
        let t = w.tracked_ns_per_switch(300.0).expect("switches");
        assert!((t - 5_300.0).abs() < 1e-9, "{t}");
        // Were every run untracked at the mean, a tracked switch would cost one run.
        let t = w.tracked_ns_per_switch(500.0).expect("switches");
        assert!((t - 500.0).abs() < 1e-9, "{t}");
        let idle = Window {
            switches: 0,
            ..window()
        };
        assert_eq!(idle.tracked_ns_per_switch(300.0), None);
        let off = Window {
            programs: BTreeMap::new(),
            ..window()
        };
        assert_eq!(off.tracked_ns_per_switch(300.0), None);
    }

    #[test]
    fn profiles_per_window_of_all_and_of_the_targets() {
        let w = window();
        assert!((w.profiles_per_interval(10.0) - 3.0).abs() < 1e-9);
        let pct = w.targets_profiled_pct(2, 10.0).expect("targets");
        assert!((pct - 100.0).abs() < 1e-9, "{pct}");
        assert_eq!(w.targets_profiled_pct(0, 10.0), None);
    }

    #[test]
    fn counters_that_went_back_count_as_nothing() {
        let a = snapshot(0.0, 0.0, &[program(1, Kind::Switch, 10, 10)], 100, &[]);
        let b = snapshot(1.0, 0.0, &[program(1, Kind::Switch, 5, 5)], 50, &[]);
        let w = Window::between(&a, &b, &BTreeSet::new());
        assert_eq!(w.runs(Kind::Switch), Runs::default());
        assert_eq!(w.switches, 0);
    }
}
