//! One upload request to the store, and what its failure means: which [`FailureReason`] it is counted
//! under, and whether another try could succeed.

use std::io::{Read, Write};

use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use flate2::Compression;
use prost::Message as _;
use prost_otlp::Message as _;

use super::{EncodedProfile, Shared, UploadApi};
use crate::export::metrics::FailureReason;
use crate::export::otlp::{self, PROFILES_PATH};
use crate::export::sinks::request::{self, INGEST_PATH, PUSH_PATH};

/// What one attempt ended with.
#[derive(Debug)]
pub(super) struct Failure {
    pub(super) reason: FailureReason,
    pub(super) retryable: bool,
    pub(super) detail: String,
}

impl Shared {
    /// Logs the first failure of each kind as a warning, later ones at debug level (all are counted).
    pub(super) fn log_failure(&self, failure: &Failure) {
        let first = self
            .logged
            .lock()
            .expect("failure log set poisoned")
            .insert(failure.reason);
        if first {
            tracing::warn!(
                "{} upload to {} failed ({}): {} (further failures of this kind are only counted)",
                self.config.api.sink_label(),
                self.base,
                failure.reason,
                failure.detail
            );
        } else {
            tracing::debug!(
                "{} upload failed: {}",
                self.config.api.sink_label(),
                failure.detail
            );
        }
    }

    /// One request; `Ok` on a 2xx answer.
    pub(super) fn send(&self, profile: &EncodedProfile) -> Result<(), Failure> {
        let config = &self.config;
        let result = match config.api {
            UploadApi::Ingest => {
                let mut request = self
                    .agent
                    .post(format!("{}{INGEST_PATH}", self.base))
                    .header("Content-Type", "application/octet-stream");
                for (key, value) in request::ingest_query(profile) {
                    request = request.query(key, value);
                }
                if let Some(auth) = &config.auth {
                    request = request.header("Authorization", auth.header_value());
                }
                if let Some(tenant) = &config.tenant {
                    request = request.header("X-Scope-OrgID", tenant);
                }
                request.send(&profile.bytes[..])
            }
            UploadApi::Push => {
                let body = request::push_body(
                    profile,
                    // A random (version 4) id, as Pyroscope's own clients give each sample.
                    &uuid::Uuid::new_v4().to_string(),
                );
                let mut request = self
                    .agent
                    .post(format!("{}{PUSH_PATH}", self.base))
                    .header("Content-Type", "application/json")
                    .header("Connect-Protocol-Version", "1");
                if let Some(auth) = &config.auth {
                    request = request.header("Authorization", auth.header_value());
                }
                if let Some(tenant) = &config.tenant {
                    request = request.header("X-Scope-OrgID", tenant);
                }
                request.send(body.as_bytes())
            }
            UploadApi::Otlp => {
                let body = otlp_body(profile)?;
                let url = if self.base.ends_with(PROFILES_PATH) {
                    self.base.clone()
                } else {
                    format!("{}{PROFILES_PATH}", self.base)
                };
                let mut request = self
                    .agent
                    .post(url)
                    .header("Content-Type", "application/x-protobuf")
                    .header("Content-Encoding", "gzip");
                if let Some(auth) = &config.auth {
                    request = request.header("Authorization", auth.header_value());
                }
                if let Some(tenant) = &config.tenant {
                    request = request.header("X-Scope-OrgID", tenant);
                }
                for (name, value) in &config.headers.0 {
                    request = request.header(name.as_str(), value.as_str());
                }
                request.send(&body[..])
            }
        };
        let mut response = result.map_err(classify)?;
        let status = response.status().as_u16();
        // Read the answer (bounded) so the connection can be reused, and to quote an error.
        let answer = response
            .body_mut()
            .with_config()
            .limit(64 * 1024)
            .read_to_vec()
            .unwrap_or_default();
        if (200..300).contains(&status) {
            return Ok(());
        }
        let detail = format!(
            "HTTP {status}: {}",
            String::from_utf8_lossy(&answer[..answer.len().min(200)]).trim()
        );
        Err(match status {
            // Request timeout and rate limiting: worth another try.
            408 | 429 => Failure {
                reason: FailureReason::Http4xx,
                retryable: true,
                detail,
            },
            400..=499 => Failure {
                reason: FailureReason::Http4xx,
                retryable: false,
                detail,
            },
            500..=599 => Failure {
                reason: FailureReason::Http5xx,
                retryable: true,
                detail,
            },
            // 1xx/3xx (redirects are followed by ureq): unexpected, treat as a transport problem.
            _ => Failure {
                reason: FailureReason::Io,
                retryable: true,
                detail,
            },
        })
    }
}

/// Largest pprof unpacked for an OTLP request: a window of a process is a few MB at most; a
/// damaged or hostile spill file must not take the agent's memory.
const MAX_UNPACKED: u64 = 256 * 1024 * 1024;

/// The gzipped OTLP request for `profile`, built from its pprof. A profile whose pprof does not
/// decode (a damaged spill file) can never be sent: not worth a retry.
fn otlp_body(profile: &EncodedProfile) -> Result<Vec<u8>, Failure> {
    let unusable = |detail: String| Failure {
        reason: FailureReason::Io,
        retryable: false,
        detail,
    };
    let mut raw = Vec::new();
    GzDecoder::new(&profile.bytes[..])
        .take(MAX_UNPACKED)
        .read_to_end(&mut raw)
        .map_err(|e| unusable(format!("cannot unpack the profile: {e}")))?;
    let pprof = ::pprof::protos::Profile::decode(raw.as_slice())
        .map_err(|e| unusable(format!("cannot decode the profile: {e}")))?;
    let encoded = otlp::request(&pprof, &profile.meta).encode_to_vec();
    let mut gzip = GzEncoder::new(Vec::with_capacity(encoded.len() / 4), Compression::fast());
    gzip.write_all(&encoded)
        .and_then(|()| gzip.finish())
        .map_err(|e| unusable(format!("cannot compress the request: {e}")))
}

/// Sorts a transport error into a failure reason; all of them are worth a retry.
fn classify(err: ureq::Error) -> Failure {
    use std::io::ErrorKind;
    let reason = match &err {
        ureq::Error::Timeout(_) => FailureReason::Timeout,
        ureq::Error::Io(io) => match io.kind() {
            ErrorKind::TimedOut | ErrorKind::WouldBlock => FailureReason::Timeout,
            ErrorKind::ConnectionRefused
            | ErrorKind::HostUnreachable
            | ErrorKind::NetworkUnreachable
            | ErrorKind::AddrNotAvailable => FailureReason::Refused,
            _ => FailureReason::Io,
        },
        ureq::Error::HostNotFound | ureq::Error::ConnectionFailed => FailureReason::Refused,
        _ => FailureReason::Io,
    };
    Failure {
        reason,
        retryable: true,
        detail: err.to_string(),
    }
}
