//! The file layer: the TOML file of `--config FILE`. Its shape is checked strictly (unknown keys are
//! errors: a typo must not silently fall back to a default); its values go through the same parsers
//! as the flags' and the environment's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::values::{parse_cpu_budget, parse_duration, parse_size, parse_socket_addr, ValueError};
use super::{invalid, ConfigError, Overrides};
use crate::discovery::service_name::ServiceNameRule;
use crate::export::sinks::Headers;

impl Overrides {
    /// The settings of a TOML document; `path` only names the file in errors.
    pub fn from_toml(text: &str, path: &Path) -> Result<Overrides, ConfigError> {
        let file: FileConfig = toml::from_str(text).map_err(|err| ConfigError::Parse {
            path: path.to_owned(),
            message: toml_message(text, &err),
        })?;
        file.into_overrides()
    }

    /// Reads and parses the TOML file at `path`.
    pub fn from_file(path: &Path) -> Result<Overrides, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Overrides::from_toml(&text, path)
    }
}

/// The TOML file's shape; every key optional, unknown keys rejected.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    interval: Option<NumberOrText>,
    rate_hz: Option<i64>,
    mode: Option<String>,
    off_cpu: Option<bool>,
    native: Option<bool>,
    debug_dirs: Option<Vec<PathBuf>>,
    #[serde(rename = "async")]
    async_tasks: Option<bool>,
    cpu_budget: Option<NumberOrText>,
    stall_after: Option<NumberOrText>,
    metrics_addr: Option<String>,
    log: Option<String>,
    output: Option<FileOutput>,
    pyroscope: Option<FilePyroscope>,
    otlp: Option<FileOtlp>,
    service_name: Option<Vec<ServiceNameRule>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileOutput {
    dir: Option<PathBuf>,
    max_bytes: Option<NumberOrText>,
    max_age: Option<NumberOrText>,
}

/// `[otlp]`: where OTLP profiles go, and the headers of each request.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileOtlp {
    endpoint: Option<String>,
    headers: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FilePyroscope {
    url: Option<String>,
    api: Option<String>,
    tenant: Option<String>,
    basic_auth_user: Option<String>,
    basic_auth_password: Option<String>,
    bearer_token: Option<String>,
}

/// A duration or a size as TOML allows it: `"10s"`, `10` or `1.5`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum NumberOrText {
    Integer(i64),
    Float(f64),
    Text(String),
}

impl NumberOrText {
    /// The value as the text a flag or a variable would hold, so that `interval = 2` and
    /// `interval = "2"` go through the same parser as `--interval 2` (a plain number is seconds,
    /// or bytes for a size; a negative one is refused there).
    fn into_text(self) -> String {
        match self {
            NumberOrText::Integer(n) => n.to_string(),
            // Rust prints floats without an exponent, in the digits the parsers read.
            NumberOrText::Float(x) => x.to_string(),
            NumberOrText::Text(text) => text,
        }
    }
}

/// `value` read by `parse`, an error naming `key`.
fn parse_key<T>(
    key: &str,
    value: Option<NumberOrText>,
    parse: fn(&str) -> Result<T, ValueError>,
) -> Result<Option<T>, ConfigError> {
    value
        .map(|v| parse(&v.into_text()).map_err(|err| invalid(key, err)))
        .transpose()
}

impl FileConfig {
    fn into_overrides(self) -> Result<Overrides, ConfigError> {
        let output = self.output.unwrap_or_default();
        let pyroscope = self.pyroscope.unwrap_or_default();
        let otlp = self.otlp.unwrap_or_default();
        let string = |value: Option<String>| value.filter(|v| !v.trim().is_empty());
        Ok(Overrides {
            interval: parse_key("interval", self.interval, parse_duration)?,
            rate_hz: self
                .rate_hz
                .map(|n| {
                    u32::try_from(n)
                        .map_err(|_| invalid("rate_hz", ValueError::Rate(n.to_string())))
                })
                .transpose()?,
            mode: self
                .mode
                .map(|m| m.parse().map_err(|msg| invalid("mode", msg)))
                .transpose()?,
            off_cpu: self.off_cpu,
            native: self.native,
            debug_dirs: self.debug_dirs,
            async_tasks: self.async_tasks,
            cpu_budget: parse_key("cpu_budget", self.cpu_budget, parse_cpu_budget)?,
            stall_after: parse_key("stall_after", self.stall_after, parse_duration)?,
            metrics_addr: self
                .metrics_addr
                .map(|a| parse_socket_addr(&a).map_err(|err| invalid("metrics_addr", err)))
                .transpose()?,
            log: string(self.log),
            output_dir: output.dir,
            output_max_bytes: parse_key("output.max_bytes", output.max_bytes, parse_size)?,
            output_max_age: parse_key("output.max_age", output.max_age, parse_duration)?,
            pyroscope_url: string(pyroscope.url),
            pyroscope_api: pyroscope
                .api
                .map(|a| a.parse().map_err(|msg| invalid("pyroscope.api", msg)))
                .transpose()?,
            pyroscope_tenant: string(pyroscope.tenant),
            pyroscope_basic_auth_user: string(pyroscope.basic_auth_user),
            pyroscope_basic_auth_password: string(pyroscope.basic_auth_password),
            pyroscope_bearer_token: string(pyroscope.bearer_token),
            otlp_endpoint: string(otlp.endpoint),
            otlp_headers: otlp.headers.map(otlp_headers).transpose()?,
            service_names: self.service_name,
        })
    }
}

/// `[otlp] headers`: a table of header names and values.
fn otlp_headers(table: BTreeMap<String, String>) -> Result<Headers, ConfigError> {
    if let Some(name) = table.keys().find(|name| !Headers::valid_name(name)) {
        return Err(invalid(
            "otlp.headers",
            format!("{name:?} is not a header name"),
        ));
    }
    if let Some((name, _)) = table.iter().find(|(_, v)| !Headers::valid_value(v)) {
        return Err(invalid(
            "otlp.headers",
            format!("{name}: the value has control characters"),
        ));
    }
    Ok(Headers(table.into_iter().collect()))
}

/// The TOML error on one line, with its line number.
fn toml_message(text: &str, err: &toml::de::Error) -> String {
    let message = err
        .message()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    match err.span() {
        Some(span) => {
            let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
            format!("line {line}: {message}")
        }
        None => message,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::{ServiceConfig, FILE_EXAMPLE};
    use crate::export::sinks::{Auth, UploadApi};
    use crate::profiler::Mode;

    #[test]
    fn file_is_parsed() {
        let layer = Overrides::from_toml(FILE_EXAMPLE, Path::new("pyagent.toml")).unwrap();
        let config = ServiceConfig::from_overrides(layer).unwrap();
        assert_eq!(config.interval, Duration::from_secs(30));
        assert_eq!(config.rate_hz, 49);
        assert_eq!(config.mode, Mode::Userspace);
        assert_eq!(config.log, "pyagent=debug");
        assert_eq!(
            config.output_dir.as_deref(),
            Some(Path::new("/var/lib/pyagent/profiles"))
        );
        assert_eq!(config.output_limits.max_bytes, 2 << 30);
        assert_eq!(
            config.output_limits.max_age,
            Duration::from_secs(2 * 86_400)
        );
        let pyroscope = config.pyroscope().unwrap();
        assert_eq!(pyroscope.url, "http://pyroscope:4040");
        assert_eq!(pyroscope.api, UploadApi::Ingest);
        assert_eq!(pyroscope.tenant.as_deref(), Some("team-a"));
        assert_eq!(
            pyroscope.auth,
            Some(Auth::Basic {
                user: "agent".into(),
                password: "from-file".into()
            })
        );
        assert_eq!(
            config.service_names,
            [ServiceNameRule {
                contains: "celery".into(),
                name: "billing-worker".into()
            }]
        );
    }

    /// `interval = "2"`, `2` and `"2s"` are the same two seconds, as `--interval 2` is.
    #[test]
    fn durations_take_plain_seconds_or_units() {
        let path = Path::new("pyagent.toml");
        for (text, expected) in [
            ("interval = \"2\"", Duration::from_secs(2)),
            ("interval = 2", Duration::from_secs(2)),
            ("interval = \"2s\"", Duration::from_secs(2)),
            ("interval = 2.5", Duration::from_millis(2500)),
            ("interval = \"500ms\"", Duration::from_millis(500)),
            ("interval = \"1m30s\"", Duration::from_secs(90)),
        ] {
            let layer = Overrides::from_toml(text, path).expect(text);
            assert_eq!(layer.interval, Some(expected), "{text}");
        }
        let layer = Overrides::from_toml("[output]\nmax_age = 86400\n", path).unwrap();
        assert_eq!(layer.output_max_age, Some(Duration::from_secs(86_400)));
        let layer = Overrides::from_toml("[output]\nmax_bytes = 4096\n", path).unwrap();
        assert_eq!(layer.output_max_bytes, Some(4096));
    }

    #[test]
    fn errors_are_one_line() {
        let path = Path::new("/etc/pyagent/pyagent.toml");
        for (text, expected) in [
            (
                "intervl = \"10s\"\n",
                "config file /etc/pyagent/pyagent.toml: line 1: unknown field `intervl`",
            ),
            (
                "[output]\ndir = \"/x\"\nmax_size = 3\n",
                "config file /etc/pyagent/pyagent.toml: line 3: unknown field `max_size`",
            ),
            ("interval = \"ten\"\n", "interval: not a duration"),
            ("interval = -5\n", "interval: not a duration"),
            (
                "[output]\nmax_bytes = \"1 potato\"\n",
                "output.max_bytes: not a size",
            ),
            ("mode = \"kernel\"\n", "mode: unknown mode \"kernel\""),
            (
                "[pyroscope]\napi = \"grpc\"\n",
                "pyroscope.api: must be ingest, push or otlp",
            ),
            (
                "rate_hz = \"fast\"\n",
                "config file /etc/pyagent/pyagent.toml: line 1: ",
            ),
            ("rate_hz = -3\n", "rate_hz: must be between 1 and 10000"),
        ] {
            let err = Overrides::from_toml(text, path).expect_err(text);
            let line = format!("{:#}", anyhow::Error::new(err));
            assert!(!line.contains('\n'), "not one line: {line}");
            assert!(line.starts_with(expected), "{line:?} vs {expected:?}");
        }
        let missing = Overrides::from_file(Path::new("/nonexistent/pyagent.toml")).unwrap_err();
        let line = format!("{:#}", anyhow::Error::new(missing));
        assert!(
            line.starts_with("cannot read config file /nonexistent/pyagent.toml: "),
            "{line}"
        );
    }
}
