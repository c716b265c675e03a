//! Where each span's time went (`pyagent spans`): a profile's samples grouped by span (its
//! `trace_id` and `span_id` labels), by thread or by service, each group's wall time split
//! into [`Part`]s, with the leaf Python function that took most of each part.
//!
//! In comes a decoded [`Profile`] as [`crate::export::pprof`] writes it; out goes a
//! [`Summary`]. On-CPU time is read from the `cpu` sample type, off-CPU time from `off_cpu`,
//! both converted to seconds by their unit, so the columns are found by name, never by
//! position. Wall time is the sum of the parts: the time a thread was runnable but not running
//! (preempted) is in neither sample type, so it is not in the wall time either.

use std::collections::{BTreeMap, HashMap};

use ::pprof::protos::{Function, Location, Profile, Sample};
use serde::Serialize;

use super::{seconds_per_unit, text, type_name, ReportError};
use crate::aggregate::WaitReason;
pub use crate::aggregate::WallPart as Part;
use crate::unwind::{CpuState, GilState};

/// What samples are grouped by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupBy {
    /// `trace_id` and `span_id`; samples without them are left out (and totalled).
    Span,
    /// The sampled thread: `pid` and `thread_id`.
    Thread,
    /// The `service_name` label of the service's profiles; one group named after the file when
    /// it has none (`record` writes none).
    Service,
}

/// Whom a group's samples belong to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(untagged)]
pub enum GroupKey {
    /// One span of one trace (lowercase hex, as the labels have them).
    Span {
        /// `trace_id`
        trace_id: String,
        /// `span_id`
        span_id: String,
    },
    /// One thread.
    Thread {
        /// The process (`pid` label, a profile or a sample label).
        pid: Option<i64>,
        /// The host's thread id (`thread_id`).
        thread_id: Option<i64>,
    },
    /// One service.
    Service {
        /// `service_name`, or the name the file was given.
        service: String,
    },
}

/// The leaf Python function that took most of a part, and how much.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TopFunction {
    /// Qualified name.
    pub function: String,
    /// Its file.
    pub file: String,
    /// `co_firstlineno` (0 when unknown).
    pub first_line: i64,
    /// Seconds of the part with it as the leaf Python frame.
    pub seconds: f64,
}

/// One part of one group.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PartTime {
    /// Seconds.
    pub seconds: f64,
    /// Of the group's wall time, 0 to 1.
    pub share: f64,
    /// Where most of it went; `None` without time or without frames.
    pub top_function: Option<TopFunction>,
    /// GIL waits: the holder most of it was spent waiting on; `None` for other parts and
    /// where no sample names a holder.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_holder: Option<TopHolder>,
}

/// The function a GIL wait was spent waiting on most (the holders' innermost Python function,
/// from their `gil_holder` labels, `NAME in FUNCTION`), and how much: a pool of threads
/// running the same code holds the GIL as one.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TopHolder {
    /// The holders' function.
    pub function: String,
    /// Seconds of the part spent waiting on threads running it.
    pub seconds: f64,
    /// The threads seen holding the GIL in it.
    pub threads: usize,
}

/// One group: its wall time and its split.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Group {
    /// Whom it belongs to.
    #[serde(flatten)]
    pub key: GroupKey,
    /// The thread's name (`thread_name`) when grouped by thread and known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread_name: Option<String>,
    /// Seconds on and off the CPU.
    pub wall_seconds: f64,
    /// Every part, zeros included.
    pub parts: BTreeMap<Part, PartTime>,
}

/// Every group of a profile, most wall time first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// What the samples were grouped by.
    pub by: GroupBy,
    /// Wall seconds of every sample.
    pub total_seconds: f64,
    /// Wall seconds of samples without the grouping's labels (no span).
    pub ungrouped_seconds: f64,
    /// The groups, most wall time first.
    pub groups: Vec<Group>,
}

/// Groups `profile`'s samples `by` what is asked (`None`: by span when any sample has one,
/// else by thread) and splits each group's time. `file_name` names the one service of a
/// profile without `service_name` labels.
pub fn summarize(
    profile: &Profile,
    by: Option<GroupBy>,
    file_name: &str,
) -> Result<Summary, ReportError> {
    let columns = Columns::find(profile)?;
    let labels: Vec<SampleLabels> = profile
        .sample
        .iter()
        .map(|s| SampleLabels::read(profile, s))
        .collect();
    let has_spans = labels.iter().any(|l| l.span().is_some());
    let by = match by {
        Some(GroupBy::Span) if !has_spans => return Err(ReportError::NoSpans),
        Some(by) => by,
        None if has_spans => GroupBy::Span,
        None => GroupBy::Thread,
    };
    let leaves = Leaves::new(profile);
    let mut groups: HashMap<GroupKey, Tally> = HashMap::new();
    let mut total_seconds = 0.0;
    let mut ungrouped_seconds = 0.0;
    for (sample, l) in profile.sample.iter().zip(&labels) {
        let times = columns.split(sample, l);
        let seconds: f64 = times.iter().map(|(_, s)| s).sum();
        total_seconds += seconds;
        let Some(key) = l.group_key(by, file_name) else {
            ungrouped_seconds += seconds;
            continue;
        };
        let tally = groups.entry(key).or_default();
        if tally.thread_name.is_none() && by == GroupBy::Thread {
            tally.thread_name = l.thread_name.map(str::to_owned);
        }
        let leaf = leaves.leaf_python_function(sample);
        for (part, seconds) in times {
            tally.add(part, leaf, seconds);
            if let (Part::GilWait, Some(holder)) = (part, l.gil_holder) {
                // A holder whose function was not read names no function to show.
                if let Some((thread, function)) = holder.rsplit_once(" in ") {
                    let (s, threads) = tally.by_holder.entry(function.to_owned()).or_default();
                    *s += seconds;
                    threads.insert(thread.to_owned());
                }
            }
        }
    }
    let mut groups: Vec<Group> = groups
        .into_iter()
        .map(|(key, tally)| tally.into_group(key, &leaves))
        .collect();
    groups.sort_by(|a, b| {
        b.wall_seconds
            .total_cmp(&a.wall_seconds)
            .then_with(|| a.key.cmp(&b.key))
    });
    Ok(Summary {
        by,
        total_seconds,
        ungrouped_seconds,
        groups,
    })
}

/// A time-typed column of the sample values.
#[derive(Debug, Clone, Copy)]
struct Column {
    index: usize,
    seconds_per_unit: f64,
}

impl Column {
    /// This column's value of `sample` in seconds; a missing or negative value is none.
    fn seconds(self, sample: &Sample) -> f64 {
        let value = sample.value.get(self.index).copied().unwrap_or(0).max(0);
        value as f64 * self.seconds_per_unit
    }
}

/// Where on-CPU and off-CPU time are in the sample values.
#[derive(Debug, Clone, Copy)]
struct Columns {
    on_cpu: Option<Column>,
    off_cpu: Option<Column>,
}

impl Columns {
    /// `off_cpu` for off-CPU time; `cpu`, else any other time-typed sample type, for on-CPU
    /// time. pyagent's `samples/count` is left alone: `cpu` has the same samples as time.
    fn find(profile: &Profile) -> Result<Columns, ReportError> {
        let timed: Vec<(&str, Column)> = profile
            .sample_type
            .iter()
            .enumerate()
            .filter_map(|(index, t)| {
                let seconds_per_unit = seconds_per_unit(text(profile, t.unit))?;
                Some((
                    text(profile, t.ty),
                    Column {
                        index,
                        seconds_per_unit,
                    },
                ))
            })
            .collect();
        let off_cpu = timed.iter().find(|(ty, _)| *ty == "off_cpu").map(|t| t.1);
        let on_cpu = timed
            .iter()
            .find(|(ty, _)| *ty == "cpu")
            .or_else(|| timed.iter().find(|(ty, _)| *ty != "off_cpu"))
            .map(|t| t.1);
        if on_cpu.is_none() && off_cpu.is_none() {
            let found = profile
                .sample_type
                .iter()
                .map(|t| type_name(profile, t))
                .collect::<Vec<_>>()
                .join(", ");
            return Err(ReportError::NoTime { found });
        }
        Ok(Columns { on_cpu, off_cpu })
    }

    /// The parts of `sample`'s time, in seconds (pyagent's samples have one; a sample with time
    /// in both columns gives two).
    fn split(self, sample: &Sample, l: &SampleLabels) -> Vec<(Part, f64)> {
        let on = self.on_cpu.map(|c| (Part::of_on_cpu(l.gil, l.state), c));
        let off = self.off_cpu.map(|c| (Part::of_off_cpu(l.wait), c));
        [on, off]
            .into_iter()
            .flatten()
            .map(|(part, c)| (part, c.seconds(sample)))
            .filter(|(_, s)| *s > 0.0)
            .collect()
    }
}

/// The labels of one sample that the report reads.
#[derive(Debug, Default)]
struct SampleLabels<'a> {
    wait: Option<WaitReason>,
    gil: Option<GilState>,
    state: Option<CpuState>,
    trace_id: Option<&'a str>,
    span_id: Option<&'a str>,
    pid: Option<i64>,
    thread_id: Option<i64>,
    thread_name: Option<&'a str>,
    service: Option<&'a str>,
    gil_holder: Option<&'a str>,
}

impl<'a> SampleLabels<'a> {
    fn read(profile: &'a Profile, sample: &Sample) -> SampleLabels<'a> {
        let mut out = SampleLabels::default();
        for label in &sample.label {
            let value = text(profile, label.str);
            // A numeric label has no string (index 0, ""); pyagent writes `pid` either way.
            let number = if value.is_empty() {
                Some(label.num)
            } else {
                value.parse().ok()
            };
            let value = Some(value).filter(|v| !v.is_empty());
            match text(profile, label.key) {
                "wait" => out.wait = value.and_then(WaitReason::from_label),
                "gil" => out.gil = value.and_then(GilState::from_label),
                "state" => out.state = value.and_then(CpuState::from_label),
                "trace_id" => out.trace_id = value,
                "span_id" => out.span_id = value,
                "pid" => out.pid = number,
                "thread_id" => out.thread_id = number,
                "thread_name" => out.thread_name = value,
                "service_name" => out.service = value,
                "gil_holder" => out.gil_holder = value,
                _ => {}
            }
        }
        out
    }

    fn span(&self) -> Option<(&'a str, &'a str)> {
        self.trace_id.zip(self.span_id)
    }

    /// The group of this sample; `None` when grouping by span and it has none.
    fn group_key(&self, by: GroupBy, file_name: &str) -> Option<GroupKey> {
        match by {
            GroupBy::Span => self.span().map(|(trace, span)| GroupKey::Span {
                trace_id: trace.to_owned(),
                span_id: span.to_owned(),
            }),
            GroupBy::Thread => Some(GroupKey::Thread {
                pid: self.pid,
                thread_id: self.thread_id,
            }),
            GroupBy::Service => Some(GroupKey::Service {
                service: self.service.unwrap_or(file_name).to_owned(),
            }),
        }
    }
}

/// The locations and functions of a profile by id, to find a sample's leaf Python function.
struct Leaves<'a> {
    locations: HashMap<u64, &'a Location>,
    functions: HashMap<u64, &'a Function>,
    profile: &'a Profile,
}

impl<'a> Leaves<'a> {
    fn new(profile: &'a Profile) -> Leaves<'a> {
        Leaves {
            locations: profile.location.iter().map(|l| (l.id, l)).collect(),
            functions: profile.function.iter().map(|f| (f.id, f)).collect(),
            profile,
        }
    }

    /// The innermost Python function of `sample`'s stack (leaf first): native and kernel
    /// frames have a mapping and pseudo-frames (`<GC>`, `<native>`) the file `~`
    /// (see [`crate::export::pprof`]), so neither is one. The leaf itself when no frame is.
    fn leaf_python_function(&self, sample: &Sample) -> Option<u64> {
        let function_of = |location_id: &u64| {
            let location = self.locations.get(location_id)?;
            // Lines are innermost first (profile.proto: the last one is the caller).
            location.line.first().map(|l| (location, l.function_id))
        };
        let frames: Vec<_> = sample.location_id.iter().filter_map(function_of).collect();
        frames
            .iter()
            .find(|(location, function_id)| {
                location.mapping_id == 0
                    && self
                        .functions
                        .get(function_id)
                        .is_some_and(|f| text(self.profile, f.filename) != "~")
            })
            .or_else(|| frames.first())
            .map(|(_, function_id)| *function_id)
    }

    fn top_function(&self, function_id: u64, seconds: f64) -> TopFunction {
        let f = self.functions.get(&function_id);
        let name = |pick: fn(&Function) -> i64| f.map_or("", |f| text(self.profile, pick(f)));
        TopFunction {
            function: name(|f| f.name).to_owned(),
            file: name(|f| f.filename).to_owned(),
            first_line: f.map_or(0, |f| f.start_line),
            seconds,
        }
    }
}

/// A group's time as samples come: per part, and per part and leaf function.
#[derive(Debug, Default)]
struct Tally {
    seconds: BTreeMap<Part, f64>,
    by_function: HashMap<(Part, u64), f64>,
    /// GIL-wait seconds per holder function, and the holder threads seen in it
    by_holder: BTreeMap<String, (f64, std::collections::BTreeSet<String>)>,
    thread_name: Option<String>,
}

impl Tally {
    fn add(&mut self, part: Part, leaf: Option<u64>, seconds: f64) {
        *self.seconds.entry(part).or_default() += seconds;
        if let Some(function_id) = leaf {
            *self.by_function.entry((part, function_id)).or_default() += seconds;
        }
    }

    fn into_group(self, key: GroupKey, leaves: &Leaves) -> Group {
        let wall_seconds: f64 = self.seconds.values().sum();
        let parts = Part::ALL
            .into_iter()
            .map(|part| {
                let seconds = self.seconds.get(&part).copied().unwrap_or(0.0);
                let top = self
                    .by_function
                    .iter()
                    .filter(|((p, _), _)| *p == part)
                    // Most time; of equal times the lowest id, so the same file gives the same report.
                    .max_by(|((_, fa), a), ((_, fb), b)| a.total_cmp(b).then(fb.cmp(fa)))
                    .map(|((_, function_id), s)| leaves.top_function(*function_id, *s));
                let share = if wall_seconds > 0.0 {
                    seconds / wall_seconds
                } else {
                    0.0
                };
                // Most time; of equal times the first name.
                let top_holder = (part == Part::GilWait)
                    .then(|| {
                        self.by_holder
                            .iter()
                            .rev()
                            .max_by(|a, b| a.1 .0.total_cmp(&b.1 .0))
                            .map(|(function, (seconds, threads))| TopHolder {
                                function: function.clone(),
                                seconds: *seconds,
                                threads: threads.len(),
                            })
                    })
                    .flatten();
                let time = PartTime {
                    seconds,
                    share,
                    top_function: top,
                    top_holder,
                };
                (part, time)
            })
            .collect();
        Group {
            key,
            thread_name: self.thread_name,
            wall_seconds,
            parts,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use ::pprof::protos::{Label, ValueType};

    use super::*;
    use crate::aggregate::tests::{frame, sample};
    use crate::aggregate::Aggregator;
    use crate::export::pprof::build;
    use crate::symbolize::{Frame, FrameKind};
    use crate::unwind::{ThreadSample, TraceContext};

    /// 10 ms per on-CPU sample.
    const PERIOD_NS: u64 = 10_000_000;
    const MS: u64 = 1_000_000;

    fn in_span(mut s: ThreadSample, span: u8, gil: Option<GilState>) -> ThreadSample {
        s.thread.trace = Some(TraceContext {
            trace_id: [0xab; 16],
            span_id: [span; 8],
        });
        s.thread.gil = gil;
        s
    }

    fn span_key(span: u8) -> GroupKey {
        GroupKey::Span {
            trace_id: "ab".repeat(16),
            span_id: format!("{span:02x}").repeat(8),
        }
    }

    /// Thread 11 in span 01: 300 ms on CPU with the GIL in `compute`, 100 ms on CPU without it
    /// in `hash` (under a native frame), 200 ms io in `call`, 50 ms lock and 20 ms GIL wait in
    /// `take`. Thread 12 in span 02: 100 ms sleep in `nap`. Thread 13, no span: 40 ms on CPU.
    fn profile() -> Profile {
        let main = frame("handle", "/srv/app.py", 9, 1);
        let leaf = |name: &str| vec![frame(name, "/srv/app.py", 20, 19), main.clone()];
        let mut agg = Aggregator::new(PERIOD_NS);
        let t11 = |frames| sample(10, 11, Some("MainThread"), frames);
        let held = Some(GilState::Held);
        agg.add_count(&in_span(t11(leaf("compute")), 1, held), 30);
        let libz = Arc::new(crate::symbolize::native::ObjectName {
            path: Arc::from("/usr/lib/libz.so.1"),
            build_id: None,
            executable: false,
        });
        let deflate = Frame {
            code: Arc::new(crate::symbolize::CodeName::native("deflate", libz)),
            line: None,
            kind: FrameKind::NativeCode,
        };
        let mut hashing = leaf("hash");
        hashing.insert(0, deflate);
        let released = Some(GilState::Released);
        agg.add_count(&in_span(t11(hashing), 1, released), 10);
        agg.add_off_cpu(
            &in_span(t11(leaf("call")), 1, None),
            WaitReason::Io,
            200 * MS,
        );
        agg.add_off_cpu(
            &in_span(t11(leaf("take")), 1, None),
            WaitReason::Lock,
            50 * MS,
        );
        // The GIL wait: 12 ms on `parse` (6 ms in `parser`, 6 ms in `parser-2`), 8 ms on
        // `MainThread` in `encode`.
        for (holder, function, ms) in [
            ("parser", "parse", 6),
            ("MainThread", "encode", 8),
            ("parser-2", "parse", 6),
        ] {
            let mut waiting = in_span(t11(leaf("take")), 1, None);
            waiting.thread.gil_holder = Some(crate::unwind::GilHolder::new(
                0,
                Some(Arc::from(holder)),
                Some(Arc::from(function)),
            ));
            agg.add_off_cpu(&waiting, WaitReason::Gil, ms * MS);
        }
        let t12 = in_span(sample(10, 12, Some("worker"), leaf("nap")), 2, None);
        agg.add_off_cpu(&t12, WaitReason::Sleep, 100 * MS);
        agg.add_count(&sample(10, 13, None, leaf("idle")), 4);
        build(&agg.cut())
    }

    fn seconds(group: &Group, part: Part) -> f64 {
        group.parts[&part].seconds
    }

    fn top(group: &Group, part: Part) -> Option<&str> {
        let f = group.parts[&part].top_function.as_ref();
        f.map(|f| f.function.as_str())
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn spans_split_their_time_by_part() {
        let summary = summarize(&profile(), None, "app").unwrap();
        assert_eq!(summary.by, GroupBy::Span);
        assert_eq!(summary.groups.len(), 2);
        let a = &summary.groups[0];
        assert_eq!(a.key, span_key(1));
        assert!(close(a.wall_seconds, 0.67), "{a:?}");
        for (part, want) in [
            (Part::CpuGilHeld, 0.3),
            (Part::CpuNoGil, 0.1),
            (Part::GilWait, 0.02),
            (Part::Io, 0.2),
            (Part::Lock, 0.05),
            (Part::Sleep, 0.0),
            (Part::Other, 0.0),
        ] {
            assert!(close(seconds(a, part), want), "{part:?}: {a:?}");
            assert!(close(a.parts[&part].share, want / 0.67), "{part:?}: {a:?}");
        }
        assert_eq!(top(a, Part::CpuGilHeld), Some("compute"));
        // The Python frame under the native one.
        assert_eq!(top(a, Part::CpuNoGil), Some("hash"));
        assert_eq!(top(a, Part::Io), Some("call"));
        assert_eq!(top(a, Part::Lock), Some("take"));
        assert_eq!(top(a, Part::GilWait), Some("take"));
        let holder = a.parts[&Part::GilWait].top_holder.as_ref().unwrap();
        assert_eq!((holder.function.as_str(), holder.threads), ("parse", 2));
        assert!(close(holder.seconds, 0.012), "{holder:?}");
        assert_eq!(a.parts[&Part::Io].top_holder, None);
        assert_eq!(top(a, Part::Sleep), None);
        let f = a.parts[&Part::Io].top_function.as_ref().unwrap();
        assert_eq!((f.file.as_str(), f.first_line), ("/srv/app.py", 19));

        let b = &summary.groups[1];
        assert_eq!(b.key, span_key(2));
        assert!(close(seconds(b, Part::Sleep), 0.1), "{b:?}");
        assert!(close(b.parts[&Part::Sleep].share, 1.0), "{b:?}");
        assert!(close(summary.ungrouped_seconds, 0.04), "{summary:?}");
        assert!(close(summary.total_seconds, 0.81), "{summary:?}");
    }

    #[test]
    fn threads_and_services_group_the_same_time() {
        let summary = summarize(&profile(), Some(GroupBy::Thread), "app").unwrap();
        let threads: Vec<_> = summary
            .groups
            .iter()
            .map(|g| (g.key.clone(), g.thread_name.as_deref(), g.wall_seconds))
            .collect();
        let thread = |tid| GroupKey::Thread {
            pid: Some(10),
            thread_id: Some(tid),
        };
        assert_eq!(threads.len(), 3, "{threads:?}");
        assert_eq!(
            (&threads[0].0, threads[0].1),
            (&thread(11), Some("MainThread"))
        );
        assert_eq!((&threads[1].0, threads[1].1), (&thread(12), Some("worker")));
        assert_eq!((&threads[2].0, threads[2].1), (&thread(13), None));
        assert!(close(summary.ungrouped_seconds, 0.0));

        // A `record` profile has no service_name: one service, named as asked.
        let services = summarize(&profile(), Some(GroupBy::Service), "app").unwrap();
        assert_eq!(services.groups.len(), 1);
        let all = &services.groups[0];
        let service = |s: &str| GroupKey::Service {
            service: s.to_owned(),
        };
        assert_eq!(all.key, service("app"));
        assert!(close(all.wall_seconds, 0.81), "{all:?}");
        assert!(close(seconds(all, Part::CpuGilHeld), 0.3), "{all:?}");
        assert!(close(seconds(all, Part::CpuNoGil), 0.14), "{all:?}");

        let mut agg = Aggregator::new(PERIOD_NS);
        agg.set_label("service_name", "billing");
        agg.add(&sample(10, 11, None, vec![frame("f", "/a.py", 1, 1)]));
        let named = summarize(&build(&agg.cut()), Some(GroupBy::Service), "app").unwrap();
        assert_eq!(named.groups[0].key, service("billing"));
    }

    #[test]
    fn without_spans_the_default_is_by_thread_and_by_span_is_refused() {
        let mut agg = Aggregator::new(PERIOD_NS);
        agg.add_count(&sample(10, 11, None, vec![frame("f", "/a.py", 1, 1)]), 3);
        let profile = build(&agg.cut());
        let summary = summarize(&profile, None, "app").unwrap();
        assert_eq!(summary.by, GroupBy::Thread);
        assert!(close(summary.groups[0].wall_seconds, 0.03));
        // No GIL label: on CPU without knowing, counted as without it.
        assert!(close(seconds(&summary.groups[0], Part::CpuNoGil), 0.03));
        let err = summarize(&profile, Some(GroupBy::Span), "app").unwrap_err();
        assert!(matches!(err, ReportError::NoSpans), "{err:?}");
    }

    /// A profile of one sample with these sample types and values, and these string labels.
    fn hand_made(types: &[(&str, &str)], value: Vec<i64>, labels: &[(&str, &str)]) -> Profile {
        let mut strings = vec![String::new()];
        let mut string = |s: &str| {
            strings.push(s.to_owned());
            strings.len() as i64 - 1
        };
        let sample_type = types
            .iter()
            .map(|(ty, unit)| ValueType {
                ty: string(ty),
                unit: string(unit),
            })
            .collect();
        let label = labels
            .iter()
            .map(|(k, v)| Label {
                key: string(k),
                str: string(v),
                ..Label::default()
            })
            .collect();
        let sample = vec![Sample {
            location_id: vec![],
            value,
            label,
        }];
        Profile {
            sample_type,
            sample,
            string_table: strings,
            ..Profile::default()
        }
    }

    #[test]
    fn columns_are_found_by_name_and_unit() {
        // off_cpu first, in microseconds: 2 s of lock; cpu in milliseconds: 0.5 s.
        let profile = hand_made(
            &[
                ("off_cpu", "microseconds"),
                ("samples", "count"),
                ("cpu", "milliseconds"),
            ],
            vec![2_000_000, 7, 500],
            &[("wait", "lock"), ("trace_id", "aa"), ("span_id", "bb")],
        );
        let summary = summarize(&profile, None, "x").unwrap();
        let g = &summary.groups[0];
        assert!(close(seconds(g, Part::Lock), 2.0), "{g:?}");
        assert!(close(seconds(g, Part::CpuNoGil), 0.5), "{g:?}");
        assert!(close(g.wall_seconds, 2.5), "{g:?}");
        assert_eq!(top(g, Part::Lock), None, "no frames, no function");

        // Userspace `--idle`: off-CPU time in the cpu column, told apart by `state`.
        let idle = hand_made(
            &[("samples", "count"), ("cpu", "nanoseconds")],
            vec![1, 10_000_000],
            &[("state", "off_cpu"), ("gil", "released")],
        );
        let g = &summarize(&idle, None, "x").unwrap().groups[0];
        assert!(close(seconds(g, Part::Other), 0.01), "{g:?}");
    }

    #[test]
    fn a_profile_without_time_is_refused_naming_its_types() {
        let profile = hand_made(&[("samples", "count")], vec![5], &[]);
        let err = summarize(&profile, None, "x").unwrap_err();
        assert!(
            matches!(&err, ReportError::NoTime { found } if found == "samples/count"),
            "{err:?}"
        );
    }

    #[test]
    fn written_and_read_back_gives_the_same_summary() {
        let mut agg = Aggregator::new(PERIOD_NS);
        agg.add_count(
            &in_span(sample(1, 2, None, vec![frame("f", "/a.py", 1, 1)]), 3, None),
            2,
        );
        let mut bytes = Vec::new();
        crate::export::pprof::write(&agg.cut(), &mut bytes).unwrap();
        let profile = super::super::decode_profile(&bytes).unwrap();
        let summary = summarize(&profile, None, "x").unwrap();
        assert_eq!(summary.groups[0].key, span_key(3));
        assert!(close(summary.groups[0].wall_seconds, 0.02));
    }
}
