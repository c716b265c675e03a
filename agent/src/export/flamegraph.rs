//! An interactive SVG flame graph, drawn by `inferno` from the [`collapsed`] lines.
//!
//! The title names the process(es) and the window's length; the subtitle lists the process-level labels,
//! the sample count and the period. Colours come from inferno's Python palette (stdlib yellow,
//! `site-packages` aqua, the rest red), chosen from a hash of the frame's text rather than at random, so
//! the same window always gives the same SVG. The caller refuses empty windows: inferno would draw an
//! error image.

use std::io::{self, Write};

use inferno::flamegraph::color::{MultiPalette, Palette};
use inferno::flamegraph::{self as inferno_flamegraph, Options};

use crate::aggregate::ProfileWindow;

use super::collapsed;

/// Writes `window` as an SVG flame graph.
pub fn write(window: &ProfileWindow, out: &mut impl Write) -> io::Result<()> {
    let lines = collapsed::lines(window);
    let mut options = Options::default();
    options.title = title(window);
    options.subtitle = Some(subtitle(window));
    options.count_name = "samples".to_owned();
    options.colors = Palette::Multi(MultiPalette::Python);
    options.deterministic = true;
    inferno_flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), out)
}

/// `pyagent: pid 1234, 10.0 s`, or `pyagent: pids 1, 2, 10.0 s`.
fn title(window: &ProfileWindow) -> String {
    let pids = window.pids();
    let pids_text = match pids.as_slice() {
        [] => window
            .labels
            .get("pid")
            .map_or_else(String::new, |pid| format!("pid {pid}, ")),
        [pid] => format!("pid {pid}, "),
        _ => {
            let list: Vec<String> = pids.iter().map(u32::to_string).collect();
            format!("pids {}, ", list.join(", "))
        }
    };
    format!("pyagent: {pids_text}{:.1} s", window.duration.as_secs_f64())
}

/// `python_version=3.12 service=web, 300 samples every 10 ms, 2 dropped`.
fn subtitle(window: &ProfileWindow) -> String {
    let mut parts: Vec<String> = window
        .labels
        .iter()
        .filter(|(key, _)| key.as_str() != "pid")
        .map(|(key, value)| format!("{key}={value}"))
        .collect();
    parts.push(format!(
        "{} samples every {} ms",
        window.total_samples(),
        window.period_ns as f64 / 1e6
    ));
    if window.dropped > 0 {
        parts.push(format!("{} dropped", window.dropped));
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::aggregate::tests::{frame, sample};
    use crate::aggregate::Aggregator;

    #[test]
    fn draws_an_svg_with_frames_and_title() {
        let main = frame("main", "/srv/app.py", 30, 28);
        let parse = frame("parse", "/usr/lib/python3.12/json/decoder.py", 353, 343);
        let mut agg = Aggregator::new(10_000_000);
        agg.set_label("pid", "4321");
        agg.set_label("service", "web");
        agg.add_count(
            &sample(4321, 4321, Some("MainThread"), vec![parse, main.clone()]),
            5,
        );
        agg.add(&sample(4321, 4321, Some("MainThread"), vec![main]));
        let mut window = agg.cut();
        window.duration = Duration::from_millis(2_500);

        let mut out = Vec::new();
        write(&window, &mut out).unwrap();
        let svg = String::from_utf8(out).unwrap();
        assert!(svg.contains("<svg"), "{svg}");
        assert!(svg.contains("pyagent: pid 4321, 2.5 s"), "{svg}");
        assert!(svg.contains("service=web, 6 samples every 10 ms"), "{svg}");
        assert!(
            svg.contains("parse (/usr/lib/python3.12/json/decoder.py:353)"),
            "{svg}"
        );
        assert!(svg.contains("thread 4321 (MainThread)"), "{svg}");

        let mut again = Vec::new();
        write(&window, &mut again).unwrap();
        assert_eq!(svg.as_bytes(), again.as_slice(), "same window, same SVG");
    }
}
