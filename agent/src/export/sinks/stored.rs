//! A profile file that carries what is needed to upload it later.
//!
//! A spilled profile must reach the store once the store is back, possibly after a restart, so the file
//! alone has to say who and when it is about (service, pid, window, labels, sample rate): the upload
//! requests need all of it, and the pprof inside holds only part (labels only on samples, no service
//! when the labels lack one). The [`ProfileMeta`] travels as JSON in the gzip header's comment field
//! (RFC 1952 FCOMMENT): the bytes stay one gzipped pprof that `go tool pprof` and Pyroscope read as
//! before (gzip readers skip the comment), and every sink still gets the same bytes.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use flate2::read::GzDecoder;
use flate2::{Compression, GzBuilder};
use prost::Message;

use super::{EncodedProfile, ProfileMeta};
use crate::aggregate::ProfileWindow;

/// Why a file cannot be turned back into an uploadable profile.
#[derive(Debug, thiserror::Error)]
pub enum StoredProfileError {
    /// The file could not be read.
    #[error("cannot read the profile file")]
    Read(#[source] io::Error),
    /// The gzip header has no pyagent comment (written by an older version, or not by pyagent).
    #[error("the profile file carries no pyagent metadata")]
    NoMeta,
    /// The comment is not the JSON this module writes.
    #[error("the profile file's metadata is malformed")]
    BadMeta(#[source] serde_json::Error),
}

/// The gzip comment's JSON.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct StoredMeta {
    service: String,
    pid: u32,
    start_unix_ns: u64,
    end_unix_ns: u64,
    labels: BTreeMap<String, String>,
    sample_rate_hz: u32,
}

/// Encodes `window` as gzipped pprof whose gzip header carries `meta` and `sample_rate_hz`.
pub(super) fn encode(
    window: &ProfileWindow,
    meta: &ProfileMeta,
    sample_rate_hz: u32,
) -> io::Result<Vec<u8>> {
    let unix_ns = |time: std::time::SystemTime| {
        time.duration_since(UNIX_EPOCH).map_or(0, |since| {
            u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
        })
    };
    let stored = StoredMeta {
        service: meta.service.clone(),
        pid: meta.pid,
        start_unix_ns: unix_ns(meta.start),
        end_unix_ns: unix_ns(meta.end),
        labels: meta.labels.clone(),
        sample_rate_hz,
    };
    // JSON escapes control characters, so the comment holds no NUL (which would end it).
    let comment = serde_json::to_vec(&stored).map_err(io::Error::other)?;
    let raw = crate::export::pprof::build(window).encode_to_vec();
    // The fastest level, as uploads use: beside a thousand processes, encoding a profile a
    // window each is a large part of the agent's work, and a profile is small either way.
    let mut gzip = GzBuilder::new()
        .comment(comment)
        .write(Vec::new(), Compression::fast());
    gzip.write_all(&raw)?;
    gzip.finish()
}

/// The uploadable profile in `bytes` (a file [`encode`] wrote).
pub fn decode(bytes: Vec<u8>) -> Result<EncodedProfile, StoredProfileError> {
    let mut gzip = GzDecoder::new(bytes.as_slice());
    if gzip.header().is_none() {
        // The header is parsed on the first read.
        let mut first = [0u8; 1];
        gzip.read(&mut first).map_err(StoredProfileError::Read)?;
    }
    let comment = gzip
        .header()
        .and_then(|header| header.comment())
        .ok_or(StoredProfileError::NoMeta)?;
    let stored: StoredMeta =
        serde_json::from_slice(comment).map_err(StoredProfileError::BadMeta)?;
    let at = |ns: u64| UNIX_EPOCH + Duration::from_nanos(ns);
    Ok(EncodedProfile {
        meta: Arc::new(ProfileMeta {
            service: stored.service,
            pid: stored.pid,
            start: at(stored.start_unix_ns),
            end: at(stored.end_unix_ns),
            labels: stored.labels,
        }),
        bytes: bytes.into(),
        sample_rate_hz: stored.sample_rate_hz,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::tests::{frame, sample};
    use crate::aggregate::Aggregator;

    #[test]
    fn meta_survives_the_file_and_the_pprof_is_unchanged() {
        let mut agg = Aggregator::new(1_000_000_000 / 19);
        agg.set_label("host", "node-1");
        agg.add_count(
            &sample(7, 7, None, vec![frame("main", "/srv/app.py", 1, 1)]),
            3,
        );
        let mut window = agg.cut();
        window.start = UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        let meta = ProfileMeta::for_window("web \"api\"\n", &window);
        let bytes = encode(&window, &meta, 19).unwrap();

        let profile = decode(bytes.clone()).unwrap();
        assert_eq!(*profile.meta, meta);
        assert_eq!(profile.sample_rate_hz, 19);
        assert_eq!(&profile.bytes[..], &bytes[..]);
        // Still one gzipped pprof, the same one pprof::write makes.
        let mut raw = Vec::new();
        GzDecoder::new(bytes.as_slice())
            .read_to_end(&mut raw)
            .unwrap();
        assert_eq!(raw, crate::export::pprof::build(&window).encode_to_vec());

        // A plain gzipped pprof (an older spill) is refused, not misread.
        let mut plain = Vec::new();
        crate::export::pprof::write(&window, &mut plain).unwrap();
        assert!(matches!(decode(plain), Err(StoredProfileError::NoMeta)));
    }
}
