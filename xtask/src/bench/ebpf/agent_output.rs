//! What one run of the agent gave: its lines on stderr read (summary, off-CPU line, samples),
//! the CPU spans between the harness's readings, and the percentages the tables show. No
//! process is run here.

use std::time::Instant;

use crate::bench::stats;
use crate::bench::util::Usage;

/// One run of the agent, as measured from outside it.
#[derive(Debug)]
pub(super) struct AgentRun {
    pub(super) usage: Usage,
    /// CPU seconds and wall seconds from the end of the first scan to exit
    pub(super) steady: Option<(f64, f64)>,
    /// CPU seconds and wall seconds from the end of the first scan to the last reading before
    /// the run's end (sampling only: no profile writing, no teardown)
    pub(super) sampling: Option<(f64, f64)>,
    /// the same over the sampling span's second half: what a long-running service costs, once
    /// the one-time work of a new process (its objects parsed, with `--native` its unwind
    /// tables and the kernel's symbols) is done
    pub(super) second_half: Option<(f64, f64)>,
    /// highest VmRSS seen after the first scan
    pub(super) steady_rss: Option<u64>,
    /// BPF program run time (ns) and the wall seconds it was observed over
    pub(super) bpf: Option<(u64, f64)>,
    /// run time (ns) of the off-CPU program, over the same wall seconds
    pub(super) switch_ns: Option<u64>,
    pub(super) profiles: Option<usize>,
    pub(super) samples: Option<u64>,
    pub(super) summary: String,
    /// the agent's `pyagent: off-CPU: ...` line, with `--off-cpu`
    pub(super) off_cpu_line: Option<String>,
}

impl AgentRun {
    /// CPU as % of one core over the whole run (`wait4`).
    pub(super) fn whole_pct(&self) -> f64 {
        stats::percent(self.usage.cpu_secs(), self.usage.wall.as_secs_f64())
    }

    /// CPU as % of one core after the first scan, to exit.
    pub(super) fn steady_pct(&self) -> Option<f64> {
        self.steady.map(|(cpu, wall)| stats::percent(cpu, wall))
    }

    /// CPU as % of one core while sampling.
    pub(super) fn sampling_pct(&self) -> Option<f64> {
        self.sampling.map(|(cpu, wall)| stats::percent(cpu, wall))
    }

    /// CPU as % of one core over the second half of the sampling.
    pub(super) fn second_half_pct(&self) -> Option<f64> {
        self.second_half
            .map(|(cpu, wall)| stats::percent(cpu, wall))
    }

    /// Peak RSS over the whole run (`ru_maxrss`), MiB.
    pub(super) fn peak_rss_mib(&self) -> f64 {
        mib(self.usage.max_rss)
    }

    /// Highest RSS polled after the first scan, MiB.
    pub(super) fn steady_rss_mib(&self) -> Option<f64> {
        self.steady_rss.map(mib)
    }

    /// `ns` of a BPF program's run time as % of one core over the wall time the sampler's
    /// program was observed.
    pub(super) fn of_core(&self, ns: Option<u64>) -> Option<f64> {
        match (ns, self.bpf) {
            (Some(ns), Some((_, wall))) => Some(100.0 * ns as f64 / 1e9 / wall),
            _ => None,
        }
    }
}

/// Bytes in MiB.
pub(super) fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

/// The agent's last summary line (`pyagent: ...`, not its off-CPU line), or empty.
pub(super) fn summary_line(stderr: &str) -> String {
    stderr
        .lines()
        .rev()
        .find(|l| l.starts_with("pyagent:") && !l.starts_with("pyagent: off-CPU"))
        .unwrap_or("")
        .to_owned()
}

/// What follows `pyagent: off-CPU: ` on the agent's first such line.
pub(super) fn off_cpu_line(stderr: &str) -> Option<String> {
    stderr
        .lines()
        .find_map(|l| l.strip_prefix("pyagent: off-CPU: "))
        .map(str::to_owned)
}

/// The number of samples in a summary line: the first word inside its first parenthesis.
pub(super) fn samples_in(summary: &str) -> Option<u64> {
    summary
        .split_once(" (")
        .and_then(|(_, r)| r.split(' ').next()?.parse().ok())
}

/// The agent's CPU time as the harness read it during the run.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Readings {
    /// When the agent said its first scan was done, with its CPU seconds then from
    /// `/proc/PID/stat` and, to the nanosecond, from its threads' schedstat.
    pub(super) scanned: Option<(Instant, Option<f64>, Option<f64>)>,
    /// The first precise reading past the middle of the sampling span.
    pub(super) halfway: Option<(Instant, f64)>,
    /// The last precise reading before the sampling's end.
    pub(super) last_sampling: Option<(Instant, f64)>,
}

impl Readings {
    /// CPU and wall seconds from the first scan to the agent's exit at `end`, having used
    /// `cpu_total` seconds in all.
    pub(super) fn steady(&self, cpu_total: f64, end: Instant) -> Option<(f64, f64)> {
        match self.scanned {
            Some((at, Some(cpu), _)) => Some((cpu_total - cpu, (end - at).as_secs_f64())),
            _ => None,
        }
    }

    /// CPU and wall seconds from the first scan to the last reading while sampling.
    pub(super) fn sampling(&self) -> Option<(f64, f64)> {
        match (self.scanned, self.last_sampling) {
            (Some((at, _, Some(cpu0))), Some((t, cpu))) => {
                Some((cpu - cpu0, (t - at).as_secs_f64()))
            }
            _ => None,
        }
    }

    /// CPU and wall seconds over the second half of the sampling span, if it has one.
    pub(super) fn second_half(&self) -> Option<(f64, f64)> {
        match (self.halfway, self.last_sampling) {
            (Some((t0, cpu0)), Some((t, cpu))) if t > t0 => {
                Some((cpu - cpu0, (t - t0).as_secs_f64()))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::time::Duration;

    use super::*;

    /// A run of 10 wall seconds that used 0.05 CPU seconds and 40 MiB at most.
    pub(crate) fn run() -> AgentRun {
        AgentRun {
            usage: Usage {
                status: 0,
                user: Duration::from_millis(40),
                sys: Duration::from_millis(10),
                max_rss: 40 << 20,
                wall: Duration::from_secs(10),
            },
            steady: Some((0.02, 8.0)),
            sampling: Some((0.01, 5.0)),
            second_half: Some((0.004, 2.0)),
            steady_rss: Some(30 << 20),
            bpf: Some((50_000_000, 10.0)),
            switch_ns: Some(20_000_000),
            profiles: Some(3),
            samples: Some(1_234),
            summary: "pyagent: 3 processes (1234 samples)".into(),
            off_cpu_line: Some("567 switches".into()),
        }
    }

    #[test]
    fn the_summary_is_the_last_line_of_the_agent_but_its_off_cpu_line() {
        let stderr = "pyagent: profiling every CPython process\n\
                      noise\n\
                      pyagent: wrote 3 profiles (1234 samples, 2 lost)\n\
                      pyagent: off-CPU: 567 switches, 12 ms\n";
        let summary = summary_line(stderr);
        assert_eq!(summary, "pyagent: wrote 3 profiles (1234 samples, 2 lost)");
        assert_eq!(samples_in(&summary), Some(1_234));
        assert_eq!(off_cpu_line(stderr).as_deref(), Some("567 switches, 12 ms"));
    }

    #[test]
    fn a_silent_agent_has_no_summary() {
        assert_eq!(summary_line("error: no root\n"), "");
        assert_eq!(samples_in(""), None);
        assert_eq!(samples_in("pyagent: done (many samples)"), None);
        assert_eq!(off_cpu_line(""), None);
    }

    #[test]
    fn cpu_spans_run_between_the_readings() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let r = Readings {
            scanned: Some((at(2), Some(0.5), Some(0.4))),
            halfway: Some((at(6), 0.7)),
            last_sampling: Some((at(10), 1.0)),
        };
        let close = |a: Option<(f64, f64)>, b: (f64, f64)| {
            let a = a.expect("a span");
            assert!(
                (a.0 - b.0).abs() < 1e-12 && (a.1 - b.1).abs() < 1e-12,
                "{a:?}"
            );
        };
        close(r.steady(1.5, at(12)), (1.0, 10.0));
        close(r.sampling(), (0.6, 8.0));
        close(r.second_half(), (0.3, 4.0));
    }

    #[test]
    fn a_span_needs_both_of_its_ends() {
        let t0 = Instant::now();
        let none = Readings::default();
        assert_eq!(none.steady(1.0, t0), None);
        assert_eq!(none.sampling(), None);
        assert_eq!(none.second_half(), None);
        // Scanned, but without a CPU reading then.
        let r = Readings {
            scanned: Some((t0, None, None)),
            halfway: Some((t0, 0.5)),
            last_sampling: Some((t0, 0.5)),
        };
        assert_eq!(r.steady(1.0, t0), None);
        assert_eq!(r.sampling(), None);
        // The halfway reading was the last one: no second half.
        assert_eq!(r.second_half(), None);
    }

    #[test]
    fn percentages_of_a_core_and_mib() {
        let r = run();
        assert!((r.whole_pct() - 0.5).abs() < 1e-9);
        assert!((r.steady_pct().expect("steady") - 0.25).abs() < 1e-9);
        assert!((r.sampling_pct().expect("sampling") - 0.2).abs() < 1e-9);
        assert!((r.second_half_pct().expect("second half") - 0.2).abs() < 1e-9);
        assert_eq!(r.peak_rss_mib(), 40.0);
        assert_eq!(r.steady_rss_mib(), Some(30.0));
        assert_eq!(r.of_core(r.bpf.map(|b| b.0)), Some(0.5));
        assert_eq!(r.of_core(r.switch_ns), Some(0.2));
        assert_eq!(r.of_core(None), None);
        let no_bpf = AgentRun { bpf: None, ..run() };
        assert_eq!(no_bpf.of_core(Some(1)), None);
    }
}
