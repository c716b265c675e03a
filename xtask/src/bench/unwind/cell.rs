//! A sampler's result on one target and the text of the tables' cells: rates, ratios, the
//! samples counted in collapsed stacks and the first line of an error. No process is run here.

use crate::bench::util;

/// One profiler's result on one target.
#[derive(Debug, Clone)]
pub(super) enum Cell {
    Measured(Rate),
    NotApplicable(String),
    Failed(String),
}

/// Samples taken and what they cost.
#[derive(Debug, Clone, Default)]
pub(super) struct Rate {
    pub(super) samples: u64,
    pub(super) wrong: u64,
    pub(super) cpu_secs: f64,
    pub(super) wall_secs: f64,
    /// one-line extras for the details table
    pub(super) note: String,
}

impl Rate {
    /// Samples per CPU-second of the sampler.
    pub(super) fn per_cpu_sec(&self) -> f64 {
        self.samples as f64 / self.cpu_secs.max(1e-9)
    }
}

impl Cell {
    /// Samples per CPU-second, when some were taken.
    pub(super) fn rate(&self) -> Option<f64> {
        match self {
            Cell::Measured(r) if r.samples > 0 => Some(r.per_cpu_sec()),
            _ => None,
        }
    }

    /// The table cell: the rate with a thousands unit, or why there is none.
    pub(super) fn show(&self) -> String {
        match self {
            Cell::Measured(r) if r.wrong > 0 => {
                format!("{} ({} wrong)", util::si(r.per_cpu_sec()), r.wrong)
            }
            Cell::Measured(r) => util::si(r.per_cpu_sec()),
            Cell::NotApplicable(why) => format!("n/a ({why})"),
            Cell::Failed(why) => format!("failed ({why})"),
        }
    }
}

/// Sums the counts of collapsed stacks (`a;b;c COUNT`), split into (those `right` accepts, the
/// others).
pub(super) fn count_collapsed(text: &str, right: impl Fn(&str) -> bool) -> (u64, u64) {
    let (mut good, mut wrong) = (0, 0);
    for line in text.lines() {
        let Some((stack, count)) = line.trim_end().rsplit_once(' ') else {
            continue;
        };
        let Ok(count) = count.parse::<u64>() else {
            continue;
        };
        if right(stack) {
            good += count;
        } else {
            wrong += count;
        }
    }
    (good, wrong)
}

/// Tachyon's own summary (rate, missed samples) from its output.
pub(super) fn stats_line(stdout: &str, stderr: &str) -> String {
    stdout
        .lines()
        .chain(stderr.lines())
        .filter(|l| l.starts_with("Sample rate") || l.starts_with("Warning: missed"))
        .map(str::trim)
        .collect::<Vec<_>>()
        .join("; ")
}

/// The first line of `s` that says something, at most 120 characters.
pub(super) fn first_line(s: &str) -> String {
    s.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("no message")
        .chars()
        .take(120)
        .collect()
}

/// `ours` as a multiple of `theirs` (`2.5×`), or `—` when either is missing.
pub(super) fn ratio(ours: Option<f64>, theirs: Option<f64>) -> String {
    match (ours, theirs) {
        (Some(a), Some(b)) => format!("{:.1}×", a / b),
        _ => "—".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cell_shows_its_rate_or_why_there_is_none() {
        let measured = |samples, wrong| {
            Cell::Measured(Rate {
                samples,
                wrong,
                cpu_secs: 2.0,
                wall_secs: 3.0,
                note: String::new(),
            })
        };
        assert_eq!(measured(50_000, 0).rate(), Some(25_000.0));
        assert_eq!(measured(50_000, 0).show(), "25.0k");
        assert_eq!(measured(3_000, 4).show(), "1.50k (4 wrong)");
        assert_eq!(measured(0, 4).rate(), None);
        assert_eq!(
            Cell::NotApplicable("3.15+ only".into()).show(),
            "n/a (3.15+ only)"
        );
        assert_eq!(Cell::Failed("gone".into()).show(), "failed (gone)");
        assert_eq!(Cell::Failed("gone".into()).rate(), None);
    }

    #[test]
    fn collapsed_stacks_are_counted_right_and_wrong() {
        let text = "tid:1;a;b;c 7\ntid:1;a;b 2\nnot a stack\ntid:1;a;b;c x\n\ntid:2;a;b;c 1 \n";
        let right = |s: &str| s.split(';').count() == 4;
        assert_eq!(count_collapsed(text, right), (8, 2));
        assert_eq!(count_collapsed("", right), (0, 0));
    }

    #[test]
    fn tachyons_summary_lines_are_joined() {
        let stdout = "Captured\nSample rate: 95000/s\n";
        let stderr = "  Warning: missed 12 samples\nWarning: missed 3\nother\n";
        assert_eq!(
            stats_line(stdout, stderr),
            "Sample rate: 95000/s; Warning: missed 3"
        );
    }

    #[test]
    fn the_first_line_that_says_something() {
        assert_eq!(
            first_line("\n  \n  Error: no such process  \nmore"),
            "Error: no such process"
        );
        assert_eq!(first_line(""), "no message");
        assert_eq!(first_line(&"x".repeat(200)).len(), 120);
    }

    #[test]
    fn ratios_need_both_rates() {
        assert_eq!(ratio(Some(5.0), Some(2.0)), "2.5×");
        assert_eq!(ratio(None, Some(2.0)), "—");
        assert_eq!(ratio(Some(5.0), None), "—");
    }
}
