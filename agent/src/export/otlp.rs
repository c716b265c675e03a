//! OTLP profiles (`opentelemetry.proto.collector.profiles.v1development`, proto v1.10): what the
//! upload sink sends to an OpenTelemetry Collector or to Pyroscope's OTLP endpoint.
//!
//! Built from the pprof `Profile` of a window (the bytes every sink shares, spilled files included)
//! and its [`ProfileMeta`], so a profile spilled while the store was down is sent the same way later.
//! The layout:
//! - one `ResourceProfiles` per window (one process), its resource attributes in OpenTelemetry's
//!   names: `service.name`, `host.name`, `process.pid`, `process.runtime.name` (`CPython`),
//!   `process.runtime.version`, `container.id`, `k8s.pod.uid`; the window's other labels
//!   (`ns_pid`) under their own names. Plain `key`/`string_value` forms: Pyroscope reads those.
//! - one `Profile` per sample type: CPU as `samples`/`count` with period type `cpu`/`nanoseconds`
//!   (what the OpenTelemetry eBPF profiler sends, and what Pyroscope names `process_cpu`), and with
//!   off-CPU data a second one, `off_cpu`/`nanoseconds`, without a period.
//! - sample attributes: `thread.id` (the host's id) and `thread.name`, then the pprof sample labels
//!   that are not the process's (`ns_thread_id`, `wait`, `gil`, `state`) under their own names.
//! - every location carries `profile.frame.type` = `cpython`; no mapping (Python frames have no
//!   addresses).
//! - the request's dictionary: pprof's string table first (same indices), then what OTLP adds.

use std::collections::{BTreeMap, HashMap};

use ::pprof::protos as pp;
use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    any_value::Value, AnyValue, InstrumentationScope, KeyValue,
};
use opentelemetry_proto::tonic::profiles::v1development::{
    Function, KeyValueAndUnit, Line, Location, Mapping, Profile, ProfilesDictionary,
    ResourceProfiles, Sample, ScopeProfiles, Stack, ValueType,
};
use opentelemetry_proto::tonic::resource::v1::Resource;

use crate::export::sinks::ProfileMeta;

/// Where an OTLP/HTTP receiver takes profiles, below its base URL.
pub const PROFILES_PATH: &str = "/v1development/profiles";

/// The value of `process.runtime.name`.
const RUNTIME_NAME: &str = "CPython";

/// Window labels that become resource attributes under another name.
const RESOURCE_NAMES: [(&str, &str); 8] = [
    ("hostname", "host.name"),
    ("python_version", "process.runtime.version"),
    ("container_id", "container.id"),
    ("pod_uid", "k8s.pod.uid"),
    ("pid", "process.pid"),
    // Read from the target's OTEL_RESOURCE_ATTRIBUTES (see `discovery::process_env`).
    ("deployment_environment", "deployment.environment.name"),
    ("service_version", "service.version"),
    ("service_namespace", "service.namespace"),
];

/// Sample labels that become sample attributes under another name.
const SAMPLE_NAMES: [(&str, &str); 2] =
    [("thread_id", "thread.id"), ("thread_name", "thread.name")];

/// The request for one window: `profile` is its pprof, `meta` who and when.
pub fn request(profile: &pp::Profile, meta: &ProfileMeta) -> ExportProfilesServiceRequest {
    let mut dict = Dictionary::new(&profile.string_table);
    let frame_type = dict.attribute("profile.frame.type", string_value("cpython"));
    let functions = dict.functions(&profile.function);
    let locations = dict.locations(&profile.location, &functions, frame_type);
    let text = |i: i64| {
        usize::try_from(i)
            .ok()
            .and_then(|i| profile.string_table.get(i))
    };
    let value_index = |ty: &str| {
        profile
            .sample_type
            .iter()
            .position(|t| text(t.ty).is_some_and(|t| t == ty))
    };
    let (count, off) = (value_index("samples"), value_index("off_cpu"));
    let mut profiles = Vec::new();
    if let Some(count) = count {
        let mut cpu = dict.profile(profile, meta, "samples", "count");
        cpu.period_type = Some(dict.value_type("cpu", "nanoseconds"));
        cpu.period = profile.period;
        cpu.samples = dict.samples(profile, count, &locations, meta);
        profiles.push(cpu);
    }
    if let Some(off) = off {
        let mut off_cpu = dict.profile(profile, meta, "off_cpu", "nanoseconds");
        off_cpu.samples = dict.samples(profile, off, &locations, meta);
        profiles.push(off_cpu);
    }
    ExportProfilesServiceRequest {
        resource_profiles: vec![ResourceProfiles {
            resource: Some(Resource {
                attributes: resource_attributes(meta),
                ..Resource::default()
            }),
            scope_profiles: vec![ScopeProfiles {
                scope: Some(InstrumentationScope {
                    name: "pyagent".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    ..InstrumentationScope::default()
                }),
                profiles,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
        dictionary: Some(dict.finish()),
    }
}

/// `service.name` and the window's labels, in OpenTelemetry's names where it has one.
fn resource_attributes(meta: &ProfileMeta) -> Vec<KeyValue> {
    let attribute = |key: &str, value| KeyValue {
        key: key.into(),
        value: Some(value),
        ..KeyValue::default()
    };
    let mut out = vec![attribute("service.name", string_value(&meta.service))];
    for (label, value) in &meta.labels {
        let renamed = RESOURCE_NAMES.iter().find(|(from, _)| from == label);
        match renamed.map(|(_, to)| *to) {
            Some("process.pid") => {
                let pid = value
                    .parse()
                    .map_or_else(|_| string_value(value), int_value);
                out.push(attribute("process.pid", pid));
            }
            Some(name) => out.push(attribute(name, string_value(value))),
            // Already the service name.
            None if label == "service_name" => {}
            None => out.push(attribute(label, string_value(value))),
        }
        if label == "python_version" {
            out.push(attribute(
                "process.runtime.name",
                string_value(RUNTIME_NAME),
            ));
        }
    }
    out
}

fn string_value(text: &str) -> AnyValue {
    AnyValue {
        value: Some(Value::StringValue(text.into())),
    }
}

fn int_value(n: i64) -> AnyValue {
    AnyValue {
        value: Some(Value::IntValue(n)),
    }
}

/// The request's shared tables, each with its zero value at index 0 (as the proto requires).
struct Dictionary {
    strings: Vec<String>,
    string_ids: HashMap<String, i32>,
    functions: Vec<Function>,
    locations: Vec<Location>,
    stacks: Vec<Stack>,
    stack_ids: HashMap<Vec<i32>, i32>,
    attributes: Vec<KeyValueAndUnit>,
    attribute_ids: HashMap<(i32, AttributeValue), i32>,
}

/// An attribute value as a map key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum AttributeValue {
    Text(String),
    Int(i64),
}

impl Dictionary {
    /// Starts from pprof's string table, so that its indices stay valid.
    fn new(pprof_strings: &[String]) -> Dictionary {
        let mut dict = Dictionary {
            strings: Vec::new(),
            string_ids: HashMap::new(),
            functions: vec![Function::default()],
            locations: vec![Location::default()],
            stacks: vec![Stack::default()],
            stack_ids: HashMap::new(),
            attributes: vec![KeyValueAndUnit::default()],
            attribute_ids: HashMap::new(),
        };
        dict.string("");
        for (i, text) in pprof_strings.iter().enumerate() {
            // A pprof string table holds each string once: index i stays i.
            if i > 0 {
                dict.strings.push(text.clone());
                dict.string_ids
                    .entry(text.clone())
                    .or_insert(index(dict.strings.len() - 1));
            }
        }
        dict
    }

    fn text(&self, pprof_index: i64) -> &str {
        usize::try_from(pprof_index)
            .ok()
            .and_then(|i| self.strings.get(i))
            .map_or("", String::as_str)
    }

    fn string(&mut self, text: &str) -> i32 {
        if let Some(&id) = self.string_ids.get(text) {
            return id;
        }
        self.strings.push(text.to_owned());
        let id = index(self.strings.len() - 1);
        self.string_ids.insert(text.to_owned(), id);
        id
    }

    fn value_type(&mut self, ty: &str, unit: &str) -> ValueType {
        ValueType {
            type_strindex: self.string(ty),
            unit_strindex: self.string(unit),
        }
    }

    fn attribute(&mut self, key: &str, value: AnyValue) -> i32 {
        let key = self.string(key);
        let as_key = match &value.value {
            Some(Value::IntValue(n)) => AttributeValue::Int(*n),
            Some(Value::StringValue(s)) => AttributeValue::Text(s.clone()),
            _ => AttributeValue::Text(String::new()),
        };
        if let Some(&id) = self.attribute_ids.get(&(key, as_key.clone())) {
            return id;
        }
        self.attributes.push(KeyValueAndUnit {
            key_strindex: key,
            value: Some(value),
            unit_strindex: 0,
        });
        let id = index(self.attributes.len() - 1);
        self.attribute_ids.insert((key, as_key), id);
        id
    }

    /// A pprof string index as an index into the dictionary's strings: one outside pprof's
    /// table (a damaged file) becomes the empty string, never an index a receiver rejects.
    fn pprof_string(&self, pprof_index: i64) -> i32 {
        let i = index(pprof_index);
        if i >= 0 && (i as usize) < self.strings.len() {
            i
        } else {
            0
        }
    }

    /// pprof functions into the function table; returns pprof id → index.
    fn functions(&mut self, functions: &[pp::Function]) -> HashMap<u64, i32> {
        let mut ids = HashMap::new();
        for f in functions {
            self.functions.push(Function {
                name_strindex: self.pprof_string(f.name),
                system_name_strindex: self.pprof_string(f.system_name),
                filename_strindex: self.pprof_string(f.filename),
                start_line: f.start_line,
            });
            ids.insert(f.id, index(self.functions.len() - 1));
        }
        ids
    }

    /// pprof locations into the location table, each marked a CPython frame; returns pprof id →
    /// index.
    fn locations(
        &mut self,
        locations: &[pp::Location],
        functions: &HashMap<u64, i32>,
        frame_type: i32,
    ) -> HashMap<u64, i32> {
        let mut ids = HashMap::new();
        for l in locations {
            let lines = l
                .line
                .iter()
                .map(|line| Line {
                    function_index: functions.get(&line.function_id).copied().unwrap_or(0),
                    line: line.line,
                    column: 0,
                })
                .collect();
            self.locations.push(Location {
                mapping_index: 0,
                address: l.address,
                lines,
                attribute_indices: vec![frame_type],
            });
            ids.insert(l.id, index(self.locations.len() - 1));
        }
        ids
    }

    fn stack(&mut self, location_indices: Vec<i32>) -> i32 {
        if let Some(&id) = self.stack_ids.get(&location_indices) {
            return id;
        }
        self.stacks.push(Stack {
            location_indices: location_indices.clone(),
        });
        let id = index(self.stacks.len() - 1);
        self.stack_ids.insert(location_indices, id);
        id
    }

    /// A profile of one sample type, timed like the pprof. Its id is the same on every try
    /// (process, window start, sample type), so that a receiver can tell a retry from a new
    /// profile.
    fn profile(
        &mut self,
        pprof: &pp::Profile,
        meta: &ProfileMeta,
        ty: &str,
        unit: &str,
    ) -> Profile {
        let mut profile_id = Vec::with_capacity(16);
        profile_id.extend_from_slice(&meta.pid.to_be_bytes());
        profile_id.extend_from_slice(&pprof.time_nanos.to_be_bytes());
        profile_id.extend_from_slice(&u32::from(ty == "off_cpu").to_be_bytes());
        Profile {
            sample_type: Some(self.value_type(ty, unit)),
            time_unix_nano: u64::try_from(pprof.time_nanos).unwrap_or(0),
            duration_nano: u64::try_from(pprof.duration_nanos).unwrap_or(0),
            profile_id,
            ..Profile::default()
        }
    }

    /// The samples with a value of the sample type at `value` in pprof's values.
    fn samples(
        &mut self,
        pprof: &pp::Profile,
        value: usize,
        locations: &HashMap<u64, i32>,
        meta: &ProfileMeta,
    ) -> Vec<Sample> {
        let mut out = Vec::new();
        for s in &pprof.sample {
            let amount = s.value.get(value).copied().unwrap_or(0);
            if amount <= 0 {
                continue;
            }
            let stack = s
                .location_id
                .iter()
                .map(|id| locations.get(id).copied().unwrap_or(0))
                .collect();
            let mut attribute_indices = Vec::new();
            for label in &s.label {
                let key = self.text(label.key).to_owned();
                // The process's labels are the resource's attributes.
                if meta.labels.contains_key(&key) {
                    continue;
                }
                let renamed = SAMPLE_NAMES.iter().find(|(from, _)| *from == key);
                let key = renamed.map_or(key.as_str(), |(_, to)| to).to_owned();
                let value = if label.str != 0 {
                    string_value(self.text(label.str))
                } else {
                    int_value(label.num)
                };
                attribute_indices.push(self.attribute(&key, value));
            }
            out.push(Sample {
                stack_index: self.stack(stack),
                attribute_indices,
                link_index: 0,
                values: vec![amount],
                timestamps_unix_nano: Vec::new(),
            });
        }
        out
    }

    fn finish(self) -> ProfilesDictionary {
        ProfilesDictionary {
            mapping_table: vec![Mapping::default()],
            location_table: self.locations,
            function_table: self.functions,
            link_table: vec![Default::default()],
            string_table: self.strings,
            attribute_table: self.attributes,
            stack_table: self.stacks,
        }
    }
}

/// A table index as the proto types it (tables here stay far below `i32::MAX` entries).
fn index<T: TryInto<i32>>(i: T) -> i32 {
    i.try_into().unwrap_or(i32::MAX)
}

/// The resource attributes of `request`'s first resource, by key (for checks and logs).
pub fn resource_attribute_map(request: &ExportProfilesServiceRequest) -> BTreeMap<String, String> {
    request
        .resource_profiles
        .iter()
        .flat_map(|r| r.resource.iter())
        .flat_map(|r| r.attributes.iter())
        .map(|kv| {
            let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(Value::StringValue(s)) => s.clone(),
                Some(Value::IntValue(n)) => n.to_string(),
                _ => String::new(),
            };
            (kv.key.clone(), value)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use prost_otlp::Message;

    use super::*;
    use crate::aggregate::tests::{frame, sample};
    use crate::aggregate::{Aggregator, ProfileWindow, WaitReason};

    const PERIOD_NS: u64 = 10_000_000;

    /// A process window with on-CPU stacks on two threads and an off-CPU wait, labelled as the
    /// service labels a process.
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
        agg.add_count(
            &sample(4321, 4321, main, vec![handle.clone(), module.clone()]),
            3,
        );
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
}
