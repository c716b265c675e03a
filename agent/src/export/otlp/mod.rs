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
//!   that are not the process's (`ns_thread_id`, `wait`, `gil`, `state`) under their own names;
//!   `trace_id` and `span_id` (OTEP 4947) become the sample's link (`link_table`, `link_index`),
//!   which Pyroscope turns back into `trace_id`/`span_id` labels.
//! - every location carries `profile.frame.type`: `cpython` for Python frames (no mapping: they
//!   have no addresses), `native` and `kernel` for native frames (`--native`), which keep pprof's
//!   mapping of their object: its path and, as `process.executable.build_id.gnu`, its build ID.
//! - the request's dictionary: pprof's string table first (same indices), then what OTLP adds.

use std::collections::{BTreeMap, HashMap};

use ::pprof::protos as pp;
use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    any_value::Value, AnyValue, InstrumentationScope, KeyValue,
};
use opentelemetry_proto::tonic::profiles::v1development::{
    Function, KeyValueAndUnit, Line, Link, Location, Mapping, Profile, ProfilesDictionary,
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

/// The location attribute that says what kind of frame a location is.
const FRAME_TYPE: &str = "profile.frame.type";
/// The mapping attribute holding an object's GNU build ID.
const BUILD_ID: &str = "process.executable.build_id.gnu";
/// The pprof mapping of kernel frames (see `export::pprof`).
const KERNEL_MAPPING: &str = "[kernel]";

/// What a location is, as `profile.frame.type` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FrameType {
    Python,
    Native,
    Kernel,
}

impl FrameType {
    fn name(self) -> &'static str {
        match self {
            FrameType::Python => "cpython",
            FrameType::Native => "native",
            FrameType::Kernel => "kernel",
        }
    }
}

/// Sample labels that become sample attributes under another name.
const SAMPLE_NAMES: [(&str, &str); 2] =
    [("thread_id", "thread.id"), ("thread_name", "thread.name")];

/// The request for one window: `profile` is its pprof, `meta` who and when.
pub fn request(profile: &pp::Profile, meta: &ProfileMeta) -> ExportProfilesServiceRequest {
    let mut dict = Dictionary::new(&profile.string_table);
    let functions = dict.functions(&profile.function);
    let mappings = dict.mappings(&profile.mapping);
    let locations = dict.locations(&profile.location, &functions, &mappings);
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
    mappings: Vec<Mapping>,
    locations: Vec<Location>,
    stacks: Vec<Stack>,
    stack_ids: HashMap<Vec<i32>, i32>,
    attributes: Vec<KeyValueAndUnit>,
    attribute_ids: HashMap<(i32, AttributeValue), i32>,
    links: Vec<Link>,
    link_ids: HashMap<(Vec<u8>, Vec<u8>), i32>,
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
            mappings: vec![Mapping::default()],
            locations: vec![Location::default()],
            stacks: vec![Stack::default()],
            stack_ids: HashMap::new(),
            attributes: vec![KeyValueAndUnit::default()],
            attribute_ids: HashMap::new(),
            links: vec![Link::default()],
            link_ids: HashMap::new(),
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

    /// pprof mappings (native objects) into the mapping table; returns pprof id → (index, frame
    /// type of its locations: `kernel` for the `[kernel]` mapping, `native` otherwise).
    fn mappings(&mut self, mappings: &[pp::Mapping]) -> HashMap<u64, (i32, FrameType)> {
        let mut ids = HashMap::new();
        for m in mappings {
            let mut attribute_indices = Vec::new();
            if m.build_id != 0 {
                let build_id = string_value(self.text(m.build_id));
                attribute_indices.push(self.attribute(BUILD_ID, build_id));
            }
            let kind = if self.text(m.filename) == KERNEL_MAPPING {
                FrameType::Kernel
            } else {
                FrameType::Native
            };
            self.mappings.push(Mapping {
                memory_start: m.memory_start,
                memory_limit: m.memory_limit,
                file_offset: m.file_offset,
                filename_strindex: self.pprof_string(m.filename),
                attribute_indices,
            });
            ids.insert(m.id, (index(self.mappings.len() - 1), kind));
        }
        ids
    }

    /// pprof locations into the location table, each marked with its frame type; returns pprof
    /// id → index.
    fn locations(
        &mut self,
        locations: &[pp::Location],
        functions: &HashMap<u64, i32>,
        mappings: &HashMap<u64, (i32, FrameType)>,
    ) -> HashMap<u64, i32> {
        let mut ids = HashMap::new();
        for l in locations {
            let (mapping_index, kind) = mappings
                .get(&l.mapping_id)
                .copied()
                .unwrap_or((0, FrameType::Python));
            let frame_type = self.attribute(FRAME_TYPE, string_value(kind.name()));
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
                mapping_index,
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
            let (mut trace_id, mut span_id) = (None, None);
            for label in &s.label {
                let key = self.text(label.key).to_owned();
                // The trace and span (OTEP 4947) are the sample's link, not attributes.
                match key.as_str() {
                    "trace_id" => {
                        trace_id = hex_bytes::<16>(self.text(label.str));
                        continue;
                    }
                    "span_id" => {
                        span_id = hex_bytes::<8>(self.text(label.str));
                        continue;
                    }
                    _ => {}
                }
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
            // A span id without its trace (a damaged file) still links: an empty trace id.
            let link_index = match span_id {
                Some(s) => self.link(trace_id.unwrap_or_default(), s),
                None => 0,
            };
            out.push(Sample {
                stack_index: self.stack(stack),
                attribute_indices,
                link_index,
                values: vec![amount],
                timestamps_unix_nano: Vec::new(),
            });
        }
        out
    }

    /// The index of the link to span `span_id` of trace `trace_id`, added if new.
    fn link(&mut self, trace_id: Vec<u8>, span_id: Vec<u8>) -> i32 {
        let next = index(self.links.len());
        *self
            .link_ids
            .entry((trace_id.clone(), span_id.clone()))
            .or_insert_with(|| {
                self.links.push(Link { trace_id, span_id });
                next
            })
    }

    fn finish(self) -> ProfilesDictionary {
        ProfilesDictionary {
            mapping_table: self.mappings,
            location_table: self.locations,
            function_table: self.functions,
            link_table: self.links,
            string_table: self.strings,
            attribute_table: self.attributes,
            stack_table: self.stacks,
        }
    }
}

/// The `N` bytes of a `trace_id` (16) or `span_id` (8) label, `2 * N` hex digits; `None` if it
/// is not one (a damaged file).
fn hex_bytes<const N: usize>(text: &str) -> Option<Vec<u8>> {
    if text.len() != 2 * N || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..2 * N)
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok())
        .collect()
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
mod tests;
