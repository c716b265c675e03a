//! One upload request to the store, and what its failure means: which [`FailureReason`] it is counted
//! under, and whether another try could succeed.

use super::{EncodedProfile, PyroscopeApi, Shared};
use crate::export::metrics::FailureReason;
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
                "pyroscope upload to {} failed ({}): {} (further failures of this kind are only counted)",
                self.base,
                failure.reason,
                failure.detail
            );
        } else {
            tracing::debug!("pyroscope upload failed: {}", failure.detail);
        }
    }

    /// One request; `Ok` on a 2xx answer.
    pub(super) fn send(&self, profile: &EncodedProfile) -> Result<(), Failure> {
        let config = &self.config;
        let result = match config.api {
            PyroscopeApi::Ingest => {
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
            PyroscopeApi::Push => {
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
