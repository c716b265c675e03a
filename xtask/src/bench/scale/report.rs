//! The report: one row per run (N processes, off-CPU on or off), two tables (the agent; its
//! BPF programs), the targets met or missed, as markdown. No process is run here.

use super::args::OffCpu;
use super::proc_files::Kind;
use super::window::Window;
use crate::bench::util::{si, Table};

/// The project's targets (issue 36).
const CPU_TARGETS: [(usize, f64); 2] = [(250, 0.5), (1000, 1.0)];
const RSS_TARGET: (usize, f64) = (1000, 64.0);
const SWITCH_TARGET_NS: f64 = 2_000.0;

/// One run of the agent.
#[derive(Debug, Clone)]
pub(super) struct Row {
    /// the bench's processes beside the agent (0: the agent alone)
    pub(super) processes: usize,
    pub(super) off_cpu: OffCpu,
    pub(super) window: Window,
}

/// The whole report.
#[derive(Debug)]
pub(super) struct Report {
    /// the command line and the build
    pub(super) command: String,
    /// how the processes ran, for the note under the tables
    pub(super) python: String,
    pub(super) busy: usize,
    pub(super) warmup: f64,
    pub(super) measure: f64,
    /// the agent's `--interval`, seconds
    pub(super) interval: f64,
    pub(super) load_before: String,
    pub(super) load_after: String,
    pub(super) rows: Vec<Row>,
}

/// Bytes in KiB as MiB.
fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map_or_else(|| "—".to_owned(), f)
}

impl Report {
    /// The mean run time of the off-CPU program on untracked tasks: that of the agent alone with
    /// off-CPU on.
    fn untracked_ns(&self) -> Option<f64> {
        self.rows
            .iter()
            .find(|r| r.processes == 0 && r.off_cpu == OffCpu::On)
            .and_then(|r| r.window.runs(Kind::Switch).ns_per_run())
    }

    /// The agent's CPU, memory and profiles.
    pub(super) fn agent_table(&self) -> Table {
        let mut t = Table::new(&[
            "processes",
            "off-CPU",
            "agent CPU, % of a core",
            "RSS peak MiB",
            "RSS end MiB",
            "profiles per window",
            "processes with a profile per window",
        ]);
        for r in &self.rows {
            let w = &r.window;
            t.row(vec![
                processes_cell(r.processes),
                r.off_cpu.to_string(),
                format!("{:.2}", w.cpu_pct()),
                format!("{:.1}", mib(w.hwm_kib)),
                format!("{:.1}", mib(w.rss_kib)),
                format!("{:.1}", w.profiles_per_interval(self.interval)),
                opt(w.targets_profiled_pct(r.processes, self.interval), |p| {
                    format!("{p:.0}%")
                }),
            ]);
        }
        t
    }

    /// The agent's BPF programs: runs and time per run, per tracked switch, and in all.
    pub(super) fn bpf_table(&self) -> Table {
        let untracked = self.untracked_ns();
        let mut t = Table::new(&[
            "processes",
            "off-CPU",
            "their switches/s",
            "pa_switch runs/s",
            "pa_switch ns/run",
            "ns per tracked switch",
            "pa_sample runs/s",
            "pa_sample ns/run",
            "all BPF, % of a core",
        ]);
        for r in &self.rows {
            let w = &r.window;
            let (switch, sample) = (w.runs(Kind::Switch), w.runs(Kind::Sample));
            let tracked = match (r.processes, untracked) {
                (0, _) | (_, None) => None,
                (_, Some(u)) => w.tracked_ns_per_switch(u),
            };
            t.row(vec![
                processes_cell(r.processes),
                r.off_cpu.to_string(),
                if r.processes == 0 {
                    "—".to_owned()
                } else {
                    si(w.per_sec(w.switches))
                },
                si(w.per_sec(switch.count)),
                opt(switch.ns_per_run(), |v| format!("{v:.0}")),
                opt(tracked, |v| format!("{v:.0}")),
                si(w.per_sec(sample.count)),
                opt(sample.ns_per_run(), |v| format!("{v:.0}")),
                format!("{:.3}", w.bpf_pct()),
            ]);
        }
        t
    }

    /// The targets each row is held to, met or missed, one line each.
    pub(super) fn target_lines(&self) -> Vec<String> {
        let untracked = self.untracked_ns();
        let mut lines = Vec::new();
        let mark = |ok: bool| if ok { "met" } else { "MISSED" };
        for r in &self.rows {
            let w = &r.window;
            let who = format!("{}, off-CPU {}", processes_cell(r.processes), r.off_cpu);
            for (n, pct) in CPU_TARGETS {
                if r.processes == n {
                    let cpu = w.cpu_pct();
                    lines.push(format!(
                        "- {who}: agent CPU {cpu:.2}% of a core (target ≤ {pct}%): {}",
                        mark(cpu <= pct)
                    ));
                }
            }
            if r.processes == RSS_TARGET.0 {
                let peak = mib(w.hwm_kib);
                lines.push(format!(
                    "- {who}: RSS peak {peak:.1} MiB (target ≤ {} MiB): {}",
                    RSS_TARGET.1,
                    mark(peak <= RSS_TARGET.1)
                ));
            }
            if r.processes > 0 {
                if let Some(ns) = untracked.and_then(|u| w.tracked_ns_per_switch(u)) {
                    lines.push(format!(
                        "- {who}: {:.2} µs of BPF per tracked switch (target ≤ {} µs): {}",
                        ns / 1e3,
                        SWITCH_TARGET_NS / 1e3,
                        mark(ns <= SWITCH_TARGET_NS)
                    ));
                }
            }
        }
        lines
    }

    /// The report as markdown.
    pub(super) fn markdown(&self) -> String {
        let mut md = format!(
            "{}\n\n## The service beside N processes\n\n\
             `pyagent --all-python --mode ebpf --interval {}s -o DIR`, off-CPU on or off \
             (`PYAGENT_OFF_CPU`), beside N {} processes: {} busy (`nice -n 19 deep.py 30 \
             busy`) and N − {} asleep, waking 10 times a second (`sleeper.py 20`); \"0\" is the \
             agent alone. Each run: {} s of warm-up after the agent's first scan, then a window \
             of {} s. {} at start, {} at end.\n\n",
            self.command,
            self.interval,
            self.python,
            self.busy,
            self.busy,
            self.warmup,
            self.measure,
            self.load_before,
            self.load_after,
        );
        md += &self.agent_table().render();
        md += "\nAgent CPU: user + system time (`/proc/PID/stat`) over the window's wall time. \
               RSS: `VmHWM` (the peak since the agent started) and `VmRSS` at the window's \
               end. Profiles per window: files the window added to DIR, per interval, of every \
               Python process on the host; the last column counts the bench's processes \
               only.\n\n";
        md += &self.bpf_table().render();
        md += "\nKernel BPF run-time statistics (`kernel.bpf_stats_enabled` on for the run) of \
               the programs the agent holds (`/proc/PID/fdinfo`). \"Their switches\": \
               voluntary and involuntary context switches of the N processes' threads. \
               `pa_switch` (off-CPU) runs on every context switch of the machine; \"ns per \
               tracked switch\": its run time beyond the agent alone's mean run (untracked \
               tasks) for the other runs, over the tracked threads' switches. `pa_sample` runs \
               at the agent's rate on every CPU. \"All BPF\": every program of the agent (the \
               notices of exec, fork and exit included), as a share of one core; it is \
               charged to the interrupted tasks, not to the agent.\n";
        let lines = self.target_lines();
        if !lines.is_empty() {
            md += "\nTargets:\n\n";
            for l in lines {
                md += &l;
                md.push('\n');
            }
        }
        md
    }
}

/// `0 (agent alone)` or the number.
fn processes_cell(n: usize) -> String {
    if n == 0 {
        "0 (agent alone)".to_owned()
    } else {
        n.to_string()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::bench::scale::window::tests::window;
    use crate::bench::scale::window::Runs;

    /// The agent alone (off-CPU on: 300 ns per untracked run), then 250 processes with off-CPU
    /// on and off.
    fn report() -> Report {
        let alone = Window {
            programs: BTreeMap::from([
                (
                    Kind::Switch,
                    Runs {
                        count: 100_000,
                        ns: 30_000_000,
                    },
                ),
                (
                    Kind::Sample,
                    Runs {
                        count: 8_000,
                        ns: 800_000,
                    },
                ),
            ]),
            switches: 0,
            profiles: 0,
            target_profiles: 0,
            ..window()
        };
        let off = Window {
            programs: BTreeMap::from([(Kind::Sample, window().runs(Kind::Sample))]),
            agent_cpu: 0.1,
            ..window()
        };
        Report {
            command: "`xtask bench scale` (release build)".into(),
            python: "py312".into(),
            busy: 10,
            warmup: 15.0,
            measure: 40.0,
            interval: 10.0,
            load_before: "load average 1.00 1.00 1.00 (2 CPUs)".into(),
            load_after: "load average 2.00 2.00 2.00 (2 CPUs)".into(),
            rows: vec![
                Row {
                    processes: 0,
                    off_cpu: OffCpu::On,
                    window: alone,
                },
                Row {
                    processes: 250,
                    off_cpu: OffCpu::On,
                    window: window(),
                },
                Row {
                    processes: 250,
                    off_cpu: OffCpu::Off,
                    window: off,
                },
            ],
        }
    }

    /// The cells of a table's line.
    fn cells(line: &str) -> Vec<String> {
        line.trim_matches('|')
            .split('|')
            .map(|c| c.trim().to_owned())
            .collect()
    }

    #[test]
    fn the_agent_table_has_a_row_per_run() {
        let t = report().agent_table().render();
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 5, "{t}");
        assert!(lines[0].starts_with("| processes "), "{t}");
        assert_eq!(
            cells(lines[2]),
            ["0 (agent alone)", "on", "1.00", "32.0", "30.0", "0.0", "—"]
        );
        assert_eq!(
            cells(lines[3]),
            ["250", "on", "1.00", "32.0", "30.0", "3.0", "1%"]
        );
        assert_eq!(cells(lines[4])[2], "0.25");
    }

    #[test]
    fn the_bpf_table_prices_a_tracked_switch_against_the_agent_alone() {
        let t = report().bpf_table().render();
        let row = cells(t.lines().nth(3).expect("the 250 row"));
        // 1M runs at 500 ns; 960,000 untracked at 300 ns leave 5,300 ns per tracked switch.
        assert_eq!(
            row,
            ["250", "on", "1.00k", "25.0k", "500", "5300", "200", "5000", "1.350"]
        );
        let alone = cells(t.lines().nth(2).expect("the alone row"));
        assert_eq!((&*alone[2], &*alone[4], &*alone[5]), ("—", "300", "—"));
        // Off-CPU off: no switch program, no cost per switch.
        let off = cells(t.lines().nth(4).expect("the off row"));
        assert_eq!((&*off[3], &*off[4], &*off[5]), ("0", "—", "—"));
    }

    #[test]
    fn targets_are_held_to_the_rows_they_name() {
        let lines = report().target_lines();
        assert_eq!(
            lines,
            [
                "- 250, off-CPU on: agent CPU 1.00% of a core (target ≤ 0.5%): MISSED",
                "- 250, off-CPU on: 5.30 µs of BPF per tracked switch (target ≤ 2 µs): MISSED",
                "- 250, off-CPU off: agent CPU 0.25% of a core (target ≤ 0.5%): met",
            ]
        );
    }

    #[test]
    fn the_markdown_has_both_tables_and_the_targets() {
        let md = report().markdown();
        assert!(
            md.starts_with("`xtask bench scale` (release build)\n"),
            "{md}"
        );
        assert!(md.contains(" | agent CPU, % of a core |"), "{md}");
        assert!(md.contains(" | ns per tracked switch |"), "{md}");
        assert!(md.contains("\nTargets:\n\n- 250, off-CPU on"), "{md}");
        assert!(md.contains("10 busy"), "{md}");
    }
}
