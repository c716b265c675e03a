//! The rows and target lines of the program-cost tables (ns per run, by stage, with native
//! stacks), made from what the loads measured.

use super::cost::Cost;

/// `median [first quartile, third quartile]`, in whole ns.
pub(super) fn quartiles([q1, m, q3]: [f64; 3]) -> String {
    format!("{m:.0} [{q1:.0}, {q3:.0}]")
}

/// A row of the ns-per-run table: the whole walk of `full`, and `anchor` (the anchored walk's
/// cell, or why there is none).
pub(super) fn depth_row(python: &str, depth: usize, full: &Cost, anchor: String) -> Vec<String> {
    let mut walks = full.emitted.to_string();
    if full.incomplete > 0 {
        walks += &format!(" ({} incomplete)", full.incomplete);
    }
    vec![
        format!("{python} {depth}"),
        walks,
        format!("{:.1}", full.frames_per_walk()),
        quartiles(full.ns_per_run()),
        anchor,
    ]
}

/// The anchored walk's cell: ns per walk, frames per walk, and the anchor hits when not every
/// walk hit.
pub(super) fn anchor_cell(anchored: &Cost) -> String {
    let hits = if anchored.anchor_hits < anchored.emitted {
        format!(", {} of {} hit", anchored.anchor_hits, anchored.emitted)
    } else {
        String::new()
    };
    format!(
        "{} ({:.1}{hits})",
        quartiles(anchored.ns_per_run()),
        anchored.frames_per_walk()
    )
}

/// The anchored walk at depth 100 against its target of 2 µs.
pub(super) fn anchor_target_line(python: &str, anchored_ns: f64, full_ns: f64) -> String {
    format!(
        "- {python} depth 100: {anchored_ns:.0} ns/walk with the anchor ({}); {full_ns:.0} without it",
        if anchored_ns <= 2000.0 {
            "≤ 2 µs: met"
        } else {
            "> 2 µs: MISSED"
        },
    )
}

/// A row of the by-stage table: the run stopped after `stage`, and what it adds to the stage
/// before (`prev_ns`, the median).
pub(super) fn stage_row(stage: u32, what: &str, ns: [f64; 3], prev_ns: f64) -> Vec<String> {
    vec![
        format!("{stage}: {what}"),
        quartiles(ns),
        format!("{:+.0}", ns[1] - prev_ns),
    ]
}

/// A row of the native-stack table: the walk with the native section (`section`) or without,
/// and what the section adds to the median without it (`off_ns`, once measured).
pub(super) fn native_row(
    python: &str,
    section: bool,
    c: &Cost,
    off_ns: Option<f64>,
) -> Vec<String> {
    let q = c.ns_per_run();
    let n = &c.native;
    let (frames, bytes, kernel) = if section {
        (
            format!("{:.1} ({} unwound here)", n.frames_per_unwound(), n.unwound),
            format!("{:.0}", n.per_record(n.stack_bytes)),
            format!("{:.1}", n.per_record(n.kernel_frames)),
        )
    } else {
        ("—".to_owned(), "—".to_owned(), "—".to_owned())
    };
    let added = off_ns.map_or("—".to_owned(), |off: f64| format!("{:+.0}", q[1] - off));
    vec![
        format!("{python} {}", if section { "on" } else { "off" }),
        c.emitted.to_string(),
        format!("{:.1}", c.frames_per_walk()),
        frames,
        bytes,
        kernel,
        quartiles(q),
        added,
    ]
}

/// The cost per sample with the native section against its target of 10 µs.
pub(super) fn native_target_line(python: &str, on_ns: f64, off_ns: Option<f64>) -> String {
    format!(
        "- {python}: {on_ns:.0} ns per sample with native on ({}), {:.0} with it off",
        if on_ns <= 10_000.0 {
            "≤ 10 µs: met"
        } else {
            "> 10 µs: MISSED"
        },
        off_ns.unwrap_or(f64::NAN),
    )
}

#[cfg(test)]
mod tests {
    use super::super::cost::NativeCount;
    use super::*;

    /// A load whose every interval cost `ns` per run.
    fn cost(ns: u64, emitted: u64, frames: u64) -> Cost {
        Cost {
            emitted,
            frames,
            windows: vec![(ns, 1); 4],
            ..Cost::default()
        }
    }

    #[test]
    fn quartiles_show_the_median_first() {
        assert_eq!(quartiles([1200.4, 1300.6, 1500.0]), "1301 [1200, 1500]");
    }

    #[test]
    fn a_depth_row_counts_incomplete_walks() {
        let mut full = cost(1500, 40, 4040);
        assert_eq!(
            depth_row("py312", 100, &full, "n/a (< 3.15)".into()),
            [
                "py312 100",
                "40",
                "101.0",
                "1500 [1500, 1500]",
                "n/a (< 3.15)"
            ]
        );
        full.incomplete = 2;
        assert_eq!(
            depth_row("py312", 100, &full, String::new())[1],
            "40 (2 incomplete)"
        );
    }

    #[test]
    fn the_anchor_cell_shows_hits_only_when_some_missed() {
        let mut c = cost(800, 10, 55);
        c.anchor_hits = 10;
        assert_eq!(anchor_cell(&c), "800 [800, 800] (5.5)");
        c.anchor_hits = 9;
        assert_eq!(anchor_cell(&c), "800 [800, 800] (5.5, 9 of 10 hit)");
    }

    #[test]
    fn target_lines_say_met_or_missed() {
        assert_eq!(
            anchor_target_line("py315", 1999.6, 5000.0),
            "- py315 depth 100: 2000 ns/walk with the anchor (≤ 2 µs: met); 5000 without it"
        );
        assert!(anchor_target_line("py315", 2000.1, 5000.0).contains("> 2 µs: MISSED"));
        assert_eq!(
            native_target_line("py312", 9000.0, Some(4000.0)),
            "- py312: 9000 ns per sample with native on (≤ 10 µs: met), 4000 with it off"
        );
        assert!(native_target_line("py312", 10_001.0, None)
            .ends_with("(> 10 µs: MISSED), NaN with it off"));
    }

    #[test]
    fn a_stage_row_shows_what_the_stage_adds() {
        assert_eq!(
            stage_row(3, "walk", [900.0, 1000.0, 1100.0], 700.0),
            ["3: walk", "1000 [900, 1100]", "+300"]
        );
    }

    #[test]
    fn native_rows_with_and_without_the_section() {
        let mut c = cost(6000, 20, 2100);
        assert_eq!(
            native_row("py315", false, &c, None),
            [
                "py315 off",
                "20",
                "105.0",
                "—",
                "—",
                "—",
                "6000 [6000, 6000]",
                "—"
            ]
        );
        c.native = NativeCount {
            records: 20,
            stack_bytes: 200_000,
            kernel_frames: 30,
            unwound: 4,
            frames: 50,
        };
        assert_eq!(
            native_row("py315", true, &c, Some(4500.0)),
            [
                "py315 on",
                "20",
                "105.0",
                "12.5 (4 unwound here)",
                "10000",
                "1.5",
                "6000 [6000, 6000]",
                "+1500"
            ]
        );
    }
}
