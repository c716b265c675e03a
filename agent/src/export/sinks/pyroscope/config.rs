//! Where the Pyroscope store is, which API it is spoken to through, with which credentials, and how
//! hard an upload tries (timeout, queue, attempts, backoff).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use base64::Engine;

/// Which Pyroscope API to upload through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum PyroscopeApi {
    /// `POST /ingest?name=...&format=pprof` with the gzipped pprof as body (every Pyroscope version).
    Ingest,
    /// `POST /push.v1.PusherService/Push` (Connect, JSON): Grafana Pyroscope's native API.
    #[default]
    Push,
}

impl PyroscopeApi {
    /// `ingest` or `push`.
    pub fn name(self) -> &'static str {
        match self {
            PyroscopeApi::Ingest => "ingest",
            PyroscopeApi::Push => "push",
        }
    }
}

impl fmt::Display for PyroscopeApi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for PyroscopeApi {
    type Err = String;

    fn from_str(text: &str) -> Result<PyroscopeApi, String> {
        match text {
            "ingest" => Ok(PyroscopeApi::Ingest),
            "push" => Ok(PyroscopeApi::Push),
            _ => Err(format!("must be ingest or push, not {text:?}")),
        }
    }
}

/// Credentials sent with every upload (Pyroscope itself has none; a proxy in front of it, or Grafana
/// Cloud, checks them).
#[derive(Clone, PartialEq, Eq)]
pub enum Auth {
    /// `Authorization: Basic base64(user:password)`.
    Basic {
        /// User name.
        user: String,
        /// Password.
        password: String,
    },
    /// `Authorization: Bearer <token>`.
    Bearer(String),
}

impl Auth {
    /// The `Authorization` header value.
    pub fn header_value(&self) -> String {
        match self {
            Auth::Basic { user, password } => format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
            ),
            Auth::Bearer(token) => format!("Bearer {token}"),
        }
    }
}

impl fmt::Debug for Auth {
    /// Never prints the secret.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Auth::Basic { user, .. } => {
                write!(f, "Basic {{ user: {user:?}, password: <redacted> }}")
            }
            Auth::Bearer(_) => f.write_str("Bearer(<redacted>)"),
        }
    }
}

/// How to reach Pyroscope and how hard to try.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PyroscopeConfig {
    /// Base URL, `http://` or `https://`, e.g. `http://pyroscope:4040` (a trailing `/` is ignored).
    pub url: String,
    /// Which API.
    pub api: PyroscopeApi,
    /// Credentials, if any.
    pub auth: Option<Auth>,
    /// `X-Scope-OrgID` for a multi-tenant Pyroscope.
    pub tenant: Option<String>,
    /// Limit on one whole request (connect, send, answer).
    pub timeout: Duration,
    /// Profiles waiting for upload before new ones are spilled.
    pub queue_capacity: usize,
    /// Attempts per profile, the first included.
    pub max_attempts: u32,
    /// Backoff bound after the first failure; doubles after each.
    pub backoff_initial: Duration,
    /// Largest backoff bound.
    pub backoff_max: Duration,
}

impl PyroscopeConfig {
    /// Defaults: 10 s timeout, 32 queued profiles, 4 attempts, backoff from 0.5 s up to 30 s.
    pub fn new(url: impl Into<String>, api: PyroscopeApi) -> PyroscopeConfig {
        PyroscopeConfig {
            url: url.into(),
            api,
            auth: None,
            tenant: None,
            timeout: Duration::from_secs(10),
            queue_capacity: 32,
            max_attempts: 4,
            backoff_initial: Duration::from_millis(500),
            backoff_max: Duration::from_secs(30),
        }
    }

    /// The upper bound of the (jittered) wait after failed attempt number `attempt` (1-based).
    pub(super) fn backoff_bound(&self, attempt: u32) -> Duration {
        let factor = 1u32 << attempt.saturating_sub(1).min(20);
        self.backoff_initial
            .saturating_mul(factor)
            .min(self.backoff_max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let mut config = PyroscopeConfig::new("http://x", PyroscopeApi::Push);
        config.backoff_initial = Duration::from_millis(100);
        config.backoff_max = Duration::from_millis(500);
        let bounds: Vec<u128> = (1..=5)
            .map(|a| config.backoff_bound(a).as_millis())
            .collect();
        assert_eq!(bounds, [100, 200, 400, 500, 500]);
    }

    #[test]
    fn auth_headers_and_redaction() {
        let basic = Auth::Basic {
            user: "u".into(),
            password: "p".into(),
        };
        assert_eq!(basic.header_value(), "Basic dTpw");
        assert_eq!(Auth::Bearer("t".into()).header_value(), "Bearer t");
        assert!(!format!("{basic:?}").contains("\"p\""));
        assert!(!format!("{:?}", Auth::Bearer("secret".into())).contains("secret"));
    }
}
