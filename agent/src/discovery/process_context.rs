//! OpenTelemetry's process context (OTEP 4719): a mapping a process publishes so that
//! out-of-process readers learn its resource (`service.name` and the like) without its
//! environment. The mapping is named `OTEL_CTX` (`/memfd:OTEL_CTX`, `[anon:OTEL_CTX]` or
//! `[anon_shmem:OTEL_CTX]` in `/proc/PID/maps`) and starts with a 32-byte header:
//!
//! | offset | field |
//! |---|---|
//! | 0 | `"OTEL_CTX"` |
//! | 8 | version, u32 (2) |
//! | 12 | payload size, u32 |
//! | 16 | published at, u64 CLOCK_BOOTTIME ns (0 while the writer updates) |
//! | 24 | payload address, u64 |
//!
//! The payload is a protobuf `ProcessContext { Resource resource = 1; repeated KeyValue
//! attributes = 2 }` (opentelemetry-proto 1.11; the crate in use carries 1.10, which has
//! `Resource` and `KeyValue` but not this wrapper, so the wrapper is declared here). A reader
//! copies the payload between two reads of the timestamp and retries when it moved.
//!
//! As with the environment, only the attributes of [`super::process_env::KEPT_ATTRIBUTES`] and
//! `service.name` are kept.

use std::collections::BTreeMap;

use opentelemetry_proto::tonic::common::v1::{any_value::Value, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost_otlp::Message;

use super::process_env::KEPT_ATTRIBUTES;
use crate::memory::{ProcessMemory, RemoteMemory, StructBytes};

/// The names the mapping may have in `/proc/PID/maps`.
const MAPPING_NAMES: [&str; 3] = [
    "/memfd:OTEL_CTX",
    "[anon:OTEL_CTX]",
    "[anon_shmem:OTEL_CTX]",
];

const SIGNATURE: &[u8; 8] = b"OTEL_CTX";
const VERSION: u32 = 2;
const HEADER_LEN: usize = 32;

/// Largest payload read: a resource is a few hundred bytes; anything bigger is not one.
const MAX_PAYLOAD: u32 = 64 * 1024;

/// Reads while the writer is updating, before giving up until the next look.
const ATTEMPTS: usize = 3;

/// `ProcessContext` of opentelemetry-proto 1.11 (`processcontext/v1development`).
#[derive(Clone, PartialEq, Message)]
// The derive names `::prost` by default, which is pprof's 0.12 here.
#[prost(prost_path = "::prost_otlp")]
struct ProcessContext {
    #[prost(message, optional, tag = "1")]
    resource: Option<Resource>,
    #[prost(message, repeated, tag = "2")]
    attributes: Vec<KeyValue>,
}

/// What a process publishes about itself, of what pyagent keeps.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PublishedContext {
    /// `service.name` of its resource.
    pub service: Option<String>,
    /// The kept attributes, by label name (as [`super::process_env::ProcessEnv::labels`]).
    pub labels: BTreeMap<&'static str, String>,
}

/// The context process `pid` publishes, if it publishes one and it reads consistently.
pub fn published_context(pid: u32) -> Option<PublishedContext> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    let address = context_mapping(&maps)?;
    let mut mem = RemoteMemory::new(pid);
    let payload = (0..ATTEMPTS).find_map(|_| read_payload(&mut mem, address))?;
    let context = ProcessContext::decode(payload.as_slice()).ok()?;
    Some(kept(&context))
}

/// The start of the `OTEL_CTX` mapping in a maps file.
fn context_mapping(maps: &str) -> Option<u64> {
    maps.lines().find_map(|line| {
        let path = line.split_whitespace().nth(5)?;
        if !MAPPING_NAMES.contains(&path) {
            return None;
        }
        let start = line.split('-').next()?;
        u64::from_str_radix(start, 16).ok()
    })
}

/// One consistent copy of the payload: the header is valid and its timestamp is the same
/// before and after the copy. `None` when it is not (being updated, or not a context).
fn read_payload(mem: &mut impl ProcessMemory, address: u64) -> Option<Vec<u8>> {
    let mut header = [0u8; HEADER_LEN];
    mem.read(address, &mut header).ok()?;
    let published = header.u64_at(16);
    let size = header.u32_at(12);
    if &header[..8] != SIGNATURE || header.u32_at(8) != VERSION || published == 0 {
        return None;
    }
    if size == 0 || size > MAX_PAYLOAD {
        return None;
    }
    let mut payload = vec![0u8; size as usize];
    mem.read(header.u64_at(24), &mut payload).ok()?;
    let again = mem.read_u64(address + 16).ok()?;
    (again == published).then_some(payload)
}

/// `service.name` and the kept attributes, from the resource and then the context's own
/// attributes (a later one wins).
fn kept(context: &ProcessContext) -> PublishedContext {
    let mut out = PublishedContext::default();
    let attributes = context
        .resource
        .iter()
        .flat_map(|r| &r.attributes)
        .chain(&context.attributes);
    for kv in attributes {
        let Some(Value::StringValue(value)) = kv.value.as_ref().and_then(|v| v.value.as_ref())
        else {
            continue;
        };
        let value = value.trim();
        if value.is_empty() || value.len() > 256 {
            continue;
        }
        if kv.key == "service.name" {
            out.service = Some(value.to_owned());
        } else if let Some((_, label)) = KEPT_ATTRIBUTES.iter().find(|(key, _)| *key == kv.key) {
            out.labels.insert(label, value.to_owned());
        }
    }
    out
}

/// The payload a process publishes with these resource attributes (string values): what tests
/// put in a target's `OTEL_CTX` mapping.
pub fn encode_payload(resource: Vec<(&str, &str)>) -> Vec<u8> {
    use opentelemetry_proto::tonic::common::v1::AnyValue;
    let attributes = resource
        .into_iter()
        .map(|(key, value)| KeyValue {
            key: key.to_owned(),
            value: Some(AnyValue {
                value: Some(Value::StringValue(value.to_owned())),
            }),
            ..KeyValue::default()
        })
        .collect();
    ProcessContext {
        resource: Some(Resource {
            attributes,
            ..Resource::default()
        }),
        attributes: Vec::new(),
    }
    .encode_to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryError;

    /// Memory of a fake process: a header at 0x1000, a payload at 0x2000; the timestamp moves
    /// on the first `moves` reads of it after the first.
    struct Fake {
        header: [u8; HEADER_LEN],
        payload: Vec<u8>,
        moves: usize,
    }

    impl ProcessMemory for Fake {
        fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
            match addr {
                0x1000 => buf.copy_from_slice(&self.header[..buf.len()]),
                0x1010 => {
                    let mut ts = self.header.u64_at(16);
                    if self.moves > 0 {
                        self.moves -= 1;
                        ts += 1;
                    }
                    buf.copy_from_slice(&ts.to_le_bytes()[..buf.len()]);
                }
                0x2000 => buf.copy_from_slice(&self.payload[..buf.len()]),
                _ => {
                    return Err(MemoryError::Fault {
                        pid: 1,
                        addr,
                        len: buf.len(),
                    })
                }
            }
            Ok(())
        }
    }

    fn fake(payload: Vec<u8>, moves: usize) -> Fake {
        let mut header = [0u8; HEADER_LEN];
        header[..8].copy_from_slice(SIGNATURE);
        header[8..12].copy_from_slice(&VERSION.to_le_bytes());
        header[12..16].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        header[16..24].copy_from_slice(&123_456u64.to_le_bytes());
        header[24..32].copy_from_slice(&0x2000u64.to_le_bytes());
        Fake {
            header,
            payload,
            moves,
        }
    }

    #[test]
    fn the_mapping_is_found_by_any_of_its_names() {
        let maps = "\
55d4c8a00000-55d4c8a01000 r--p 00000000 fd:01 131 /usr/bin/python3.12
7f1e2d000000-7f1e2d001000 rw-s 00000000 00:01 77 /memfd:OTEL_CTX (deleted)
";
        assert_eq!(context_mapping(maps), Some(0x7f1e2d000000));
        let anon = "7f00-8f00 rw-p 00000000 00:00 0 [anon:OTEL_CTX]\n";
        assert_eq!(context_mapping(anon), Some(0x7f00));
        assert_eq!(
            context_mapping("7f00-8f00 rw-p 00000000 00:00 0 [heap]\n"),
            None
        );
    }

    #[test]
    fn a_consistent_payload_is_read_and_only_kept_attributes_stay() {
        let payload = encode_payload(vec![
            ("service.name", "checkout"),
            ("service.version", "2.0"),
            ("db.password", "hunter2"),
        ]);
        let mut mem = fake(payload.clone(), 0);
        let read = read_payload(&mut mem, 0x1000).expect("consistent");
        let context = kept(&ProcessContext::decode(read.as_slice()).unwrap());
        assert_eq!(context.service.as_deref(), Some("checkout"));
        assert_eq!(
            context.labels.into_iter().collect::<Vec<_>>(),
            [("service_version", "2.0".to_string())]
        );
        // Updated while read: not taken this time.
        assert_eq!(read_payload(&mut fake(payload.clone(), 1), 0x1000), None);
        // Not a context: a wrong signature, a writer mid-update, an absurd size.
        let mut bad = fake(payload.clone(), 0);
        bad.header[0] = b'X';
        assert_eq!(read_payload(&mut bad, 0x1000), None);
        let mut updating = fake(payload.clone(), 0);
        updating.header[16..24].fill(0);
        assert_eq!(read_payload(&mut updating, 0x1000), None);
        let mut huge = fake(payload, 0);
        huge.header[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(read_payload(&mut huge, 0x1000), None);
    }
}
