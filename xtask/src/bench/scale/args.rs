//! `cargo xtask bench scale` arguments, and the parsers of their values.

use std::path::PathBuf;
use std::time::Duration;

/// Arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Numbers of Python processes beside the agent: 10 busy, the rest asleep and waking 10
    /// times a second.
    #[arg(long, value_delimiter = ',', default_values_t = [50, 250, 1000])]
    pub(super) processes: Vec<usize>,
    /// How long the agent runs before the measurement, in seconds (`15`) or with a unit
    /// (`15s`, `500ms`, `1m`).
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    pub(super) warmup: Duration,
    /// The measured window, as `--warmup`.
    #[arg(long, default_value = "40s", value_parser = parse_duration)]
    pub(super) measure: Duration,
    /// Off-CPU profiling (`PYAGENT_OFF_CPU`) in the runs: `on`, `off` or both, in that order.
    #[arg(long, value_delimiter = ',', default_values_t = [OffCpu::On, OffCpu::Off])]
    pub(super) off_cpu: Vec<OffCpu>,
    /// Busy processes among the N (the rest sleep and wake).
    #[arg(long, default_value_t = 10)]
    pub(super) busy: usize,
    /// Skip the agent alone (no process of the bench beside it), whose BPF cost per run is
    /// that of an untracked task.
    #[arg(long)]
    pub(super) no_baseline: bool,
    /// Interpreter of the processes (manifest name).
    #[arg(long, default_value = "py312")]
    pub(super) python: String,
    /// Where to write scale.md [default: target/bench].
    #[arg(long)]
    pub(super) out_dir: Option<PathBuf>,
    /// Run in this build even if it is a debug build.
    #[arg(long)]
    pub(super) no_release: bool,
}

/// Whether the agent profiles off-CPU time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OffCpu {
    On,
    Off,
}

impl OffCpu {
    /// The value of `PYAGENT_OFF_CPU`.
    pub(super) fn env(self) -> &'static str {
        match self {
            OffCpu::On => "true",
            OffCpu::Off => "false",
        }
    }
}

impl std::fmt::Display for OffCpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            OffCpu::On => "on",
            OffCpu::Off => "off",
        })
    }
}

/// A duration in seconds (`15`, `1.5`) or with a unit (`ms`, `s`, `m`).
pub(super) fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (number, scale) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60.0)
    } else {
        (s, 1.0)
    };
    let v: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a duration (`15s`, `500ms`, `1m`, `15`)"))?;
    Duration::try_from_secs_f64(v * scale).map_err(|_| format!("`{s}`: not a duration ≥ 0"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_with_and_without_units() {
        assert_eq!(parse_duration("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_duration("40"), Ok(Duration::from_secs(40)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration(" 3 s "), Ok(Duration::from_secs(3)));
    }

    #[test]
    fn what_is_not_a_duration() {
        for bad in ["", "s", "fast", "-1s", "10h", "1e400"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn off_cpu_is_the_agent_setting() {
        assert_eq!(OffCpu::On.env(), "true");
        assert_eq!(OffCpu::Off.env(), "false");
        assert_eq!(OffCpu::On.to_string(), "on");
    }
}
