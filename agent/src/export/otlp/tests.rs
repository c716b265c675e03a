//! The OTLP request of a window, checked field by field through the crate's own types.

use std::time::{Duration, UNIX_EPOCH};

use prost_otlp::Message;

use super::*;
use crate::aggregate::tests::{frame, sample};
use crate::aggregate::{Aggregator, ProfileWindow, WaitReason};

const PERIOD_NS: u64 = 10_000_000;
const TRACE_ID: [u8; 16] = [
    0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80, 0x31, 0x9c,
];
const SPAN_ID: [u8; 8] = [0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31];

/// A process window with on-CPU stacks on two threads (the main thread's in a span) and an
/// off-CPU wait, labelled as the service labels a process.
fn window() -> ProfileWindow {
    let module = frame("<module>", "/srv/app.py", 30, 1);
    let handle = frame("Server.handle", "/srv/server.py", 12, 10);
    let read = frame("Server.read", "/srv/server.py", 40, 38);
    let mut agg = Aggregator::new(PERIOD_NS);
    for (key, value) in [
        ("service_name", "web"),
        ("hostname", "host-1"),
        ("pid", "4321"),
        ("ns_pid", "7"),
        ("python_version", "3.12.3"),
        ("container_id", "abc123"),
        ("pod_uid", "0f0e-11"),
    ] {
        agg.set_label(key, value.to_string());
    }
    let main = Some("MainThread");
    let mut in_span = sample(4321, 4321, main, vec![handle.clone(), module.clone()]);
    in_span.thread.trace = Some(crate::unwind::TraceContext {
        trace_id: TRACE_ID,
        span_id: SPAN_ID,
    });
    agg.add_count(&in_span, 3);
    agg.add(&sample(4321, 4330, Some("worker-1"), vec![module.clone()]));
    let blocked = sample(4321, 4330, Some("worker-1"), vec![read, handle, module]);
    agg.add_off_cpu(&blocked, WaitReason::Io, 250_000_000);
    let mut window = agg.cut();
    window.start = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    window.duration = Duration::from_secs(10);
    window
}

fn meta(window: &ProfileWindow) -> ProfileMeta {
    ProfileMeta::for_window("web", window)
}

/// Each sample of `profile` as (stack as `function file:line` leaf first, attributes, value).
fn samples_of(
    req: &ExportProfilesServiceRequest,
    profile: &Profile,
) -> Vec<(Vec<String>, BTreeMap<String, String>, i64)> {
    let d = req.dictionary.as_ref().expect("dictionary");
    let s = |i: i32| d.string_table[i as usize].clone();
    let mut out: Vec<_> = profile
        .samples
        .iter()
        .map(|sample| {
            let stack = &d.stack_table[sample.stack_index as usize];
            let frames = stack
                .location_indices
                .iter()
                .map(|&l| {
                    let location = &d.location_table[l as usize];
                    assert_eq!(location.attribute_indices.len(), 1);
                    let line = &location.lines[0];
                    let f = &d.function_table[line.function_index as usize];
                    format!(
                        "{} {}:{}",
                        s(f.name_strindex),
                        s(f.filename_strindex),
                        line.line
                    )
                })
                .collect();
            let attributes = sample
                .attribute_indices
                .iter()
                .map(|&a| {
                    let a = &d.attribute_table[a as usize];
                    let value = match a.value.as_ref().and_then(|v| v.value.as_ref()) {
                        Some(Value::StringValue(v)) => v.clone(),
                        Some(Value::IntValue(n)) => format!("int:{n}"),
                        other => panic!("unexpected value {other:?}"),
                    };
                    (s(a.key_strindex), value)
                })
                .collect();
            (frames, attributes, sample.values[0])
        })
        .collect();
    out.sort();
    out
}

#[test]
fn a_window_round_trips_through_the_proto_types() {
    let window = window();
    let pprof = crate::export::pprof::build(&window);
    let req = request(&pprof, &meta(&window));
    let bytes = req.encode_to_vec();
    let back = ExportProfilesServiceRequest::decode(bytes.as_slice()).expect("decodes");
    // Nothing written is lost on the wire: every field the types know came back.
    assert_eq!(back, req);
    assert_eq!(back.encode_to_vec(), bytes);

    let d = back.dictionary.as_ref().expect("dictionary");
    assert_eq!(d.string_table[0], "");
    assert_eq!(d.function_table[0], Function::default());
    assert_eq!(d.location_table[0], Location::default());
    assert_eq!(d.stack_table[0], Stack::default());
    assert_eq!(d.attribute_table[0], KeyValueAndUnit::default());
    assert_eq!(d.mapping_table, vec![Mapping::default()]);
    let s = |i: i32| d.string_table[i as usize].as_str();

    let [resource] = &back.resource_profiles[..] else {
        panic!("one resource per window")
    };
    let attributes = resource_attribute_map(&back);
    let expected: BTreeMap<String, String> = [
        ("service.name", "web"),
        ("host.name", "host-1"),
        ("process.pid", "4321"),
        ("ns_pid", "7"),
        ("process.runtime.name", "CPython"),
        ("process.runtime.version", "3.12.3"),
        ("container.id", "abc123"),
        ("k8s.pod.uid", "0f0e-11"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(attributes, expected);
    let mut attributes = resource.resource.as_ref().unwrap().attributes.iter();
    let pid = attributes.find(|kv| kv.key == "process.pid").unwrap();
    assert_eq!(pid.value, Some(int_value(4321)), "process.pid is an int");

    let [scope] = &resource.scope_profiles[..] else {
        panic!("one scope")
    };
    assert_eq!(scope.scope.as_ref().unwrap().name, "pyagent");
    let [cpu, off_cpu] = &scope.profiles[..] else {
        panic!("a CPU and an off-CPU profile: {:?}", scope.profiles.len())
    };
    let ty = |t: &Option<ValueType>| {
        let t = t.as_ref().expect("value type");
        (s(t.type_strindex), s(t.unit_strindex))
    };
    assert_eq!(ty(&cpu.sample_type), ("samples", "count"));
    assert_eq!(ty(&cpu.period_type), ("cpu", "nanoseconds"));
    assert_eq!(cpu.period, PERIOD_NS as i64);
    assert_eq!(ty(&off_cpu.sample_type), ("off_cpu", "nanoseconds"));
    assert_eq!((off_cpu.period_type.as_ref(), off_cpu.period), (None, 0));
    for p in [cpu, off_cpu] {
        assert_eq!(p.time_unix_nano, 1_700_000_000_000_000_000);
        assert_eq!(p.duration_nano, 10_000_000_000);
        assert_eq!(p.profile_id.len(), 16);
    }
    assert_ne!(cpu.profile_id, off_cpu.profile_id);

    let attrs = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let main = attrs(&[("thread.id", "int:4321"), ("thread.name", "MainThread")]);
    let worker = attrs(&[("thread.id", "int:4330"), ("thread.name", "worker-1")]);
    let module = "<module> /srv/app.py:30".to_string();
    let handle = "Server.handle /srv/server.py:12".to_string();
    let read = "Server.read /srv/server.py:40".to_string();
    assert_eq!(
        samples_of(&back, cpu),
        vec![
            (vec![module.clone()], worker.clone(), 1),
            (vec![handle.clone(), module.clone()], main, 3),
        ]
    );
    let mut waiting = worker;
    waiting.insert("wait".into(), "io".into());
    assert_eq!(
        samples_of(&back, off_cpu),
        vec![(vec![read, handle, module], waiting, 250_000_000)]
    );
    // The main thread's samples link to its span; the others to nothing.
    assert_eq!(
        d.link_table,
        [
            Link::default(),
            Link {
                trace_id: TRACE_ID.to_vec(),
                span_id: SPAN_ID.to_vec(),
            }
        ]
    );
    let mut links: Vec<(i64, i32)> = cpu
        .samples
        .iter()
        .chain(&off_cpu.samples)
        .map(|s| (s.values[0], s.link_index))
        .collect();
    links.sort_unstable();
    assert_eq!(links, [(1, 0), (3, 1), (250_000_000, 0)]);
    for f in &d.function_table[1..] {
        assert_ne!(f.start_line, 0, "first lines are kept");
    }
    for l in &d.location_table[1..] {
        let a = &d.attribute_table[l.attribute_indices[0] as usize];
        assert_eq!(s(a.key_strindex), "profile.frame.type");
        assert_eq!(a.value, Some(string_value("cpython")));
    }
}

#[test]
fn a_window_without_off_cpu_data_gives_one_profile() {
    let mut agg = Aggregator::new(PERIOD_NS);
    agg.add(&sample(9, 9, None, vec![frame("f", "a.py", 1, 1)]));
    let window = agg.cut();
    let req = request(&crate::export::pprof::build(&window), &meta(&window));
    let profiles = &req.resource_profiles[0].scope_profiles[0].profiles;
    assert_eq!(profiles.len(), 1);
    assert_eq!(profiles[0].samples[0].values, vec![1]);
    // Without a pid among the window's labels, each sample says its process.
    let d = req.dictionary.as_ref().unwrap();
    let keys: Vec<&str> = profiles[0].samples[0]
        .attribute_indices
        .iter()
        .map(|&a| d.string_table[d.attribute_table[a as usize].key_strindex as usize].as_str())
        .collect();
    assert_eq!(keys, ["thread.id", "pid"]);
}

/// A sample taken in a span (OTEP 4947, by either sampler) links to it: a link with the trace
/// and span ids, shared by the samples of that span; a sample in no span links to nothing
/// (index 0, the empty link). The pprof the request is built from carries both as labels, and
/// the samples of one span stay one stack each (the trace id splits nothing).
#[test]
fn a_sample_in_a_span_links_to_it() {
    use crate::unwind::TraceContext;
    let trace_id = [
        0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80, 0x31,
        0x9c,
    ];
    let span_id = [0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31];
    let mut agg = Aggregator::new(PERIOD_NS);
    for function in ["in_span", "also_in_span", "in_span"] {
        let mut in_span = sample(9, 9, None, vec![frame(function, "a.py", 1, 1)]);
        in_span.thread.trace = Some(TraceContext { trace_id, span_id });
        agg.add(&in_span);
    }
    agg.add(&sample(9, 9, None, vec![frame("outside", "a.py", 1, 1)]));
    let window = agg.cut();
    assert_eq!(window.counts.len(), 3, "one key per stack in the span");
    let pprof = crate::export::pprof::build(&window);
    let text = |i: i64| pprof.string_table[i as usize].as_str();
    let mut labelled: Vec<(i64, Vec<(&str, &str)>)> = pprof
        .sample
        .iter()
        .map(|s| {
            let labels = s
                .label
                .iter()
                .filter(|l| text(l.key).ends_with("_id") && text(l.key) != "thread_id")
                .map(|l| (text(l.key), text(l.str)))
                .collect();
            (s.value[0], labels)
        })
        .collect();
    labelled.sort();
    let in_span = vec![
        ("trace_id", "0af7651916cd43dd8448eb211c80319c"),
        ("span_id", "b7ad6b7169203331"),
    ];
    assert_eq!(
        labelled,
        [(1, vec![]), (1, in_span.clone()), (2, in_span)],
        "pprof labels"
    );

    let req = request(&pprof, &meta(&window));
    let d = req.dictionary.as_ref().expect("dictionary");
    let profile = &req.resource_profiles[0].scope_profiles[0].profiles[0];
    let mut links: Vec<i32> = profile.samples.iter().map(|s| s.link_index).collect();
    links.sort_unstable();
    let [0, a, b] = links[..] else {
        panic!("three samples: {links:?}")
    };
    assert!(a > 0 && a == b, "one link for the span: {links:?}");
    assert_eq!(
        d.link_table[a as usize],
        Link {
            trace_id: trace_id.to_vec(),
            span_id: span_id.to_vec(),
        }
    );
    assert_eq!(d.link_table[0], Link::default());
    assert_eq!(d.link_table.len(), 2);
    // The ids are the link, not attributes too.
    for sample in &profile.samples {
        for &a in &sample.attribute_indices {
            let key = &d.string_table[d.attribute_table[a as usize].key_strindex as usize];
            assert!(
                !key.ends_with("span_id") && !key.ends_with("trace_id"),
                "{key}"
            );
        }
    }
}

#[test]
fn id_labels_are_link_bytes() {
    assert_eq!(
        hex_bytes::<8>("00f067aa0ba902b7"),
        Some(vec![0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7])
    );
    assert_eq!(
        hex_bytes::<16>("0af7651916cd43dd8448eb211c80319c").map(|b| b.len()),
        Some(16)
    );
    assert_eq!(hex_bytes::<16>("00f067aa0ba902b7"), None);
    assert_eq!(hex_bytes::<8>("0"), None);
    assert_eq!(hex_bytes::<8>("+0f067aa0ba902b7"), None);
    assert_eq!(hex_bytes::<8>("zz0f067aa0ba902b"), None);
}

/// Native frames (`--native`) keep what pprof says of them: their object's mapping, with its
/// path and build ID, and a frame type of their own; Python frames stay `cpython`, unmapped.
#[test]
fn native_frames_keep_their_objects() {
    let window = crate::export::pprof::tests::native_window();
    let req = request(&crate::export::pprof::build(&window), &meta(&window));
    let back = ExportProfilesServiceRequest::decode(req.encode_to_vec().as_slice()).unwrap();
    assert_eq!(back, req);
    let d = back.dictionary.as_ref().expect("dictionary");
    let s = |i: i32| d.string_table[i as usize].as_str();
    let attribute = |i: i32| {
        let a = &d.attribute_table[i as usize];
        let value = match a.value.as_ref().and_then(|v| v.value.as_ref()) {
            Some(Value::StringValue(v)) => v.as_str(),
            other => panic!("unexpected value {other:?}"),
        };
        (s(a.key_strindex), value)
    };
    let stack = &d.stack_table
        [back.resource_profiles[0].scope_profiles[0].profiles[0].samples[0].stack_index as usize];
    // (function, frame type, mapping's file, mapping's attributes) per location, leaf first.
    type Seen<'a> = (&'a str, &'a str, &'a str, Vec<(&'a str, &'a str)>);
    let seen: Vec<Seen> = stack
        .location_indices
        .iter()
        .map(|&l| {
            let l = &d.location_table[l as usize];
            let f = &d.function_table[l.lines[0].function_index as usize];
            let [frame_type] = l.attribute_indices[..] else {
                panic!("one attribute: {l:?}")
            };
            assert_eq!(attribute(frame_type).0, "profile.frame.type");
            let m = &d.mapping_table[l.mapping_index as usize];
            let mapping_attributes = m.attribute_indices.iter().map(|&a| attribute(a)).collect();
            (
                s(f.name_strindex),
                attribute(frame_type).1,
                s(m.filename_strindex),
                mapping_attributes,
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("clear_page_erms", "kernel", "[kernel]", vec![]),
            (
                "deflate",
                "native",
                "/usr/lib/x86_64-linux-gnu/libz.so.1.2.13",
                vec![("process.executable.build_id.gnu", "0123abcd")]
            ),
            (
                "deflate_slow",
                "native",
                "/usr/lib/x86_64-linux-gnu/libz.so.1.2.13",
                vec![("process.executable.build_id.gnu", "0123abcd")]
            ),
            ("compress_loop", "cpython", "", vec![]),
        ]
    );
    assert_eq!(
        d.mapping_table.len(),
        3,
        "the empty mapping and two objects"
    );
    assert_eq!(d.mapping_table[0], Mapping::default());
}

/// A process in a Kubernetes pod, labelled as the service labels it (`process_labels`, from its
/// cgroup and its kept OpenTelemetry attributes): the resource names its container and pod, and
/// the attributes keep OpenTelemetry's names.
#[test]
fn a_pods_process_names_its_container_and_pod() {
    use crate::discovery::process_env::ProcessEnv;
    use crate::profiler::ProcessInfo;
    let container = "3f1c5d0e9b8a7f6e5d4c3b2a19081726354453627180f9e8d7c6b5a493827160";
    let info = ProcessInfo {
        pid: 4321,
        ns_pid: 1,
        version: "3.13.1".into(),
        cmdline: vec!["python3".into(), "app.py".into()],
        env: ProcessEnv {
            labels: [
                ("deployment_environment", "prod".to_string()),
                ("service_version", "1.4.2".to_string()),
                ("service_namespace", "shop".to_string()),
            ]
            .into_iter()
            .collect(),
            ..ProcessEnv::default()
        },
        cgroup: format!(
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod6b1d4c4e_2f4a_4b7e_9c1d_0a1b2c3d4e5f.slice/cri-containerd-{container}.scope\n"
        ),
        ppid: 1,
        parent_cmdline: Vec::new(),
    };
    let mut agg = Aggregator::new(PERIOD_NS);
    for (key, value) in crate::service::process_labels(&info, "checkout", None, "node-1") {
        agg.set_label(key, value);
    }
    agg.add(&sample(4321, 4321, None, vec![frame("f", "app.py", 1, 1)]));
    let window = agg.cut();
    let req = request(
        &crate::export::pprof::build(&window),
        &ProfileMeta::for_window("checkout", &window),
    );
    let expected: BTreeMap<String, String> = [
        ("service.name", "checkout"),
        ("host.name", "node-1"),
        ("process.pid", "4321"),
        ("ns_pid", "1"),
        ("process.runtime.name", "CPython"),
        ("process.runtime.version", "3.13.1"),
        ("container.id", container),
        ("k8s.pod.uid", "6b1d4c4e-2f4a-4b7e-9c1d-0a1b2c3d4e5f"),
        ("deployment.environment.name", "prod"),
        ("service.version", "1.4.2"),
        ("service.namespace", "shop"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(resource_attribute_map(&req), expected);
}
