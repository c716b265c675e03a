//! Where the store is (Pyroscope, or any OTLP profiles receiver), which API it is spoken to
//! through, with which credentials and headers, and how hard an upload tries (timeout, queue,
//! attempts, backoff).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use base64::Engine;

/// Which API to upload through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum UploadApi {
    /// `POST /ingest?name=...&format=pprof` with the gzipped pprof as body (every Pyroscope version).
    Ingest,
    /// `POST /push.v1.PusherService/Push` (Connect, JSON): Grafana Pyroscope's native API.
    #[default]
    Push,
    /// `POST /v1development/profiles`: OTLP profiles (protobuf, gzipped), to an OpenTelemetry
    /// Collector or to Pyroscope 1.20+ (see [`crate::export::otlp`]).
    Otlp,
}

impl UploadApi {
    /// `ingest`, `push` or `otlp`.
    pub fn name(self) -> &'static str {
        match self {
            UploadApi::Ingest => "ingest",
            UploadApi::Push => "push",
            UploadApi::Otlp => "otlp",
        }
    }

    /// The `sink` label of the upload's metrics: `pyroscope` (either of its own APIs) or `otlp`.
    pub fn sink_label(self) -> &'static str {
        match self {
            UploadApi::Ingest | UploadApi::Push => "pyroscope",
            UploadApi::Otlp => "otlp",
        }
    }
}

impl fmt::Display for UploadApi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for UploadApi {
    type Err = String;

    fn from_str(text: &str) -> Result<UploadApi, String> {
        match text {
            "ingest" => Ok(UploadApi::Ingest),
            "push" => Ok(UploadApi::Push),
            "otlp" => Ok(UploadApi::Otlp),
            _ => Err(format!("must be ingest, push or otlp, not {text:?}")),
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

/// Headers added to every upload request, as `name: value` pairs. Debug output shows the names
/// only: values are credentials.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Headers(pub Vec<(String, String)>);

impl fmt::Debug for Headers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(name, _)| format!("{name}: <redacted>")))
            .finish()
    }
}

impl Headers {
    /// Whether `value` can be sent as a header value (no control characters: a CR or LF would
    /// fail every request, and retrying would not help).
    pub fn valid_value(value: &str) -> bool {
        !value.chars().any(char::is_control)
    }

    /// Whether `name` can be sent as a header name (letters, digits, `-` and `_`).
    pub fn valid_name(name: &str) -> bool {
        !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b))
    }
}

impl FromStr for Headers {
    type Err = String;

    /// `name=value` pairs separated by commas, values percent-encoded, as
    /// `OTEL_EXPORTER_OTLP_HEADERS` writes them. An error names the pair by its position and
    /// never quotes a value: values are credentials.
    fn from_str(text: &str) -> Result<Headers, String> {
        let mut headers = Vec::new();
        let pairs = text.split(',').map(str::trim).filter(|p| !p.is_empty());
        for (i, pair) in pairs.enumerate() {
            let Some((name, value)) = pair.split_once('=') else {
                return Err(format!("header {} has no '=' (expected name=value)", i + 1));
            };
            let name = name.trim();
            if !Headers::valid_name(name) {
                return Err(format!("header {}: not a header name", i + 1));
            }
            let value = crate::discovery::process_env::percent_decode(value.trim());
            if !Headers::valid_value(&value) {
                return Err(format!("{name}: the value has control characters"));
            }
            headers.push((name.to_string(), value));
        }
        Ok(Headers(headers))
    }
}

/// How to reach the store and how hard to try.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadConfig {
    /// Base URL, `http://` or `https://`, e.g. `http://pyroscope:4040` or
    /// `http://collector:4318` (a trailing `/` is ignored; OTLP's path is added unless given).
    pub url: String,
    /// Which API.
    pub api: UploadApi,
    /// Credentials, if any.
    pub auth: Option<Auth>,
    /// More headers sent with every request (OTLP receivers' authentication); their values are
    /// secrets, never logged.
    pub headers: Headers,
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

impl UploadConfig {
    /// Defaults: 10 s timeout, 32 queued profiles, 4 attempts, backoff from 0.5 s up to 30 s.
    pub fn new(url: impl Into<String>, api: UploadApi) -> UploadConfig {
        UploadConfig {
            url: url.into(),
            api,
            auth: None,
            headers: Headers::default(),
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
        let mut config = UploadConfig::new("http://x", UploadApi::Push);
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

    #[test]
    fn headers_parse_as_otel_writes_them_and_never_print_their_values() {
        let headers: Headers = "authorization=Bearer%20s3cret%2Cx, x-scope-orgid = team-a,"
            .parse()
            .unwrap();
        assert_eq!(
            headers.0,
            [
                ("authorization".to_string(), "Bearer s3cret,x".to_string()),
                ("x-scope-orgid".to_string(), "team-a".to_string())
            ]
        );
        let shown = format!("{headers:?}");
        assert!(
            shown.contains("authorization") && !shown.contains("s3cret"),
            "{shown}"
        );
        // Errors never quote a value: a comma inside an unencoded token splits it.
        for bad in [
            "authorization=Bearer a,s3cret",
            "Authorization: Bearer s3cret",
            "bad name=s3cret",
        ] {
            let err = bad.parse::<Headers>().unwrap_err();
            assert!(!err.contains("s3cret"), "{err}");
        }
        assert!("x-token=a%0Ab".parse::<Headers>().is_err(), "a line break");
    }
}
