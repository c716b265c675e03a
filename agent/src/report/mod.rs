//! Reports on profiles already written: the way back from [`crate::export`].
//!
//! In comes a pprof file as pyagent writes it (gzipped or not), decoded with the same generated
//! types the exporter encodes with ([`read_profile`]); out go answers computed from its samples
//! and labels, such as where each span's time went ([`spans`]), and their text or JSON
//! ([`render`]). Nothing is cached: each report reads its file once.

pub mod render;
pub mod spans;

use std::io::{self, Read};
use std::path::Path;

use ::pprof::protos::{Profile, ValueType};
use flate2::read::GzDecoder;
use prost::Message;

/// Why a file gives no report.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The file cannot be read (missing, a directory, no permission).
    #[error("cannot read the file")]
    Read(#[source] io::Error),
    /// It starts as gzip does, but does not decompress.
    #[error("not a gzipped pprof profile")]
    Gunzip(#[source] io::Error),
    /// Its bytes are not a `perftools.profiles.Profile`.
    #[error("not a pprof profile")]
    Decode(#[source] prost::DecodeError),
    /// Its bytes decode, but break a rule every pprof profile keeps.
    #[error("not a pprof profile ({why})")]
    NotPprof {
        /// The rule broken.
        why: String,
    },
    /// No sample type is a time, so there is no time to split.
    #[error("no sample type measures time (it has {found}); expected cpu or off_cpu in nanoseconds, as `pyagent record` writes")]
    NoTime {
        /// The sample types it has, `type/unit`, comma-separated.
        found: String,
    },
    /// Grouping by span was asked for, but no sample names a span.
    #[error("no sample has trace_id and span_id labels (the process published no OpenTelemetry thread context while recorded); use --by thread")]
    NoSpans,
}

/// gzip's first two bytes (RFC 1952).
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// The profile in the file at `path`, gzipped (as pyagent writes it) or not.
pub fn read_profile(path: &Path) -> Result<Profile, ReportError> {
    let bytes = std::fs::read(path).map_err(ReportError::Read)?;
    decode_profile(&bytes)
}

/// The profile in `bytes`, gzipped or not.
pub fn decode_profile(bytes: &[u8]) -> Result<Profile, ReportError> {
    let raw = if bytes.starts_with(&GZIP_MAGIC) {
        let mut out = Vec::new();
        GzDecoder::new(bytes)
            .read_to_end(&mut out)
            .map_err(ReportError::Gunzip)?;
        out
    } else {
        bytes.to_vec()
    };
    let profile = Profile::decode(raw.as_slice()).map_err(ReportError::Decode)?;
    check_profile(&profile)?;
    Ok(profile)
}

/// Protobuf decodes almost any short input (an empty file is an empty message): these are the
/// rules of profile.proto that a real profile keeps and a stray file does not.
fn check_profile(profile: &Profile) -> Result<(), ReportError> {
    let not = |why: &str| {
        Err(ReportError::NotPprof {
            why: why.to_owned(),
        })
    };
    if profile.string_table.first().map(String::as_str) != Some("") {
        return not("its string table does not start with the empty string");
    }
    if profile.sample_type.is_empty() {
        return not("it has no sample types");
    }
    let strings = profile.string_table.len();
    let in_table = |i: i64| usize::try_from(i).is_ok_and(|i| i < strings);
    let types_ok = profile
        .sample_type
        .iter()
        .all(|t| in_table(t.ty) && in_table(t.unit));
    let labels_ok = profile
        .sample
        .iter()
        .flat_map(|s| &s.label)
        .all(|l| in_table(l.key) && in_table(l.str));
    let functions_ok = profile
        .function
        .iter()
        .all(|f| in_table(f.name) && in_table(f.filename));
    if !(types_ok && labels_ok && functions_ok) {
        return not("a string index is past its string table");
    }
    Ok(())
}

/// Seconds per unit of a time unit as pprof names them; `None` for any other unit.
fn seconds_per_unit(unit: &str) -> Option<f64> {
    match unit {
        "nanoseconds" => Some(1e-9),
        "microseconds" => Some(1e-6),
        "milliseconds" => Some(1e-3),
        "seconds" => Some(1.0),
        _ => None,
    }
}

/// `type/unit` of a sample type, for messages.
fn type_name(profile: &Profile, t: &ValueType) -> String {
    format!("{}/{}", text(profile, t.ty), text(profile, t.unit))
}

/// String `i` of the profile's table ("" out of range; [`check_profile`] ruled that out for
/// the indices it reads).
fn text(profile: &Profile, i: i64) -> &str {
    usize::try_from(i)
        .ok()
        .and_then(|i| profile.string_table.get(i))
        .map_or("", String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stray_bytes_are_not_a_profile() {
        for bytes in [
            &b""[..],
            b"hello, world\n",
            b"\x1f\x8b\x08garbage",
            b"\x0a\x03abc",
        ] {
            let err = decode_profile(bytes).unwrap_err();
            assert!(
                matches!(
                    err,
                    ReportError::NotPprof { .. } | ReportError::Decode(_) | ReportError::Gunzip(_)
                ),
                "{bytes:?}: {err:?}"
            );
        }
    }

    #[test]
    fn a_missing_file_says_it_cannot_be_read() {
        let err = read_profile(Path::new("/nonexistent/pyagent/profile.pb.gz")).unwrap_err();
        assert!(matches!(err, ReportError::Read(_)), "{err:?}");
    }
}
