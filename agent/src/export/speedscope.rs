//! speedscope's JSON file format (`https://www.speedscope.app/file-format-schema.json`), the
//! format py-spy users open in speedscope.app.
//!
//! One file: `shared.frames` holds every distinct frame (`name`, `file`, `line`), and there is
//! one `sampled` profile per thread (`process PID thread TID (NAME)`) whose `samples` are stacks
//! of frame indices, root first, each weighed in nanoseconds: a sample counts one sampling
//! period of CPU time. With off-CPU data each thread also gets an `(off-CPU)` profile weighed by
//! the time it waited, its wait reason as the root frame (`wait: lock`). Profiles and frames are
//! in the order of the sorted stacks, so the same window gives the same bytes.

use std::collections::{BTreeMap, HashMap};
use std::io::{self, Write};

use serde::Serialize;

use crate::aggregate::{ProfileWindow, StackKey, WaitReason};
use crate::symbolize::{Frame, FrameKind};

#[derive(Serialize)]
struct File<'a> {
    #[serde(rename = "$schema")]
    schema: &'static str,
    shared: Shared,
    profiles: Vec<Profile>,
    name: String,
    #[serde(rename = "activeProfileIndex")]
    active_profile_index: usize,
    exporter: &'a str,
}

#[derive(Serialize)]
struct Shared {
    frames: Vec<FrameEntry>,
}

#[derive(Serialize, Clone, PartialEq, Eq, Hash)]
struct FrameEntry {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    line: Option<u32>,
}

#[derive(Serialize)]
struct Profile {
    #[serde(rename = "type")]
    kind: &'static str,
    name: String,
    unit: &'static str,
    #[serde(rename = "startValue")]
    start_value: u64,
    #[serde(rename = "endValue")]
    end_value: u64,
    samples: Vec<Vec<usize>>,
    weights: Vec<u64>,
}

/// Numbers frames in the order they are first met.
#[derive(Default)]
struct FrameTable {
    index: HashMap<FrameEntry, usize>,
    frames: Vec<FrameEntry>,
}

impl FrameTable {
    fn id(&mut self, entry: FrameEntry) -> usize {
        if let Some(&i) = self.index.get(&entry) {
            return i;
        }
        self.frames.push(entry.clone());
        self.index.insert(entry, self.frames.len() - 1);
        self.frames.len() - 1
    }

    fn frame(&mut self, f: &Frame) -> usize {
        self.id(match f.kind {
            FrameKind::Python => FrameEntry {
                name: f.function().to_string(),
                file: Some(f.file().to_string()),
                line: f.line,
            },
            // The object's path stands where a Python frame's file does.
            FrameKind::NativeCode | FrameKind::Kernel => FrameEntry {
                name: f.function().to_string(),
                file: Some(f.file().to_string()),
                line: None,
            },
            FrameKind::Native
            | FrameKind::Gc
            | FrameKind::Task
            | FrameKind::TruncatedNative
            | FrameKind::Moved => FrameEntry {
                name: f.function().to_string(),
                file: None,
                line: None,
            },
        })
    }

    /// The stack of `key` root first, under `root` when given.
    fn stack(&mut self, key: &StackKey, root: Option<FrameEntry>) -> Vec<usize> {
        let mut stack: Vec<usize> = root.into_iter().map(|r| self.id(r)).collect();
        stack.extend(key.frames.iter().rev().map(|f| self.frame(f)));
        stack
    }
}

/// One profile per (pid, tid, name, off-CPU), in that order.
type ProfileKey = (u32, u32, String, bool);

/// The profile name of a thread.
fn thread_name(key: &StackKey, off_cpu: bool) -> String {
    let name = key
        .thread
        .thread_name
        .as_deref()
        .map(|n| format!(" ({n})"))
        .unwrap_or_default();
    let kind = if off_cpu { " (off-CPU)" } else { "" };
    format!(
        "process {} thread {}{name}{kind}",
        key.thread.pid, key.thread.tid
    )
}

/// Writes `window` as one speedscope file.
pub fn write(window: &ProfileWindow, out: &mut impl Write) -> io::Result<()> {
    let mut table = FrameTable::default();
    let mut profiles: BTreeMap<ProfileKey, (Vec<Vec<usize>>, Vec<u64>)> = BTreeMap::new();
    for (key, count) in window.stacks() {
        let stack = table.stack(key, None);
        let p = profiles
            .entry((
                key.thread.pid,
                key.thread.tid,
                thread_name(key, false),
                false,
            ))
            .or_default();
        p.0.push(stack);
        p.1.push(count.saturating_mul(window.period_ns));
    }
    for (key, wait, ns) in window.off_cpu_stacks() {
        let root = FrameEntry {
            name: format!("wait: {}", WaitReason::label(wait)),
            file: None,
            line: None,
        };
        let stack = table.stack(key, Some(root));
        let p = profiles
            .entry((key.thread.pid, key.thread.tid, thread_name(key, true), true))
            .or_default();
        p.0.push(stack);
        p.1.push(ns);
    }
    let profiles: Vec<Profile> = profiles
        .into_iter()
        .map(|((_, _, name, _), (samples, weights))| Profile {
            kind: "sampled",
            name,
            unit: "nanoseconds",
            start_value: 0,
            end_value: weights.iter().sum(),
            samples,
            weights,
        })
        .collect();
    let name = match window
        .labels
        .get("service_name")
        .or(window.labels.get("pid"))
    {
        Some(v) => format!("pyagent: {v}"),
        None => "pyagent".to_string(),
    };
    let file = File {
        schema: "https://www.speedscope.app/file-format-schema.json",
        shared: Shared {
            frames: table.frames,
        },
        profiles,
        name,
        active_profile_index: 0,
        exporter: concat!("pyagent ", env!("CARGO_PKG_VERSION")),
    };
    serde_json::to_writer(&mut *out, &file).map_err(io::Error::other)?;
    out.write_all(b"\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::tests::{frame, sample};
    use crate::aggregate::Aggregator;

    /// Two threads, a shared frame: one frame table, one profile per thread, stacks root first
    /// weighed by the period; off-CPU time in its own profile under its wait reason.
    #[test]
    fn one_profile_per_thread_with_shared_frames() {
        let main = frame("main", "app.py", 10, 1);
        let work = frame("work", "app.py", 5, 4);
        let mut agg = Aggregator::new(1_000);
        let a = sample(7, 1, Some("MainThread"), vec![work.clone(), main.clone()]);
        let b = sample(7, 2, None, vec![main]);
        agg.add(&a);
        agg.add(&a);
        agg.add(&b);
        agg.add_off_cpu(&b, WaitReason::Lock, 5_000);
        let mut out = Vec::new();
        write(&agg.cut(), &mut out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let frames = v["shared"]["frames"].as_array().unwrap();
        let names: Vec<&str> = frames.iter().map(|f| f["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["main", "work", "wait: lock"]);
        assert_eq!(frames[1]["line"], 5);
        let profiles = v["profiles"].as_array().unwrap();
        assert_eq!(profiles.len(), 3);
        assert_eq!(profiles[0]["name"], "process 7 thread 1 (MainThread)");
        assert_eq!(profiles[0]["samples"], serde_json::json!([[0, 1]]));
        assert_eq!(profiles[0]["weights"], serde_json::json!([2000]));
        assert_eq!(profiles[1]["name"], "process 7 thread 2");
        assert_eq!(profiles[2]["name"], "process 7 thread 2 (off-CPU)");
        assert_eq!(profiles[2]["samples"], serde_json::json!([[2, 0]]));
        assert_eq!(profiles[2]["weights"], serde_json::json!([5000]));
        assert_eq!(profiles[2]["endValue"], 5000);
    }
}
