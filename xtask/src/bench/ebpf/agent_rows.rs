//! The rows and target lines of the agent tables (overhead with N processes, a flag off and
//! on), made from [`AgentRun`]s, and the flags those runs measure.

use super::agent_output::AgentRun;

/// A flag whose cost the agent runs measure, off then on, beside processes that exercise it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Flag {
    /// `--off-cpu` beside processes that block about a thousand times a second
    OffCpu,
    /// `--native` beside busy processes whose leaf is in C
    Native,
}

impl Flag {
    /// The agent's flag.
    pub(super) fn arg(self) -> &'static str {
        match self {
            Flag::OffCpu => "--off-cpu",
            Flag::Native => "--native",
        }
    }

    /// `deep.py`'s second argument for the processes.
    pub(super) fn target_kind(self) -> &'static str {
        match self {
            Flag::OffCpu => "block",
            Flag::Native => "native",
        }
    }

    /// What the processes are, in words.
    pub(super) fn what(self) -> &'static str {
        match self {
            Flag::OffCpu => "blocking",
            Flag::Native => "busy native-leaf",
        }
    }
}

/// `v` with two decimals, or `?` when it was not measured.
fn two_decimals(v: Option<f64>) -> String {
    v.map_or("?".to_owned(), |v| format!("{v:.2}"))
}

/// `v` with one decimal, or `?` when it was not measured.
fn one_decimal(v: Option<f64>) -> String {
    v.map_or("?".to_owned(), |v| format!("{v:.1}"))
}

/// A row of the overhead table: `n` busy processes, the agent in `mode`.
pub(super) fn overhead_row(n: usize, mode: &str, r: &AgentRun) -> Vec<String> {
    vec![
        format!("{n} {mode}"),
        r.profiles.map_or("?".to_owned(), |p| p.to_string()),
        r.samples.map_or("?".to_owned(), |s| s.to_string()),
        format!(
            "{:.2} / {:.1}",
            r.usage.cpu_secs(),
            r.usage.wall.as_secs_f64()
        ),
        format!("{:.2}", r.whole_pct()),
        two_decimals(r.steady_pct()),
        two_decimals(r.sampling_pct()),
        two_decimals(r.second_half_pct()),
        format!("{:.1}", r.peak_rss_mib()),
        one_decimal(r.steady_rss_mib()),
        r.of_core(r.bpf.map(|(ns, _)| ns))
            .map_or("—".to_owned(), |p| format!("{p:.2}")),
    ]
}

/// The overhead targets (≤ 0.5% of a core, ≤ 50 MiB) against the ebpf run with 50 processes.
pub(super) fn overhead_target_line(r: &AgentRun) -> String {
    let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
    let whole = r.whole_pct();
    let rss = r.peak_rss_mib();
    let cpu = r.steady_pct().unwrap_or(whole);
    let srss = r.steady_rss_mib().unwrap_or(rss);
    let sampling = r.sampling_pct().map_or("?".to_owned(), |s| {
        format!("{s:.2}% while sampling ({})", verdict(s <= 0.5))
    });
    // Issue 18's target is a service's steady cost: the second half, after the looks again at
    // every new process's maps have backed off.
    let steady_sampling = r.second_half_pct().map_or("?".to_owned(), |s| {
        format!(
            "{s:.2}% over the second half of the sampling (≤ 0.25%: {})",
            verdict(s <= 0.25)
        )
    });
    format!(
        "- 50 processes, ebpf: CPU {steady_sampling}, {sampling}, {cpu:.2}% after the first scan \
         including the profile writing at the end ({}), {whole:.2}% over the whole run \
         ({}); RSS {srss:.1} MiB after the first scan ({}), peak {rss:.1} MiB over the \
         whole run ({})",
        verdict(cpu <= 0.5),
        verdict(whole <= 0.5),
        verdict(srss <= 50.0),
        verdict(rss <= 50.0),
    )
}

/// A row of a flag's table: the agent with `flag` off or `on`.
pub(super) fn flag_row(flag: Flag, on: bool, r: &AgentRun) -> Vec<String> {
    let of_core = |ns: Option<u64>| r.of_core(ns).map_or("—".to_owned(), |p| format!("{p:.2}"));
    let summary = match flag {
        Flag::OffCpu => r.off_cpu_line.clone().unwrap_or_default(),
        Flag::Native => r.summary.clone(),
    };
    vec![
        if on { "on" } else { "off" }.to_owned(),
        r.samples.map_or("?".to_owned(), |s| s.to_string()),
        two_decimals(r.second_half_pct()),
        two_decimals(r.sampling_pct()),
        two_decimals(r.steady_pct()),
        one_decimal(r.steady_rss_mib()),
        of_core(r.bpf.map(|(ns, _)| ns)),
        of_core(r.switch_ns),
        summary,
    ]
}

/// A flag's target (≤ 1% of a core with it on), beside `n` processes.
pub(super) fn flag_target_line(flag: Flag, n: usize, r: &AgentRun) -> String {
    // The target is a service's: judged on the second half, the whole span shown too.
    let verdict = |cpu: f64| {
        if cpu <= 1.0 {
            "met: ≤ 1%"
        } else {
            "MISSED: > 1%"
        }
    };
    let (sampling, steady) = (r.sampling_pct(), r.steady_pct());
    let cpu = r
        .second_half_pct()
        .or(sampling)
        .or(steady)
        .unwrap_or(f64::NAN);
    let whole = sampling.or(steady).unwrap_or(f64::NAN);
    format!(
        "- {n} {} processes, {} on: agent {cpu:.2}% of one core over the second half of \
         the sampling ({}); {whole:.2}% over all of it, the first objects parsed included \
         ({})",
        flag.what(),
        flag.arg(),
        verdict(cpu),
        verdict(whole),
    )
}

#[cfg(test)]
mod tests {
    use super::super::agent_output::tests::run;
    use super::*;

    #[test]
    fn an_overhead_row_has_every_column() {
        assert_eq!(
            overhead_row(50, "ebpf", &run()),
            [
                "50 ebpf",
                "3",
                "1234",
                "0.05 / 10.0",
                "0.50",
                "0.25",
                "0.20",
                "0.20",
                "40.0",
                "30.0",
                "0.50"
            ]
        );
        let bare = AgentRun {
            steady: None,
            sampling: None,
            second_half: None,
            steady_rss: None,
            bpf: None,
            profiles: None,
            samples: None,
            ..run()
        };
        assert_eq!(
            overhead_row(1, "userspace", &bare),
            [
                "1 userspace",
                "?",
                "?",
                "0.05 / 10.0",
                "0.50",
                "?",
                "?",
                "?",
                "40.0",
                "?",
                "—"
            ]
        );
    }

    #[test]
    fn the_overhead_target_line_judges_each_measure() {
        assert_eq!(
            overhead_target_line(&run()),
            "- 50 processes, ebpf: CPU 0.20% over the second half of the sampling (≤ 0.25%: \
             met), 0.20% while sampling (met), 0.25% after the first scan including the profile \
             writing at the end (met), 0.50% over the whole run (met); RSS 30.0 MiB after the \
             first scan (met), peak 40.0 MiB over the whole run (met)"
        );
        let heavy = AgentRun {
            second_half: Some((0.006, 2.0)),
            steady: None,
            steady_rss: Some(60 << 20),
            ..run()
        };
        let line = overhead_target_line(&heavy);
        assert!(line.contains("0.30% over the second half of the sampling (≤ 0.25%: MISSED)"));
        // Without a steady reading the whole run stands in.
        assert!(
            line.contains("0.50% after the first scan including"),
            "{line}"
        );
        assert!(
            line.contains("RSS 60.0 MiB after the first scan (MISSED)"),
            "{line}"
        );
    }

    #[test]
    fn flag_rows_show_the_flags_own_summary() {
        assert_eq!(
            flag_row(Flag::OffCpu, true, &run()),
            [
                "on",
                "1234",
                "0.20",
                "0.20",
                "0.25",
                "30.0",
                "0.50",
                "0.20",
                "567 switches"
            ]
        );
        let row = flag_row(Flag::Native, false, &run());
        assert_eq!(row[0], "off");
        assert_eq!(row[8], "pyagent: 3 processes (1234 samples)");
    }

    #[test]
    fn a_flag_is_judged_on_the_second_half() {
        assert_eq!(
            flag_target_line(Flag::Native, 50, &run()),
            "- 50 busy native-leaf processes, --native on: agent 0.20% of one core over the \
             second half of the sampling (met: ≤ 1%); 0.20% over all of it, the first objects \
             parsed included (met: ≤ 1%)"
        );
        let unmeasured = AgentRun {
            steady: None,
            sampling: None,
            second_half: None,
            ..run()
        };
        assert!(flag_target_line(Flag::OffCpu, 5, &unmeasured)
            .starts_with("- 5 blocking processes, --off-cpu on: agent NaN% of one core"));
    }

    #[test]
    fn flags_name_their_argument_and_targets() {
        assert_eq!(
            (
                Flag::OffCpu.arg(),
                Flag::OffCpu.target_kind(),
                Flag::OffCpu.what()
            ),
            ("--off-cpu", "block", "blocking")
        );
        assert_eq!(
            (
                Flag::Native.arg(),
                Flag::Native.target_kind(),
                Flag::Native.what()
            ),
            ("--native", "native", "busy native-leaf")
        );
    }
}
