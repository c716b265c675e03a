//! A [`Summary`] as people read it (aligned text) or as programs do (JSON).
//!
//! Both show the `top` groups with the most wall time (all of them with `top` 0) and say how
//! many there were; the text leaves out the parts without time, the JSON has every part.

use std::io::{self, Write};
use std::path::Path;

use serde::Serialize;

use super::spans::{Group, GroupBy, GroupKey, Part, Summary};

/// The groups shown: the first `top` (all with 0).
fn shown(summary: &Summary, top: usize) -> &[Group] {
    let n = if top == 0 {
        summary.groups.len()
    } else {
        top.min(summary.groups.len())
    };
    &summary.groups[..n]
}

/// Writes `summary` of the profile `file` as text.
pub fn write_text(
    summary: &Summary,
    file: &Path,
    top: usize,
    out: &mut impl Write,
) -> io::Result<()> {
    let groups = shown(summary, top);
    let what = match summary.by {
        GroupBy::Span => "span",
        GroupBy::Thread => "thread",
        GroupBy::Service => "service",
    };
    let n = summary.groups.len();
    let plural = if n == 1 { "" } else { "s" };
    write!(
        out,
        "{}: {n} {what}{plural}, {:.3} s of wall time",
        file.display(),
        summary.total_seconds
    )?;
    if summary.by == GroupBy::Span {
        write!(out, " ({:.3} s without a span)", summary.ungrouped_seconds)?;
    }
    if groups.len() < summary.groups.len() {
        write!(out, "; the {} with the most", groups.len())?;
    }
    writeln!(out)?;
    for group in groups {
        writeln!(out)?;
        writeln!(out, "{}  wall {:.3} s", heading(group), group.wall_seconds)?;
        // Parts that round to 0.000 s say nothing (the JSON keeps them).
        let parts = group.parts.iter().filter(|(_, t)| t.seconds >= 0.0005);
        for (part, time) in parts {
            write!(
                out,
                "  {:<20} {:>9.3} s {:>6.1}%",
                part.describe(),
                time.seconds,
                time.share * 100.0
            )?;
            if let Some(f) = &time.top_function {
                write!(
                    out,
                    "  {} ({}:{})",
                    f.function,
                    short_file(&f.file),
                    f.first_line
                )?;
            }
            if let Some(h) = &time.top_holder {
                let s = if h.threads == 1 { "" } else { "s" };
                write!(
                    out,
                    "; held in {} ({:.3} s, {} thread{s})",
                    h.function, h.seconds, h.threads
                )?;
            }
            writeln!(out)?;
        }
    }
    Ok(())
}

/// The first line of a group: whom its time belongs to.
fn heading(group: &Group) -> String {
    match &group.key {
        GroupKey::Span { trace_id, span_id } => format!("span {span_id}  trace {trace_id}"),
        GroupKey::Thread { pid, thread_id } => {
            let id = thread_id.map_or("?".to_owned(), |t| t.to_string());
            let name = group
                .thread_name
                .as_deref()
                .map_or(String::new(), |n| format!(" {n}"));
            let pid = pid.map_or(String::new(), |p| format!(" (pid {p})"));
            format!("thread {id}{name}{pid}")
        }
        GroupKey::Service { service } => format!("service {service}"),
    }
}

/// A file's last two components: enough to tell `json/decoder.py` from the application's.
fn short_file(file: &str) -> &str {
    match file.rmatch_indices('/').nth(1) {
        Some((i, _)) => &file[i + 1..],
        None => file,
    }
}

/// The JSON document.
#[derive(Serialize)]
struct Document<'a> {
    file: &'a Path,
    by: GroupBy,
    total_seconds: f64,
    /// Only when grouped by span: time of samples without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    ungrouped_seconds: Option<f64>,
    /// Groups in the profile, shown or not.
    groups_total: usize,
    /// The parts, in the order every group lists them.
    parts: [Part; Part::ALL.len()],
    groups: &'a [Group],
}

/// Writes `summary` of the profile `file` as one pretty-printed JSON object.
pub fn write_json(
    summary: &Summary,
    file: &Path,
    top: usize,
    out: &mut impl Write,
) -> io::Result<()> {
    let document = Document {
        file,
        by: summary.by,
        total_seconds: summary.total_seconds,
        ungrouped_seconds: (summary.by == GroupBy::Span).then_some(summary.ungrouped_seconds),
        groups_total: summary.groups.len(),
        parts: Part::ALL,
        groups: shown(summary, top),
    };
    serde_json::to_writer_pretty(&mut *out, &document)?;
    writeln!(out)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::report::spans::{PartTime, TopFunction};

    /// One thread: 0.75 s io in `recv_all`, 0.25 s on CPU with the GIL, a trace of GIL wait.
    fn summary() -> Summary {
        let part = |seconds: f64, function: Option<&str>| PartTime {
            seconds,
            share: seconds,
            top_function: function.map(|f| TopFunction {
                function: f.to_owned(),
                file: "/srv/app/net.py".to_owned(),
                first_line: 7,
                seconds,
            }),
            top_holder: None,
        };
        let mut parts: BTreeMap<Part, PartTime> = Part::ALL
            .into_iter()
            .map(|p| (p, part(0.0, None)))
            .collect();
        parts.insert(Part::Io, part(0.75, Some("recv_all")));
        parts.insert(Part::CpuGilHeld, part(0.25, Some("parse")));
        parts.insert(Part::GilWait, part(0.0001, Some("parse")));
        let group = Group {
            key: GroupKey::Thread {
                pid: Some(10),
                thread_id: Some(11),
            },
            thread_name: Some("MainThread".to_owned()),
            wall_seconds: 1.0,
            parts,
        };
        let mut other = group.clone();
        other.key = GroupKey::Thread {
            pid: Some(10),
            thread_id: Some(12),
        };
        Summary {
            by: GroupBy::Thread,
            total_seconds: 2.0,
            ungrouped_seconds: 0.0,
            groups: vec![group, other],
        }
    }

    #[test]
    fn text_shows_the_top_groups_and_their_parts_with_time() {
        let mut out = Vec::new();
        write_text(&summary(), Path::new("p.pb.gz"), 1, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let want = "\
p.pb.gz: 2 threads, 2.000 s of wall time; the 1 with the most

thread 11 MainThread (pid 10)  wall 1.000 s
  on CPU, GIL held         0.250 s   25.0%  parse (app/net.py:7)
  io                       0.750 s   75.0%  recv_all (app/net.py:7)
";
        assert_eq!(text, want);
    }

    #[test]
    fn json_has_every_part_of_the_groups_shown() {
        let mut out = Vec::new();
        write_json(&summary(), Path::new("p.pb.gz"), 0, &mut out).unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(doc["by"], "thread");
        assert_eq!(doc["groups_total"], 2);
        assert!(doc.get("ungrouped_seconds").is_none(), "{doc:#}");
        let groups = doc["groups"].as_array().unwrap();
        assert_eq!(groups.len(), 2);
        assert_eq!(groups[0]["thread_id"], 11);
        assert_eq!(groups[0]["thread_name"], "MainThread");
        let parts = groups[0]["parts"].as_object().unwrap();
        assert_eq!(parts.len(), Part::ALL.len());
        assert!(parts["cpu_wait"]["top_function"].is_null());
        assert_eq!(parts["io"]["top_function"]["function"], "recv_all");
        assert!(parts["sleep"]["top_function"].is_null());
    }
}
