//! The table of kernels by feature, and under it what failed and what pyagent said about each
//! kernel.

use std::fmt::Write as _;
use std::fs;
use std::path::Path;
use std::time::Duration;

use super::plan::Feature;
use super::runner::{End, Outcome, Setup, Status};
use crate::pythons::cmd;

/// A cell: how a kernel did on a feature's checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cell {
    /// Every check passed.
    Ok,
    /// A check failed or timed out.
    Fail,
    /// No check failed, but some did not run (the run ended first).
    Skipped,
}

impl Cell {
    fn text(self) -> &'static str {
        match self {
            Cell::Ok => "ok",
            Cell::Fail => "FAIL",
            Cell::Skipped => "skipped",
        }
    }
}

/// The cell of `feature` in `outcome`'s row.
pub fn cell(setup: &Setup, outcome: &Outcome, feature: Feature) -> Cell {
    let statuses = setup
        .checks
        .iter()
        .zip(&outcome.statuses)
        .filter(|(check, _)| check.feature == feature)
        .map(|(_, (status, _))| *status);
    let mut cell = Cell::Ok;
    for status in statuses {
        match status {
            Status::Failed(_) | Status::TimedOut => return Cell::Fail,
            Status::NotRun => cell = Cell::Skipped,
            Status::Passed => {}
        }
    }
    cell
}

/// The features that have checks in this run, in column order.
pub fn columns(setup: &Setup) -> Vec<Feature> {
    Feature::ALL
        .into_iter()
        .filter(|f| setup.checks.iter().any(|c| c.feature == *f))
        .collect()
}

/// The whole report.
pub fn render(setup: &Setup, outcomes: &[Outcome], total: Duration) -> String {
    let mut s = table(setup, outcomes);
    let _ = writeln!(s, "total: {}", cmd::elapsed(total));
    let problems = problems(setup, outcomes);
    if !problems.is_empty() {
        s.push_str("\nproblems:\n");
        s.push_str(&problems);
    }
    s.push_str("\nwhat each kernel offered, and what pyagent said about it:\n");
    for outcome in outcomes {
        s.push_str(&kernel_notes(outcome));
    }
    s
}

fn table(setup: &Setup, outcomes: &[Outcome]) -> String {
    let columns = columns(setup);
    let mut rows: Vec<Vec<String>> = vec![std::iter::once("kernel".to_owned())
        .chain(columns.iter().map(|f| f.name().to_owned()))
        .chain(std::iter::once("time".to_owned()))
        .collect()];
    for outcome in outcomes {
        let mut row = vec![format!("{} ({})", outcome.version, outcome.place)];
        row.extend(
            columns
                .iter()
                .map(|f| cell(setup, outcome, *f).text().to_owned()),
        );
        row.push(cmd::elapsed(outcome.elapsed));
        rows.push(row);
    }
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|i| rows.iter().map(|r| r[i].len()).max().unwrap_or(0))
        .collect();
    let mut s = String::new();
    for (n, row) in rows.iter().enumerate() {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(text, width)| format!("{text:<width$}"))
            .collect();
        let _ = writeln!(s, "{}", cells.join(" | ").trim_end());
        if n == 0 {
            let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
            let _ = writeln!(s, "{}", rule.join("-|-"));
        }
    }
    s
}

/// Runs that did not finish and checks that failed, each with where to read more.
fn problems(setup: &Setup, outcomes: &[Outcome]) -> String {
    let mut s = String::new();
    for outcome in outcomes {
        let console = outcome.out.join("console.log");
        match outcome.end {
            End::Finished => {}
            End::TimedOut => {
                let _ = writeln!(
                    s,
                    "{}: killed after {}; see {}",
                    outcome.version,
                    cmd::elapsed(outcome.elapsed),
                    console.display()
                );
            }
            End::Stopped => {
                let _ = writeln!(
                    s,
                    "{}: stopped before the end of its checks; see {} and {}",
                    outcome.version,
                    console.display(),
                    outcome.out.join("inside.log").display()
                );
            }
        }
        for (index, (check, (status, secs))) in
            setup.checks.iter().zip(&outcome.statuses).enumerate()
        {
            let what = match status {
                Status::Passed | Status::NotRun => continue,
                Status::Failed(code) => format!("failed (exit {code})"),
                Status::TimedOut => "timed out".to_owned(),
            };
            let log = outcome.check_log(setup, index);
            let _ = writeln!(
                s,
                "{} {}: {what} after {} s: {}\n    {}\n    log: {}",
                outcome.version,
                check.label(),
                secs.unwrap_or(0),
                check.name,
                panic_message(&log),
                log.display()
            );
        }
    }
    s
}

/// The message of the first panic in a test's log (up to its backtrace note), on one line.
fn panic_message(log: &Path) -> String {
    let Ok(text) = fs::read_to_string(log) else {
        return "(no log)".to_owned();
    };
    let mut lines = text.lines();
    if !lines.by_ref().any(|l| l.contains("panicked at")) {
        return "(no panic message; see the log)".to_owned();
    }
    let message: Vec<&str> = lines
        .take_while(|l| {
            !l.is_empty() && !l.starts_with("note: ") && !l.starts_with("stack backtrace:")
        })
        .map(str::trim)
        .take(PANIC_LINES)
        .collect();
    shorten(&message.join(" / "), 400)
}

/// Lines of a panic message quoted (an assertion's `left:` and `right:` among them).
const PANIC_LINES: usize = 4;

/// `text` cut to `max` characters, with an ellipsis if cut.
fn shorten(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// One kernel's mounts and the probe's lines about it.
fn kernel_notes(outcome: &Outcome) -> String {
    let mut s = format!("{} ({}):", outcome.version, outcome.place);
    if outcome.facilities.is_empty() {
        s.push_str(" (the script recorded no mounts)");
    } else {
        let _ = write!(s, " {}", outcome.facilities.join(", "));
    }
    s.push('\n');
    match &outcome.probe {
        None => s.push_str("    the probe did not run\n"),
        Some((status, lines)) => {
            let _ = writeln!(
                s,
                "    pyagent record --mode ebpf --off-cpu --native -d 3: exit {status}{}",
                if lines.is_empty() {
                    ", nothing said about the kernel"
                } else {
                    ""
                }
            );
            for line in lines {
                let _ = writeln!(s, "    {}", shorten(line, 400));
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shorten_cuts_at_characters() {
        assert_eq!(shorten("abc", 5), "abc");
        assert_eq!(shorten("abcdef", 3), "abc…");
        assert_eq!(shorten("ééé", 2), "éé…");
    }

    #[test]
    fn panic_message_is_the_line_after_panicked_at() {
        let log = std::env::temp_dir().join(format!("xtask-kernels-panic-{}", std::process::id()));
        fs::write(
            &log,
            "running 1 test\nthread 'x' panicked at tests/a.rs:1:2:\nrecord [\"--mode\"]: boom\nnote: …\n",
        )
        .expect("write");
        assert_eq!(panic_message(&log), "record [\"--mode\"]: boom");
        fs::write(
            &log,
            "thread 'x' panicked at a.rs:1:2:\nassertion failed: py\n  left: [1]\n right: [2]\n\nfailures:\n",
        )
        .expect("write");
        assert_eq!(
            panic_message(&log),
            "assertion failed: py / left: [1] / right: [2]"
        );
        fs::write(&log, "error: no such test\n").expect("write");
        assert_eq!(panic_message(&log), "(no panic message; see the log)");
        fs::remove_file(&log).expect("cleanup");
    }
}
