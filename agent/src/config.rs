//! The continuous-profiling service's configuration, validated.
//!
//! In come up to three layers, each an [`Overrides`] (every setting optional): a TOML file (`--config
//! FILE`), the agent's `PYAGENT_*` environment variables, and the command-line flags (parsed by the binary,
//! which passes them here as an `Overrides`; this module knows nothing of clap). A later layer wins per
//! setting: file < environment < flags, over the defaults. Out comes one [`ServiceConfig`] of typed values,
//! or the first problem as a one-line [`ConfigError`] naming the key (`interval: must be between 1s and
//! 1h`). Unknown keys in the file are errors (a typo must not silently fall back to a default).
//!
//! | TOML key | environment | default |
//! | --- | --- | --- |
//! | `interval` | `PYAGENT_INTERVAL` | `10s` |
//! | `rate_hz` | `PYAGENT_RATE_HZ` | `19` |
//! | `mode` (`auto`, `ebpf`, `userspace`) | `PYAGENT_MODE` | `auto` |
//! | `metrics_addr` | `PYAGENT_METRICS_ADDR` | `127.0.0.1:9464` |
//! | `log` (tracing `EnvFilter`) | `PYAGENT_LOG` | `info` |
//! | `output.dir` | `PYAGENT_OUTPUT_DIR` | none |
//! | `output.max_bytes` (`1GiB`, `500MB`, bytes) | `PYAGENT_OUTPUT_MAX_BYTES` | `1GiB` |
//! | `output.max_age` | `PYAGENT_OUTPUT_MAX_AGE` | `7d` |
//! | `pyroscope.url` | `PYAGENT_PYROSCOPE_URL` | none |
//! | `pyroscope.api` (`push`, `ingest`) | `PYAGENT_PYROSCOPE_API` | `push` |
//! | `pyroscope.tenant` | `PYAGENT_PYROSCOPE_TENANT` | none |
//! | `pyroscope.basic_auth_user` | `PYAGENT_PYROSCOPE_BASIC_AUTH_USER` | none |
//! | `pyroscope.basic_auth_password` | `PYAGENT_PYROSCOPE_BASIC_AUTH_PASSWORD` | none |
//! | `pyroscope.bearer_token` | `PYAGENT_PYROSCOPE_BEARER_TOKEN` | none |
//! | `[[service_name]]` `contains`, `name` | `PYAGENT_SERVICE_NAMES` (`text=name,...`) | none |
//!
//! Durations are a number and a unit (`500ms`, `10s`, `5m`, `2h`, `7d`, combined as `1h30m`), or a
//! number of seconds in TOML. At least one of `output.dir` and `pyroscope.url` must be set. With both,
//! profiles are uploaded and the directory keeps what could not be (a spill directory).
//!
//! [`service_name`] is the rule that names a profiled process; [`ServiceConfig::service_name_for`] applies
//! the configured `[[service_name]]` rules first.

use std::collections::HashMap;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use serde::Deserialize;

use crate::export::sinks::{Auth, DirectoryLimits, PyroscopeApi, PyroscopeConfig};
pub use crate::sampler::host::Mode;

/// Prefix of the agent's own environment variables.
pub const ENV_PREFIX: &str = "PYAGENT_";

/// The variable in a *target* process's environment that names its service.
pub const SERVICE_ENV: &str = "PYAGENT_SERVICE";

/// An operator's rule: a process whose command line contains `contains` is the service `name`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceNameRule {
    /// Text to find in the command line (arguments joined by spaces).
    pub contains: String,
    /// The service name to give.
    pub name: String,
}

/// Why the configuration is unusable. Each message is one line and names the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The read error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML, has an unknown key or a value of the wrong type.
    #[error("config file {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message, with the line, on one line.
        message: String,
    },
    /// A setting has an invalid value.
    #[error("{key}: {message}")]
    Invalid {
        /// The TOML key (`output.max_age`) or environment variable (`PYAGENT_INTERVAL`).
        key: String,
        /// What is wrong.
        message: String,
    },
}

fn invalid(key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.to_owned(),
        message: message.into(),
    }
}

/// One layer of settings; `None` leaves the setting to a lower layer (or the default).
///
/// The binary fills one from its flags; [`Overrides::from_toml`] and [`Overrides::from_env`] make the
/// other two.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    /// Length of one profile window.
    pub interval: Option<Duration>,
    /// Samples per second per thread.
    pub rate_hz: Option<u32>,
    /// Sampling mode.
    pub mode: Option<Mode>,
    /// Address of the metrics server.
    pub metrics_addr: Option<SocketAddr>,
    /// Log filter.
    pub log: Option<String>,
    /// Directory for profile files.
    pub output_dir: Option<PathBuf>,
    /// Bound on the directory's size.
    pub output_max_bytes: Option<u64>,
    /// Bound on a file's age.
    pub output_max_age: Option<Duration>,
    /// Pyroscope base URL.
    pub pyroscope_url: Option<String>,
    /// Pyroscope API.
    pub pyroscope_api: Option<PyroscopeApi>,
    /// `X-Scope-OrgID`.
    pub pyroscope_tenant: Option<String>,
    /// Basic-auth user.
    pub pyroscope_basic_auth_user: Option<String>,
    /// Basic-auth password.
    pub pyroscope_basic_auth_password: Option<String>,
    /// Bearer token.
    pub pyroscope_bearer_token: Option<String>,
    /// Service-name rules (a layer that sets them replaces the whole list).
    pub service_names: Option<Vec<ServiceNameRule>>,
}

impl Overrides {
    /// `self` over `lower`: each setting from `self` if set, else from `lower`.
    pub fn over(self, lower: Overrides) -> Overrides {
        Overrides {
            interval: self.interval.or(lower.interval),
            rate_hz: self.rate_hz.or(lower.rate_hz),
            mode: self.mode.or(lower.mode),
            metrics_addr: self.metrics_addr.or(lower.metrics_addr),
            log: self.log.or(lower.log),
            output_dir: self.output_dir.or(lower.output_dir),
            output_max_bytes: self.output_max_bytes.or(lower.output_max_bytes),
            output_max_age: self.output_max_age.or(lower.output_max_age),
            pyroscope_url: self.pyroscope_url.or(lower.pyroscope_url),
            pyroscope_api: self.pyroscope_api.or(lower.pyroscope_api),
            pyroscope_tenant: self.pyroscope_tenant.or(lower.pyroscope_tenant),
            pyroscope_basic_auth_user: self
                .pyroscope_basic_auth_user
                .or(lower.pyroscope_basic_auth_user),
            pyroscope_basic_auth_password: self
                .pyroscope_basic_auth_password
                .or(lower.pyroscope_basic_auth_password),
            pyroscope_bearer_token: self.pyroscope_bearer_token.or(lower.pyroscope_bearer_token),
            service_names: self.service_names.or(lower.service_names),
        }
    }

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

    /// The settings of the `PYAGENT_*` variables among `vars` (others are ignored, as are empty values).
    pub fn from_env<I, K, V>(vars: I) -> Result<Overrides, ConfigError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let mut layer = Overrides::default();
        for (key, value) in vars {
            let (key, value) = (key.as_ref(), value.as_ref().trim());
            if !key.starts_with(ENV_PREFIX) || value.is_empty() {
                continue;
            }
            let text = || Some(value.to_owned());
            match key {
                "PYAGENT_INTERVAL" => layer.interval = Some(parse_duration(key, value)?),
                "PYAGENT_RATE_HZ" => layer.rate_hz = Some(parse_number(key, value)?),
                "PYAGENT_MODE" => layer.mode = Some(value.parse().map_err(|m| invalid(key, m))?),
                "PYAGENT_METRICS_ADDR" => layer.metrics_addr = Some(parse_addr(key, value)?),
                "PYAGENT_LOG" => layer.log = text(),
                "PYAGENT_OUTPUT_DIR" => layer.output_dir = Some(PathBuf::from(value)),
                "PYAGENT_OUTPUT_MAX_BYTES" => {
                    layer.output_max_bytes = Some(parse_size(key, value)?)
                }
                "PYAGENT_OUTPUT_MAX_AGE" => {
                    layer.output_max_age = Some(parse_duration(key, value)?)
                }
                "PYAGENT_PYROSCOPE_URL" => layer.pyroscope_url = text(),
                "PYAGENT_PYROSCOPE_API" => {
                    layer.pyroscope_api = Some(value.parse().map_err(|m| invalid(key, m))?)
                }
                "PYAGENT_PYROSCOPE_TENANT" => layer.pyroscope_tenant = text(),
                "PYAGENT_PYROSCOPE_BASIC_AUTH_USER" => layer.pyroscope_basic_auth_user = text(),
                "PYAGENT_PYROSCOPE_BASIC_AUTH_PASSWORD" => {
                    layer.pyroscope_basic_auth_password = text()
                }
                "PYAGENT_PYROSCOPE_BEARER_TOKEN" => layer.pyroscope_bearer_token = text(),
                "PYAGENT_SERVICE_NAMES" => layer.service_names = Some(parse_rules(key, value)?),
                // PYAGENT_SERVICE names a target, not the agent; others may belong to the CLI.
                _ => {}
            }
        }
        Ok(layer)
    }
}

/// The validated configuration of the service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceConfig {
    /// Length of one profile window (1 s to 1 h).
    pub interval: Duration,
    /// Samples per second per thread (1 to 1000; 19 by default, off the round numbers periodic work runs
    /// at).
    pub rate_hz: u32,
    /// Sampling mode (the sampler's own type).
    pub mode: Mode,
    /// Address of the metrics server.
    pub metrics_addr: SocketAddr,
    /// Log filter (tracing `EnvFilter` syntax).
    pub log: String,
    /// Directory for profile files (archive without Pyroscope, spill directory with it).
    pub output_dir: Option<PathBuf>,
    /// Bounds of the output directory.
    pub output_limits: DirectoryLimits,
    /// Pyroscope base URL; `None`: no upload.
    pub pyroscope_url: Option<String>,
    /// Pyroscope API.
    pub pyroscope_api: PyroscopeApi,
    /// Credentials for Pyroscope.
    pub pyroscope_auth: Option<Auth>,
    /// `X-Scope-OrgID` for Pyroscope.
    pub pyroscope_tenant: Option<String>,
    /// Operator rules naming services, tried in order.
    pub service_names: Vec<ServiceNameRule>,
}

impl Default for ServiceConfig {
    fn default() -> ServiceConfig {
        ServiceConfig {
            interval: Duration::from_secs(10),
            rate_hz: 19,
            mode: Mode::Auto,
            metrics_addr: crate::export::metrics::DEFAULT_METRICS_ADDR
                .parse()
                .expect("the default metrics address parses"),
            log: "info".to_owned(),
            output_dir: None,
            output_limits: DirectoryLimits::default(),
            pyroscope_url: None,
            pyroscope_api: PyroscopeApi::default(),
            pyroscope_auth: None,
            pyroscope_tenant: None,
            service_names: Vec::new(),
        }
    }
}

impl ServiceConfig {
    /// Loads the file (if any), then the `PYAGENT_*` variables of `env`, then `flags`, and validates.
    pub fn load<I, K, V>(
        file: Option<&Path>,
        env: I,
        flags: &Overrides,
    ) -> Result<ServiceConfig, ConfigError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let file = match file {
            Some(path) => Overrides::from_file(path)?,
            None => Overrides::default(),
        };
        let env = Overrides::from_env(env)?;
        ServiceConfig::from_overrides(flags.clone().over(env.over(file)))
    }

    /// The defaults with `layer` applied, validated.
    pub fn from_overrides(layer: Overrides) -> Result<ServiceConfig, ConfigError> {
        let defaults = ServiceConfig::default();
        let auth = match (
            layer.pyroscope_basic_auth_user,
            layer.pyroscope_basic_auth_password,
            layer.pyroscope_bearer_token,
        ) {
            (Some(_), _, Some(_)) => {
                return Err(invalid(
                    "pyroscope.bearer_token",
                    "cannot be combined with pyroscope.basic_auth_user",
                ))
            }
            (Some(user), Some(password), None) => Some(Auth::Basic { user, password }),
            (Some(_), None, None) => {
                return Err(invalid(
                    "pyroscope.basic_auth_password",
                    "required with pyroscope.basic_auth_user",
                ))
            }
            (None, Some(_), _) => {
                return Err(invalid(
                    "pyroscope.basic_auth_user",
                    "required with pyroscope.basic_auth_password",
                ))
            }
            (None, None, token) => token.map(Auth::Bearer),
        };
        let config = ServiceConfig {
            interval: layer.interval.unwrap_or(defaults.interval),
            rate_hz: layer.rate_hz.unwrap_or(defaults.rate_hz),
            mode: layer.mode.unwrap_or(defaults.mode),
            metrics_addr: layer.metrics_addr.unwrap_or(defaults.metrics_addr),
            log: layer.log.unwrap_or(defaults.log),
            output_dir: layer.output_dir,
            output_limits: DirectoryLimits {
                max_bytes: layer
                    .output_max_bytes
                    .unwrap_or(defaults.output_limits.max_bytes),
                max_age: layer
                    .output_max_age
                    .unwrap_or(defaults.output_limits.max_age),
            },
            pyroscope_url: layer.pyroscope_url,
            pyroscope_api: layer.pyroscope_api.unwrap_or(defaults.pyroscope_api),
            pyroscope_auth: auth,
            pyroscope_tenant: layer.pyroscope_tenant,
            service_names: layer.service_names.unwrap_or_default(),
        };
        config.validate()?;
        Ok(config)
    }

    /// Checks every value; the first problem comes back as a one-line error naming its key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(Duration::from_secs(1)..=Duration::from_secs(3600)).contains(&self.interval) {
            return Err(invalid("interval", "must be between 1s and 1h"));
        }
        if !(1..=1000).contains(&self.rate_hz) {
            return Err(invalid("rate_hz", "must be between 1 and 1000"));
        }
        if let Err(err) = tracing_subscriber::EnvFilter::try_new(&self.log) {
            return Err(invalid(
                "log",
                format!("invalid filter {:?}: {err}", self.log),
            ));
        }
        if self.output_limits.max_bytes < 1 << 20 {
            return Err(invalid("output.max_bytes", "must be at least 1MiB"));
        }
        if self.output_limits.max_age < Duration::from_secs(60) {
            return Err(invalid("output.max_age", "must be at least 1m"));
        }
        if let Some(dir) = &self.output_dir {
            if dir.as_os_str().is_empty() {
                return Err(invalid("output.dir", "must not be empty"));
            }
        }
        if let Some(url) = &self.pyroscope_url {
            let rest = url
                .strip_prefix("http://")
                .or_else(|| url.strip_prefix("https://"));
            match rest {
                Some(host) if !host.is_empty() && !host.starts_with('/') => {}
                _ => {
                    return Err(invalid(
                        "pyroscope.url",
                        format!("must be an http:// or https:// URL with a host, not {url:?}"),
                    ))
                }
            }
        }
        if self.output_dir.is_none() && self.pyroscope_url.is_none() {
            return Err(invalid(
                "output.dir",
                "set output.dir or pyroscope.url (or both), or profiles go nowhere",
            ));
        }
        if let Some(tenant) = &self.pyroscope_tenant {
            if tenant.is_empty() || tenant.chars().any(|c| c.is_control()) {
                return Err(invalid(
                    "pyroscope.tenant",
                    "must be non-empty, without control characters",
                ));
            }
        }
        for (i, rule) in self.service_names.iter().enumerate() {
            if rule.contains.is_empty() || rule.name.trim().is_empty() {
                return Err(invalid(
                    &format!("service_name[{i}]"),
                    "contains and name must not be empty",
                ));
            }
        }
        Ok(())
    }

    /// The Pyroscope sink's configuration, when uploads are configured.
    pub fn pyroscope(&self) -> Option<PyroscopeConfig> {
        let url = self.pyroscope_url.as_ref()?;
        let mut config = PyroscopeConfig::new(url.clone(), self.pyroscope_api);
        config.auth = self.pyroscope_auth.clone();
        config.tenant = self.pyroscope_tenant.clone();
        Some(config)
    }

    /// The service name of a process: its `PYAGENT_SERVICE`, else the first matching `[[service_name]]`
    /// rule, else [`service_name`]'s rule. The target's own variable wins because it is the most specific
    /// statement (set by whoever deployed that process).
    pub fn service_name_for(
        &self,
        pid: u32,
        env: &HashMap<String, String>,
        cmdline: &[String],
    ) -> String {
        if let Some(name) = service_from_env(env) {
            return name;
        }
        let joined = cmdline.join(" ");
        if let Some(rule) = self
            .service_names
            .iter()
            .find(|rule| joined.contains(&rule.contains))
        {
            return rule.name.trim().to_owned();
        }
        service_name(pid, env, cmdline)
    }
}

fn service_from_env(env: &HashMap<String, String>) -> Option<String> {
    env.get(SERVICE_ENV)
        .map(|name| name.trim())
        .filter(|name| !name.is_empty())
        .map(str::to_owned)
}

/// Names the service a Python process belongs to, from its environment (`/proc/PID/environ`) and
/// command line (`/proc/PID/cmdline`), in this order:
/// 1. `PYAGENT_SERVICE` in the process's environment;
/// 2. `python -m module ...`: the module (`python3 -m gunicorn app:app` is `gunicorn`);
/// 3. `python [options] script ...`: the script's file stem (`python3 /srv/billing/worker.py` is `worker`,
///    `python3 /usr/bin/celery -A app worker` is `celery`);
/// 4. the executable's name (`python3.12` for `python3 -c ...` or an interactive interpreter; `uwsgi`
///    for an embedding program; the first word of a title set with `setproctitle`);
/// 5. `pid-<pid>` when the command line is empty (a zombie, or unreadable).
///
/// Interpreter options are skipped as CPython parses them (`-u`, `-OO`, `-W arg`, `-Xdev`, `-I`, ...).
pub fn service_name(pid: u32, env: &HashMap<String, String>, cmdline: &[String]) -> String {
    if let Some(name) = service_from_env(env) {
        return name;
    }
    let Some(exe_arg) = cmdline.first() else {
        return format!("pid-{pid}");
    };
    // A title set by setproctitle replaces argv with one string ("gunicorn: worker [app]").
    let exe = exe_arg.split_whitespace().next().unwrap_or("");
    let exe = Path::new(exe)
        .file_name()
        .and_then(|name| name.to_str())
        .unwrap_or(exe)
        .trim_end_matches(':');
    if exe.is_empty() {
        return format!("pid-{pid}");
    }
    if !exe.starts_with("python") {
        return exe.to_owned();
    }
    match python_target(&cmdline[1..]) {
        Some(PythonTarget::Module(module)) if !module.is_empty() => module.to_owned(),
        Some(PythonTarget::Script(script)) => Path::new(script)
            .file_stem()
            .and_then(|stem| stem.to_str())
            .filter(|stem| !stem.is_empty())
            .unwrap_or(exe)
            .to_owned(),
        _ => exe.to_owned(),
    }
}

/// What a CPython command line runs.
enum PythonTarget<'a> {
    Module(&'a str),
    Script(&'a str),
    /// `-c`, `-` (stdin) or nothing (interactive).
    Other,
}

/// Walks CPython's options (`Python/getopt.c`, `Modules/main.c`) up to the first non-option.
fn python_target(args: &[String]) -> Option<PythonTarget<'_>> {
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let arg = arg.as_str();
        if arg == "--" {
            return args.next().map(|script| PythonTarget::Script(script));
        }
        if arg == "-" {
            return Some(PythonTarget::Other);
        }
        if let Some(long) = arg.strip_prefix("--") {
            // The only long option with a separate value.
            if long == "check-hash-based-pycs" {
                args.next();
            }
            continue;
        }
        let Some(flags) = arg.strip_prefix('-') else {
            return Some(PythonTarget::Script(arg));
        };
        for (i, flag) in flags.char_indices() {
            let rest = &flags[i + flag.len_utf8()..];
            match flag {
                'm' => {
                    let module = if rest.is_empty() {
                        args.next().map(String::as_str)?
                    } else {
                        rest
                    };
                    return Some(PythonTarget::Module(module));
                }
                'c' => return Some(PythonTarget::Other),
                // Options with a value: the rest of this argument, or the next one.
                'W' | 'X' => {
                    if rest.is_empty() {
                        args.next();
                    }
                    break;
                }
                _ => {}
            }
        }
    }
    None
}

/// The TOML file's shape; every key optional, unknown keys rejected.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    interval: Option<DurationValue>,
    rate_hz: Option<i64>,
    mode: Option<String>,
    metrics_addr: Option<String>,
    log: Option<String>,
    output: Option<FileOutput>,
    pyroscope: Option<FilePyroscope>,
    service_name: Option<Vec<ServiceNameRule>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileOutput {
    dir: Option<PathBuf>,
    max_bytes: Option<SizeValue>,
    max_age: Option<DurationValue>,
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

/// `"10s"` or `10` (seconds).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum DurationValue {
    Seconds(i64),
    Text(String),
}

impl DurationValue {
    fn parse(self, key: &str) -> Result<Duration, ConfigError> {
        match self {
            DurationValue::Seconds(s) => u64::try_from(s)
                .map(Duration::from_secs)
                .map_err(|_| invalid(key, "must not be negative")),
            DurationValue::Text(text) => parse_duration(key, &text),
        }
    }
}

/// `"1GiB"` or `1073741824` (bytes).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum SizeValue {
    Bytes(i64),
    Text(String),
}

impl SizeValue {
    fn parse(self, key: &str) -> Result<u64, ConfigError> {
        match self {
            SizeValue::Bytes(n) => {
                u64::try_from(n).map_err(|_| invalid(key, "must not be negative"))
            }
            SizeValue::Text(text) => parse_size(key, &text),
        }
    }
}

impl FileConfig {
    fn into_overrides(self) -> Result<Overrides, ConfigError> {
        let output = self.output.unwrap_or_default();
        let pyroscope = self.pyroscope.unwrap_or_default();
        let string = |value: Option<String>| value.filter(|v| !v.trim().is_empty());
        Ok(Overrides {
            interval: self.interval.map(|v| v.parse("interval")).transpose()?,
            rate_hz: self
                .rate_hz
                .map(|n| {
                    u32::try_from(n).map_err(|_| invalid("rate_hz", "must be between 1 and 1000"))
                })
                .transpose()?,
            mode: self
                .mode
                .map(|m| m.parse().map_err(|msg| invalid("mode", msg)))
                .transpose()?,
            metrics_addr: self
                .metrics_addr
                .map(|a| parse_addr("metrics_addr", &a))
                .transpose()?,
            log: string(self.log),
            output_dir: output.dir,
            output_max_bytes: output
                .max_bytes
                .map(|v| v.parse("output.max_bytes"))
                .transpose()?,
            output_max_age: output
                .max_age
                .map(|v| v.parse("output.max_age"))
                .transpose()?,
            pyroscope_url: string(pyroscope.url),
            pyroscope_api: pyroscope
                .api
                .map(|a| a.parse().map_err(|msg| invalid("pyroscope.api", msg)))
                .transpose()?,
            pyroscope_tenant: string(pyroscope.tenant),
            pyroscope_basic_auth_user: string(pyroscope.basic_auth_user),
            pyroscope_basic_auth_password: string(pyroscope.basic_auth_password),
            pyroscope_bearer_token: string(pyroscope.bearer_token),
            service_names: self.service_name,
        })
    }
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

fn parse_number<T: FromStr>(key: &str, text: &str) -> Result<T, ConfigError> {
    text.parse()
        .map_err(|_| invalid(key, format!("not a whole number: {text:?}")))
}

fn parse_addr(key: &str, text: &str) -> Result<SocketAddr, ConfigError> {
    text.parse().map_err(|_| {
        invalid(
            key,
            format!("not an address with a port (like 127.0.0.1:9464): {text:?}"),
        )
    })
}

/// `500ms`, `10s`, `5m`, `2h`, `7d`, or a sum such as `1h30m`.
pub fn parse_duration(key: &str, text: &str) -> Result<Duration, ConfigError> {
    let bad = || {
        invalid(
            key,
            format!("not a duration (like 500ms, 10s, 5m, 2h, 7d): {text:?}"),
        )
    };
    let mut total = Duration::ZERO;
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        if digits == 0 {
            return Err(bad());
        }
        let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let part = match &rest[..unit_len] {
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n.saturating_mul(60)),
            "h" => Duration::from_secs(n.saturating_mul(3600)),
            "d" => Duration::from_secs(n.saturating_mul(86_400)),
            _ => return Err(bad()),
        };
        total = total.saturating_add(part);
        rest = &rest[unit_len..];
    }
    Ok(total)
}

/// `1073741824`, `512MiB`, `1GiB`, `500MB`, `64KiB` (KB/MB/GB/TB are powers of 1000, KiB/... of 1024).
pub fn parse_size(key: &str, text: &str) -> Result<u64, ConfigError> {
    let bad = || {
        invalid(
            key,
            format!("not a size (like 1GiB, 500MB or a number of bytes): {text:?}"),
        )
    };
    let text = text.trim();
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    if digits == 0 {
        return Err(bad());
    }
    let n: u64 = text[..digits].parse().map_err(|_| bad())?;
    let factor: u64 = match text[digits..].trim() {
        "" | "B" => 1,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        _ => return Err(bad()),
    };
    n.checked_mul(factor).ok_or_else(bad)
}

/// `PYAGENT_SERVICE_NAMES`: `text=name` pairs separated by commas.
fn parse_rules(key: &str, text: &str) -> Result<Vec<ServiceNameRule>, ConfigError> {
    text.split(',')
        .filter(|pair| !pair.trim().is_empty())
        .map(|pair| match pair.split_once('=') {
            Some((contains, name)) if !contains.trim().is_empty() && !name.trim().is_empty() => {
                Ok(ServiceNameRule {
                    contains: contains.trim().to_owned(),
                    name: name.trim().to_owned(),
                })
            }
            _ => Err(invalid(
                key,
                format!("expected text=name pairs separated by commas, not {pair:?}"),
            )),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(args: &[&str]) -> Vec<String> {
        args.iter().map(|a| a.to_string()).collect()
    }

    fn no_env() -> HashMap<String, String> {
        HashMap::new()
    }

    fn err_line(result: Result<ServiceConfig, ConfigError>) -> String {
        let err = result.expect_err("the configuration must be refused");
        let line = format!("{:#}", anyhow::Error::new(err));
        assert!(!line.contains('\n'), "not one line: {line}");
        line
    }

    const FILE: &str = r#"
interval = "30s"
rate_hz = 49
mode = "userspace"
log = "pyagent=debug"

[output]
dir = "/var/lib/pyagent/profiles"
max_bytes = "2GiB"
max_age = "2d"

[pyroscope]
url = "http://pyroscope:4040"
api = "ingest"
tenant = "team-a"
basic_auth_user = "agent"
basic_auth_password = "from-file"

[[service_name]]
contains = "celery"
name = "billing-worker"
"#;

    #[test]
    fn defaults_need_a_destination() {
        let line = err_line(ServiceConfig::from_overrides(Overrides::default()));
        assert!(line.starts_with("output.dir: "), "{line}");
        let config = ServiceConfig::from_overrides(Overrides {
            output_dir: Some("/tmp/p".into()),
            ..Overrides::default()
        })
        .unwrap();
        assert_eq!(config.interval, Duration::from_secs(10));
        assert_eq!(config.rate_hz, 19);
        assert_eq!(config.mode, Mode::Auto);
        assert_eq!(config.metrics_addr.to_string(), "127.0.0.1:9464");
        assert_eq!(config.output_limits, DirectoryLimits::default());
        assert!(config.pyroscope().is_none());
    }

    #[test]
    fn file_is_parsed() {
        let layer = Overrides::from_toml(FILE, Path::new("pyagent.toml")).unwrap();
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
        assert_eq!(pyroscope.api, PyroscopeApi::Ingest);
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

    #[test]
    fn precedence_is_file_then_env_then_flags() {
        let dir = std::env::temp_dir().join(format!("pyagent-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("pyagent.toml");
        std::fs::write(&path, FILE).unwrap();
        let env = [
            ("PYAGENT_INTERVAL", "20s"),
            ("PYAGENT_RATE_HZ", "99"),
            ("PYAGENT_PYROSCOPE_BASIC_AUTH_PASSWORD", "from-env"),
            ("PYAGENT_OUTPUT_MAX_AGE", "1h30m"),
            ("HOME", "/root"),
            ("PYAGENT_SERVICE", "ignored: names targets, not the agent"),
        ];
        let flags = Overrides {
            interval: Some(Duration::from_secs(5)),
            metrics_addr: Some("0.0.0.0:9999".parse().unwrap()),
            ..Overrides::default()
        };
        let config = ServiceConfig::load(Some(&path), env, &flags).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        // Flags over env over file.
        assert_eq!(config.interval, Duration::from_secs(5));
        // Env over file.
        assert_eq!(config.rate_hz, 99);
        assert_eq!(config.output_limits.max_age, Duration::from_secs(5400));
        assert_eq!(
            config.pyroscope_auth,
            Some(Auth::Basic {
                user: "agent".into(),
                password: "from-env".into()
            })
        );
        // File over defaults.
        assert_eq!(config.mode, Mode::Userspace);
        assert_eq!(config.output_limits.max_bytes, 2 << 30);
        assert_eq!(config.metrics_addr.to_string(), "0.0.0.0:9999");
    }

    #[test]
    fn invalid_values_name_their_key() {
        let dir = || Overrides {
            output_dir: Some("/tmp/p".into()),
            ..Overrides::default()
        };
        let cases: Vec<(Overrides, &str)> = vec![
            (
                Overrides {
                    interval: Some(Duration::from_millis(500)),
                    ..dir()
                },
                "interval: must be between 1s and 1h",
            ),
            (
                Overrides {
                    interval: Some(Duration::from_secs(7200)),
                    ..dir()
                },
                "interval: must be between 1s and 1h",
            ),
            (
                Overrides {
                    rate_hz: Some(0),
                    ..dir()
                },
                "rate_hz: must be between 1 and 1000",
            ),
            (
                Overrides {
                    output_max_bytes: Some(1000),
                    ..dir()
                },
                "output.max_bytes: must be at least 1MiB",
            ),
            (
                Overrides {
                    pyroscope_url: Some("pyroscope:4040".into()),
                    ..dir()
                },
                "pyroscope.url: must be an http:// or https:// URL",
            ),
            (
                Overrides {
                    pyroscope_basic_auth_user: Some("u".into()),
                    ..dir()
                },
                "pyroscope.basic_auth_password: required",
            ),
            (
                Overrides {
                    pyroscope_basic_auth_user: Some("u".into()),
                    pyroscope_basic_auth_password: Some("p".into()),
                    pyroscope_bearer_token: Some("t".into()),
                    ..dir()
                },
                "pyroscope.bearer_token: cannot be combined",
            ),
            (
                Overrides {
                    log: Some("pyagent=loud".into()),
                    ..dir()
                },
                "log: invalid filter",
            ),
        ];
        for (layer, expected) in cases {
            let line = err_line(ServiceConfig::from_overrides(layer));
            assert!(line.starts_with(expected), "{line:?} vs {expected:?}");
        }
    }

    #[test]
    fn file_errors_are_one_line() {
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
            (
                "[output]\nmax_bytes = \"1 potato\"\n",
                "output.max_bytes: not a size",
            ),
            ("mode = \"kernel\"\n", "mode: unknown mode \"kernel\""),
            (
                "[pyroscope]\napi = \"grpc\"\n",
                "pyroscope.api: must be ingest or push",
            ),
            (
                "rate_hz = \"fast\"\n",
                "config file /etc/pyagent/pyagent.toml: line 1: ",
            ),
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

    #[test]
    fn env_errors_name_the_variable() {
        for (key, value, expected) in [
            (
                "PYAGENT_INTERVAL",
                "10 seconds",
                "PYAGENT_INTERVAL: not a duration",
            ),
            (
                "PYAGENT_RATE_HZ",
                "-1",
                "PYAGENT_RATE_HZ: not a whole number",
            ),
            (
                "PYAGENT_METRICS_ADDR",
                "localhost",
                "PYAGENT_METRICS_ADDR: not an address",
            ),
            (
                "PYAGENT_SERVICE_NAMES",
                "celery",
                "PYAGENT_SERVICE_NAMES: expected text=name",
            ),
        ] {
            let err = Overrides::from_env([(key, value)]).unwrap_err();
            assert!(err.to_string().starts_with(expected), "{err}");
        }
        let layer =
            Overrides::from_env([("PYAGENT_SERVICE_NAMES", "celery=worker, uwsgi=web")]).unwrap();
        assert_eq!(layer.service_names.unwrap().len(), 2);
    }

    #[test]
    fn durations_and_sizes() {
        assert_eq!(
            parse_duration("k", "500ms").unwrap(),
            Duration::from_millis(500)
        );
        assert_eq!(
            parse_duration("k", "1h30m").unwrap(),
            Duration::from_secs(5400)
        );
        assert_eq!(
            parse_duration("k", "7d").unwrap(),
            Duration::from_secs(604_800)
        );
        for bad in ["", "10", "s", "10x", "1.5s", "-1s"] {
            assert!(parse_duration("k", bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_size("k", "1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_size("k", "500MB").unwrap(), 500_000_000);
        assert_eq!(parse_size("k", "4096").unwrap(), 4096);
        for bad in ["", "GiB", "1 potato", "99999999999999TiB"] {
            assert!(parse_size("k", bad).is_err(), "{bad:?}");
        }
    }

    /// The shipped examples load: `deploy/pyagent.toml`, and the TOML in the Kubernetes ConfigMap.
    #[test]
    fn deploy_examples_are_valid() {
        let example = Path::new("deploy/pyagent.toml");
        let layer =
            Overrides::from_toml(include_str!("../../deploy/pyagent.toml"), example).unwrap();
        let config = ServiceConfig::from_overrides(layer).unwrap();
        assert_eq!(config.interval, Duration::from_secs(10));
        assert_eq!(config.rate_hz, 19);
        // As the .deb installs it: files only, no example naming rule.
        assert!(config.service_names.is_empty());
        assert_eq!(
            config.output_dir.as_deref(),
            Some(Path::new("/var/lib/pyagent/profiles"))
        );
        assert!(config.pyroscope().is_none());

        // The ConfigMap's `pyagent.toml: |` block: the lines indented by four spaces after it.
        let daemonset = include_str!("../../deploy/kubernetes/daemonset.yaml");
        let block: String = daemonset
            .lines()
            .skip_while(|line| line.trim() != "pyagent.toml: |")
            .skip(1)
            .take_while(|line| line.is_empty() || line.starts_with("    "))
            .map(|line| format!("{}\n", line.get(4..).unwrap_or("")))
            .collect();
        assert!(block.contains("[pyroscope]"), "{block}");
        let layer = Overrides::from_toml(&block, Path::new("daemonset.yaml")).unwrap();
        let config = ServiceConfig::from_overrides(layer).unwrap();
        assert_eq!(config.metrics_addr.to_string(), "0.0.0.0:9464");
    }

    #[test]
    fn service_name_rules() {
        let env = HashMap::from([(SERVICE_ENV.to_owned(), " billing ".to_owned())]);
        assert_eq!(service_name(1, &env, &cmd(&["python3", "x.py"])), "billing");
        for (args, expected) in [
            (&["python3", "-m", "gunicorn", "app:app"][..], "gunicorn"),
            (
                &["/usr/bin/python3.12", "-u", "-mhttp.server", "8000"],
                "http.server",
            ),
            (
                &[
                    "python3",
                    "-X",
                    "dev",
                    "-W",
                    "error",
                    "-OO",
                    "/srv/billing/worker.py",
                ],
                "worker",
            ),
            (
                &["python3", "-Wignore", "-Xfrozen_modules=off", "app.py"],
                "app",
            ),
            (
                &["python3", "-I", "-m", "celery", "-A", "tasks", "worker"],
                "celery",
            ),
            (
                &["/usr/bin/python3", "/usr/local/bin/celery", "-A", "app"],
                "celery",
            ),
            (
                &["python3", "--check-hash-based-pycs", "never", "run.py"],
                "run",
            ),
            (&["python3", "--", "-odd-name.py"], "-odd-name"),
            (&["python3", "-c", "import time; time.sleep(9)"], "python3"),
            (&["python3.13t"], "python3.13t"),
            (&["python3", "-"], "python3"),
            (&["uwsgi", "--ini", "app.ini"], "uwsgi"),
            (&["gunicorn: worker [app]"], "gunicorn"),
            (&["/opt/venv/bin/python", "-uc", "print(1)"], "python"),
            (&["python3", "/srv/app/"], "app"),
        ] {
            assert_eq!(service_name(7, &no_env(), &cmd(args)), expected, "{args:?}");
        }
        assert_eq!(service_name(7, &no_env(), &[]), "pid-7");

        let config = ServiceConfig {
            service_names: vec![ServiceNameRule {
                contains: "-A tasks".into(),
                name: "billing-worker".into(),
            }],
            ..ServiceConfig::default()
        };
        let celery = cmd(&["python3", "-m", "celery", "-A", "tasks", "worker"]);
        assert_eq!(
            config.service_name_for(1, &no_env(), &celery),
            "billing-worker"
        );
        assert_eq!(config.service_name_for(1, &env, &celery), "billing");
        assert_eq!(
            config.service_name_for(1, &no_env(), &cmd(&["python3", "x.py"])),
            "x"
        );
    }
}
