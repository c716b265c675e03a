//! A gzipped pprof `Profile` (`perftools.profiles`, `profile.proto`), as `go tool pprof`, Pyroscope and
//! Grafana read it.
//!
//! Layout of what is written:
//! - sample types `samples/count` and `cpu/nanoseconds` (count x period, the default type), and with
//!   off-CPU data `off_cpu/nanoseconds` (time spent blocked; those samples carry a `wait` label: io,
//!   sleep, lock, gil, other); period type `cpu/nanoseconds` with `period` = the sampling period;
//!   `time_nanos` and `duration_nanos` from the window.
//! - one `Function` per distinct (qualified name, file, first line): `name` is the qualified name,
//!   `start_line` is `co_firstlineno`; pseudo-frames (`<native>`, `<GC>`) have file `~`. `system_name` stays
//!   empty on purpose: when it equals `name`, pprof "demangles" it and, taking `<...>` for C++ template
//!   arguments, turns `<module>` into an empty name and `f.<locals>.g` into `f..g` (google/pprof
//!   `internal/symbolizer/symbolizer.go`, `demangleSingleFunction`: a name differing from `system_name`
//!   counts as already demangled).
//! - one `Location` per distinct (function, line), holding one `Line`; a frame without a line gets line 0.
//!   Python frames have no `Mapping` (they have no addresses). Native frames (`--native` in eBPF
//!   mode) do: one `Mapping` per object, with its path as `filename` and its GNU build ID, so a
//!   store can tell objects apart and fetch their symbols; kernel frames have the `[kernel]`
//!   mapping, by which they can be filtered. Their functions' `filename` is the object's path.
//!   Native locations carry no address: stacks are aggregated by function, like Python ones.
//!   The process's executable, when a frame runs in it, has the first mapping (`go tool pprof`
//!   takes it for the main binary).
//! - `location_id` innermost first (pprof's leaf-first order).
//! - sample labels, Pyroscope-style: `thread_id` (num, the host's id, as `pid`), `ns_thread_id` (num, the id
//!   in the target's PID namespace, when it differs, as `ns_pid`), `thread_name` (str, when known), `wait` (off-CPU
//!   samples), `gil` (held, released, waiting; not on free-threaded builds), `state` (on_cpu, off_cpu;
//!   userspace `--idle` only), `trace_id` and `span_id` (lowercase hex, where the process
//!   publishes an OTel thread context, OTEP 4947; Pyroscope's span profiles key on `span_id`, and
//!   a span belongs to one trace, so `trace_id` makes no sample distinct that `span_id` does not),
//!   then every process-level label of the window (str). When those lack `pid`, each sample
//!   carries `pid` (num) instead.
//! - a comment `pyagent: N samples dropped` when the window dropped any.
//!
//! Strings, functions and locations are numbered in the order the sorted stacks first use them, so the same
//! window gives the same bytes.

use std::collections::HashMap;
use std::io::{self, Write};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use ::pprof::protos::{Function, Label, Line, Location, Mapping, Profile, Sample, ValueType};
use flate2::write::GzEncoder;
use flate2::Compression;
use prost::Message;

use crate::aggregate::ProfileWindow;
use crate::symbolize::native::ObjectName;
use crate::symbolize::Frame;

/// Writes `window` as a gzipped pprof profile.
pub fn write(window: &ProfileWindow, out: &mut impl Write) -> io::Result<()> {
    let bytes = build(window).encode_to_vec();
    let mut gzip = GzEncoder::new(out, Compression::default());
    gzip.write_all(&bytes)?;
    gzip.finish()?;
    Ok(())
}

/// The pprof `Profile` for `window`, before encoding.
pub fn build(window: &ProfileWindow) -> Profile {
    let mut builder = Builder::default();
    // Index 0 must be the empty string (profile.proto).
    builder.string("");
    let period_ns = to_i64(window.period_ns);
    let samples_count = builder.value_type("samples", "count");
    let cpu_ns = builder.value_type("cpu", "nanoseconds");
    let with_off_cpu = window.off_cpu_traced || !window.off_cpu.is_empty();
    let mut sample_type = vec![samples_count, cpu_ns.clone()];
    if with_off_cpu {
        sample_type.push(builder.value_type("off_cpu", "nanoseconds"));
    }
    let mut profile = Profile {
        default_sample_type: cpu_ns.ty,
        period_type: Some(cpu_ns.clone()),
        sample_type,
        period: period_ns,
        time_nanos: unix_nanos(window.start),
        duration_nanos: to_i64(window.duration.as_nanos()),
        ..Profile::default()
    };

    let thread_id_key = builder.string("thread_id");
    let thread_name_key = builder.string("thread_name");
    // Only profiles of processes in a PID namespace carry it.
    let ns_thread_id_key = window
        .counts
        .keys()
        .chain(window.off_cpu.keys().map(|(key, _)| key))
        .any(|key| key.thread.ns_tid.is_some())
        .then(|| builder.string("ns_thread_id"));
    let pid_key = (!window.labels.contains_key("pid")).then(|| builder.string("pid"));
    let process_labels: Vec<Label> = window
        .labels
        .iter()
        .map(|(key, value)| Label {
            key: builder.string(key),
            str: builder.string(value),
            ..Label::default()
        })
        .collect();

    // `go tool pprof` takes the first mapping for the main binary (`File:` in its header):
    // the executable's, when a native frame runs in it, and not `[kernel]` or a library.
    let executable = window
        .counts
        .keys()
        .chain(window.off_cpu.keys().map(|(key, _)| key))
        .flat_map(|key| &key.frames)
        .filter_map(|f| f.code.object.as_ref())
        .filter(|o| o.executable)
        .min();
    if let Some(o) = executable {
        builder.mapping(o);
    }
    let on_cpu = window
        .stacks()
        .into_iter()
        .map(|(key, count)| (key, None, count));
    let off_cpu = window
        .off_cpu_stacks()
        .into_iter()
        .map(|(key, wait, ns)| (key, Some(wait), ns));
    for (key, wait, amount) in on_cpu.chain(off_cpu) {
        let location_id = key
            .frames
            .iter()
            .map(|frame| builder.location(frame))
            .collect();
        let mut label = vec![Label {
            key: thread_id_key,
            num: i64::from(key.thread.tid),
            ..Label::default()
        }];
        if let (Some(ns_tid), Some(ns_thread_id_key)) = (key.thread.ns_tid, ns_thread_id_key) {
            label.push(Label {
                key: ns_thread_id_key,
                num: i64::from(ns_tid),
                ..Label::default()
            });
        }
        if let Some(name) = &key.thread.thread_name {
            label.push(Label {
                key: thread_name_key,
                str: builder.string(name),
                ..Label::default()
            });
        }
        if let Some(pid_key) = pid_key {
            label.push(Label {
                key: pid_key,
                num: i64::from(key.thread.pid),
                ..Label::default()
            });
        }
        let states = [
            wait.map(|w| ("wait", w.label())),
            key.thread.gil.map(|g| ("gil", g.label())),
            key.thread.cpu.map(|c| ("state", c.label())),
        ];
        for (name, value) in states.into_iter().flatten() {
            label.push(Label {
                key: builder.string(name),
                str: builder.string(value),
                ..Label::default()
            });
        }
        if let Some(task) = &key.thread.task {
            label.push(Label {
                key: builder.string("task_name"),
                str: builder.string(task),
                ..Label::default()
            });
        }
        if let Some(holder) = &key.thread.gil_holder {
            label.push(Label {
                key: builder.string("gil_holder"),
                str: builder.string(&holder.label()),
                ..Label::default()
            });
        }
        if let Some(trace) = &key.thread.trace {
            for (name, value) in [
                ("trace_id", trace.trace_id_hex()),
                ("span_id", trace.span_id_hex()),
            ] {
                label.push(Label {
                    key: builder.string(name),
                    str: builder.string(&value),
                    ..Label::default()
                });
            }
        }
        label.extend_from_slice(&process_labels);
        let amount = to_i64(amount);
        let mut value = match wait {
            // On-CPU: `amount` samples, each standing for one period of CPU time.
            None => vec![amount, amount.saturating_mul(period_ns)],
            // Off-CPU: `amount` nanoseconds of waiting.
            Some(_) => vec![0, 0, amount],
        };
        if with_off_cpu {
            value.resize(3, 0);
        }
        profile.sample.push(Sample {
            location_id,
            value,
            label,
        });
    }

    if window.dropped > 0 {
        let comment = builder.string(&format!("pyagent: {} samples dropped", window.dropped));
        profile.comment.push(comment);
    }
    profile.function = builder.functions;
    profile.location = builder.locations;
    profile.mapping = builder.mappings;
    profile.string_table = builder.strings;
    profile
}

/// The deduplicated tables of one profile.
#[derive(Default)]
struct Builder {
    strings: Vec<String>,
    string_ids: HashMap<String, i64>,
    functions: Vec<Function>,
    function_ids: HashMap<Arc<crate::symbolize::CodeName>, u64>,
    locations: Vec<Location>,
    location_ids: HashMap<(u64, i64), u64>,
    mappings: Vec<Mapping>,
    mapping_ids: HashMap<Arc<ObjectName>, u64>,
}

impl Builder {
    fn string(&mut self, text: &str) -> i64 {
        if let Some(&id) = self.string_ids.get(text) {
            return id;
        }
        let id = to_i64(self.strings.len());
        self.strings.push(text.to_owned());
        self.string_ids.insert(text.to_owned(), id);
        id
    }

    fn value_type(&mut self, ty: &str, unit: &str) -> ValueType {
        ValueType {
            ty: self.string(ty),
            unit: self.string(unit),
        }
    }

    fn function(&mut self, frame: &Frame) -> u64 {
        let key = Arc::clone(&frame.code);
        if let Some(&id) = self.function_ids.get(&key) {
            return id;
        }
        // Ids start at 1: 0 means "none" in profile.proto.
        let id = self.functions.len() as u64 + 1;
        let name = self.string(&frame.code.function);
        let filename = self.string(&frame.code.file);
        self.functions.push(Function {
            id,
            name,
            // Not `name`: see the module docs (pprof would strip `<module>` to nothing).
            system_name: 0,
            filename,
            start_line: i64::from(frame.code.first_line),
        });
        self.function_ids.insert(key, id);
        id
    }

    fn location(&mut self, frame: &Frame) -> u64 {
        let function_id = self.function(frame);
        let line = frame.line.map_or(0, i64::from);
        if let Some(&id) = self.location_ids.get(&(function_id, line)) {
            return id;
        }
        let mapping_id = frame.code.object.as_ref().map_or(0, |o| self.mapping(o));
        let id = self.locations.len() as u64 + 1;
        self.locations.push(Location {
            id,
            mapping_id,
            line: vec![Line { function_id, line }],
            ..Location::default()
        });
        self.location_ids.insert((function_id, line), id);
        id
    }

    fn mapping(&mut self, object: &Arc<ObjectName>) -> u64 {
        if let Some(&id) = self.mapping_ids.get(object) {
            return id;
        }
        let id = self.mappings.len() as u64 + 1;
        let filename = self.string(&object.path);
        let build_id = object.build_id.as_deref().map_or(0, |b| self.string(b));
        self.mappings.push(Mapping {
            id,
            filename,
            build_id,
            // The names are in the profile already.
            has_functions: true,
            ..Mapping::default()
        });
        self.mapping_ids.insert(Arc::clone(object), id);
        id
    }
}

fn unix_nanos(time: SystemTime) -> i64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |since| to_i64(since.as_nanos()))
}

/// pprof stores counts and times as int64; anything larger saturates.
fn to_i64<T: TryInto<i64>>(value: T) -> i64 {
    value.try_into().unwrap_or(i64::MAX)
}

#[cfg(test)]
pub(crate) mod tests {
    use std::time::Duration;

    use super::*;
    use crate::aggregate::tests::{frame, sample};
    use crate::aggregate::Aggregator;
    use crate::symbolize::FrameKind;

    const PERIOD_NS: u64 = 10_000_000;

    fn window() -> ProfileWindow {
        let module = frame("<module>", "/srv/app.py", 30, 1);
        let handle = frame("Server.handle", "/srv/server.py", 12, 10);
        let parse = frame(
            "JSONDecoder.raw_decode",
            "/usr/lib/python3.12/json/decoder.py",
            353,
            343,
        );
        let mut on_request = frame("serve.<locals>.on_request", "/srv/server.py", 0, 38);
        on_request.line = None;
        let main_thread = Some("MainThread");
        let mut agg = Aggregator::new(PERIOD_NS);
        agg.set_label("service", "web");
        agg.set_label("python_version", "3.12.3");
        let deep = vec![parse, handle.clone(), module.clone()];
        agg.add_count(&sample(4321, 4321, main_thread, deep), 3);
        agg.add(&sample(
            4321,
            4321,
            main_thread,
            vec![handle.clone(), module.clone()],
        ));
        let gc = vec![Frame::pseudo(FrameKind::Gc), on_request, handle, module];
        agg.add_count(&sample(4321, 4330, None, gc), 2);
        agg.add_dropped(1);
        let mut window = agg.cut();
        window.start = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        window.duration = Duration::from_secs(10);
        window
    }

    #[test]
    fn tables_are_deduplicated() {
        let profile = build(&window());
        assert_eq!(profile.string_table[0], "");
        let mut strings = profile.string_table.clone();
        strings.sort();
        strings.dedup();
        assert_eq!(
            strings.len(),
            profile.string_table.len(),
            "duplicate strings"
        );
        // <module>, Server.handle, JSONDecoder.raw_decode, serve.<locals>.on_request, <GC>; one location each.
        assert_eq!(profile.function.len(), 5);
        assert_eq!(profile.location.len(), 5);
        assert_eq!(profile.sample.len(), 3);
        let total: i64 = profile.sample.iter().map(|s| s.value[0]).sum();
        assert_eq!(total, 6);
        for sample in &profile.sample {
            assert_eq!(sample.value[1], sample.value[0] * PERIOD_NS as i64);
        }
        assert_eq!(profile.time_nanos, 1_700_000_000_000_000_000);
        assert_eq!(profile.duration_nanos, 10_000_000_000);
    }

    /// A native frame of `object`.
    fn native(name: &str, object: &Arc<ObjectName>, kind: FrameKind) -> Frame {
        Frame {
            code: Arc::new(crate::symbolize::CodeName::native(name, Arc::clone(object))),
            line: None,
            kind,
        }
    }

    /// One sample of pid 7 whose stack, leaf first, is a kernel frame, two frames of libz
    /// (build ID `0123abcd`) and a Python frame.
    pub(crate) fn native_window() -> ProfileWindow {
        let libz = Arc::new(ObjectName {
            path: Arc::from("/usr/lib/x86_64-linux-gnu/libz.so.1.2.13"),
            build_id: Some(Arc::from("0123abcd")),
            executable: false,
        });
        let kernel = crate::unwind::native::kernel_object();
        let frames = vec![
            native("clear_page_erms", &kernel, FrameKind::Kernel),
            native("deflate", &libz, FrameKind::NativeCode),
            native("deflate_slow", &libz, FrameKind::NativeCode),
            frame("compress_loop", "/srv/app.py", 17, 18),
        ];
        let mut agg = Aggregator::new(PERIOD_NS);
        agg.add(&sample(7, 7, None, frames));
        agg.cut()
    }

    #[test]
    fn native_frames_have_their_object_as_mapping() {
        let profile = build(&native_window());
        let text = |i: i64| profile.string_table[i as usize].as_str();
        assert_eq!(profile.mapping.len(), 2);
        let z = profile
            .mapping
            .iter()
            .find(|m| text(m.filename).ends_with("libz.so.1.2.13"))
            .expect("libz mapping");
        assert_eq!(text(z.build_id), "0123abcd");
        assert!(profile
            .mapping
            .iter()
            .any(|m| text(m.filename) == "[kernel]" && m.build_id == 0));
        let mapped = profile.location.iter().filter(|l| l.mapping_id != 0);
        assert_eq!(mapped.count(), 3, "the Python frame has no mapping");
    }

    use crate::test_support::{go_pprof, temp_dir};

    /// The executable's mapping comes first, although a kernel and a library frame come before
    /// its frame in the stack: `go tool pprof` names the profile after it.
    #[test]
    fn the_executables_mapping_is_first() {
        let object = |path: &str, executable| {
            Arc::new(ObjectName {
                path: Arc::from(path),
                build_id: None,
                executable,
            })
        };
        let python = object("/usr/bin/python3.12", true);
        let libz = object("/usr/lib/x86_64-linux-gnu/libz.so.1.2.13", false);
        let kernel = crate::unwind::native::kernel_object();
        let frames = vec![
            native("clear_page_erms", &kernel, FrameKind::Kernel),
            native("deflate", &libz, FrameKind::NativeCode),
            frame("compress_loop", "/srv/app.py", 17, 18),
            native("Py_RunMain", &python, FrameKind::NativeCode),
        ];
        let mut agg = Aggregator::new(PERIOD_NS);
        agg.add(&sample(7, 7, None, frames));
        let profile = build(&agg.cut());
        let text = |i: i64| profile.string_table[i as usize].as_str();
        assert_eq!(profile.mapping.len(), 3);
        assert_eq!(text(profile.mapping[0].filename), "/usr/bin/python3.12");
        assert_eq!(profile.mapping[0].id, 1);

        let dir = temp_dir("pprof-main-mapping");
        let file = dir.path().join("profile.pb.gz");
        // Kernel frame first in the only stack: without the rule, `[kernel]` would be first.
        let mut bytes = Vec::new();
        let mut agg = Aggregator::new(PERIOD_NS);
        agg.add(&sample(
            7,
            7,
            None,
            vec![
                native("clear_page_erms", &kernel, FrameKind::Kernel),
                native("Py_RunMain", &python, FrameKind::NativeCode),
            ],
        ));
        write(&agg.cut(), &mut bytes).unwrap();
        std::fs::write(&file, &bytes).unwrap();
        let top = go_pprof(dir.path(), &["-top"], &file);
        assert!(top.contains("File: python3.12"), "{top}");
    }

    #[test]
    fn go_tool_pprof_reads_the_profile() {
        let dir = temp_dir("pprof-export");
        let file = dir.path().join("profile.pb.gz");
        let mut bytes = Vec::new();
        write(&window(), &mut bytes).unwrap();
        assert_eq!(&bytes[..2], &[0x1f, 0x8b], "gzip magic");
        std::fs::write(&file, &bytes).unwrap();

        let raw = go_pprof(dir.path(), &["-raw"], &file);
        println!("{raw}");
        for expected in [
            "PeriodType: cpu nanoseconds",
            "Period: 10000000",
            "Duration: 10s",
            "samples/count cpu/nanoseconds",
            "3   30000000:",
            "JSONDecoder.raw_decode /usr/lib/python3.12/json/decoder.py:353 s=343",
            "Server.handle /srv/server.py:12 s=10",
            "<module> /srv/app.py:30 s=1",
            "serve.<locals>.on_request /srv/server.py:0 s=38",
            "<GC> ~:0 s=0",
            "thread_id:[4321]",
            "thread_id:[4330]",
            "thread_name:[MainThread]",
            "service:[web]",
            "python_version:[3.12.3]",
            "pid:[4321]",
            "pyagent: 1 samples dropped",
        ] {
            assert!(
                raw.contains(expected),
                "missing {expected:?} in go tool pprof -raw output:\n{raw}"
            );
        }

        let top = go_pprof(dir.path(), &["-top"], &file);
        println!("{top}");
        for expected in [
            "Type: cpu",
            "JSONDecoder.raw_decode",
            "Server.handle",
            "<GC>",
        ] {
            assert!(
                top.contains(expected),
                "missing {expected:?} in go tool pprof -top output:\n{top}"
            );
        }
    }
}
