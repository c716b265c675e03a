//! Short text cells the sections and the ranking share: an interpreter's name, a verdict, a
//! number that may be unknown, an error on one line.

use crate::bench::compare::plan::Suite;
use crate::bench::compare::results::SlowRow;

/// `3.13.1 (py313)`.
pub(super) fn python(suites: &[Suite], suite: usize) -> String {
    let i = &suites[suite].interp;
    format!("{} ({})", i.version, i.name)
}

/// A target's verdict.
pub(super) fn pass(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "NOT met"
    }
}

/// A number, or `unknown`.
pub(super) fn opt(v: Option<u64>) -> String {
    v.map_or("unknown".into(), |v| v.to_string())
}

/// `s` fit for a table cell: on one line, without `|`, at most 120 characters.
pub(super) fn one_line(s: &str) -> String {
    let s = s.replace(['\n', '|'], " ");
    if s.chars().count() > 120 {
        format!("{}…", s.chars().take(120).collect::<String>())
    } else {
        s
    }
}

/// The first error of a slowdown configuration, or `-`.
pub(super) fn failed(row: &SlowRow) -> String {
    match row.errors.first() {
        Some(e) => format!("failed: {}", one_line(e)),
        None => "-".into(),
    }
}
