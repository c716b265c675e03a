//! The continuous-profiling service's configuration, validated.
//!
//! In come up to three layers, each an [`Overrides`] (every setting optional): a TOML file (`--config
//! FILE`, `file.rs`), the agent's `PYAGENT_*` environment variables (`env.rs`), and the command-line
//! flags (parsed by the binary, which passes them here as an `Overrides`; this module knows nothing of
//! clap). A later layer wins per setting: file < environment < flags, over the defaults. Out comes one
//! [`ServiceConfig`] of typed values (checked by `validate.rs`), or the first problem as a one-line
//! [`ConfigError`] naming the key (`interval: must be between 1s and 1h`). Unknown keys in the file
//! are errors (a typo must not silently fall back to a default).
//!
//! | TOML key | environment | default |
//! | --- | --- | --- |
//! | `interval` | `PYAGENT_INTERVAL` | `10s` |
//! | `rate_hz` | `PYAGENT_RATE_HZ` | `19` |
//! | `mode` (`auto`, `ebpf`, `userspace`) | `PYAGENT_MODE` | `auto` |
//! | `off_cpu` (`true`, `false`) | `PYAGENT_OFF_CPU` | `true` (`false` with mode `userspace`) |
//! | `native` (`true`, `false`): native and kernel frames (eBPF) | `PYAGENT_NATIVE` | `false` |
//! | `debug_dirs` (absolute paths): where stripped objects' debug files are looked for | `PYAGENT_DEBUG_DIRS` (`:`-separated) | `["/usr/lib/debug"]` |
//! | `async` (`true`, `false`): asyncio task stacks (CPython 3.14+) | `PYAGENT_ASYNC` | `false` |
//! | `cpu_budget` (`1%`, `0.5%`, `off`): the agent's CPU, BPF time included, per core | `PYAGENT_CPU_BUDGET` | `1%` |
//! | `stall_after` (`0`: never) | `PYAGENT_STALL_AFTER` | `30s` |
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
//! Durations, sizes and rates are read by [`values`], the parsers the flags use too: a plain number
//! is seconds (`interval = 2`, `"2"`, `"2s"` and `--interval 2` are the same), or a number and a unit
//! (`500ms`, `10s`, `5m`, `2h`, `7d`, combined as `1h30m`). At least one of `output.dir` and
//! `pyroscope.url` must be set. With both, profiles are uploaded and the directory keeps what could
//! not be (a spill directory).
//!
//! The `[[service_name]]` rules are applied by [`crate::discovery::service_name`].

mod env;
mod file;
mod keys;
mod overrides;
mod validate;
pub mod values;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use crate::discovery::service_name::ServiceNameRule;
use crate::export::sinks::{Auth, DirectoryLimits, Headers, UploadApi, UploadConfig};
pub use crate::profiler::{CoreShare, CpuBudget, Mode};
pub use crate::symbolize::native::DebugDirs;
pub use env::ENV_PREFIX;
pub use keys::{ConfigKey, KEYS};
pub use overrides::Overrides;
pub use values::{ValueError, RATE_HZ};

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

/// `key: message`, the error of a value that cannot be used.
fn invalid(key: &str, message: impl std::fmt::Display) -> ConfigError {
    ConfigError::Invalid {
        key: key.to_owned(),
        message: message.to_string(),
    }
}

/// The validated configuration of the service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceConfig {
    /// Length of one profile window (1 s to 1 h).
    pub interval: Duration,
    /// Samples per second per thread (in [`RATE_HZ`]; 19 by default, off the round numbers periodic
    /// work runs at).
    pub rate_hz: u32,
    /// Sampling mode (the sampler's own type).
    pub mode: Mode,
    /// Also profile the time threads spend blocked (eBPF only; on by default unless the mode is
    /// userspace).
    pub off_cpu: bool,
    /// Mixed stacks: the native and kernel frames between and below the Python ones (eBPF only;
    /// off by default).
    pub native: bool,
    /// Native stacks: the directories separate debug files of stripped objects are looked for
    /// in (`<dir>/.build-id/…`, and for `.gnu_debuglink`), under each process's root, then the
    /// host's.
    pub debug_dirs: DebugDirs,
    /// asyncio task-aware stacks and the `task_name` label for CPython 3.14+ processes (older
    /// ones are profiled without, said once per process); off by default.
    pub async_tasks: bool,
    /// How much of one core profiling may cost (the agent and its BPF programs): the sampling
    /// rate is lowered, never above `rate_hz`, to stay within it (`None`: `rate_hz` always).
    pub cpu_budget: CpuBudget,
    /// A thread blocked in one stack this long is reported once as stalled: a metric and a
    /// dump of its process next to the profiles (needs off-CPU profiling; zero: never).
    pub stall_after: Duration,
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
    pub pyroscope_api: UploadApi,
    /// Credentials for Pyroscope.
    pub pyroscope_auth: Option<Auth>,
    /// `X-Scope-OrgID` for Pyroscope.
    pub pyroscope_tenant: Option<String>,
    /// Base URL of an OTLP receiver (an OpenTelemetry Collector, Pyroscope 1.20+); `None`: no
    /// OTLP upload.
    pub otlp_endpoint: Option<String>,
    /// Headers of every OTLP request (authentication).
    pub otlp_headers: Headers,
    /// Operator rules naming services, tried in order.
    pub service_names: Vec<ServiceNameRule>,
}

impl Default for ServiceConfig {
    fn default() -> ServiceConfig {
        ServiceConfig {
            interval: Duration::from_secs(10),
            rate_hz: 19,
            mode: Mode::Auto,
            off_cpu: false,
            native: false,
            debug_dirs: DebugDirs::default(),
            async_tasks: false,
            cpu_budget: CpuBudget::default(),
            stall_after: Duration::from_secs(30),
            metrics_addr: crate::export::metrics::DEFAULT_METRICS_ADDR
                .parse()
                .expect("the default metrics address parses"),
            log: "info".to_owned(),
            output_dir: None,
            output_limits: DirectoryLimits::default(),
            pyroscope_url: None,
            pyroscope_api: UploadApi::default(),
            pyroscope_auth: None,
            pyroscope_tenant: None,
            otlp_endpoint: None,
            otlp_headers: Headers::default(),
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
        ServiceConfig::from_overrides(ServiceConfig::layers(file, env, flags)?)
    }

    /// The file, the environment and `flags`, merged (highest first), not validated yet.
    pub fn layers<I, K, V>(
        file: Option<&Path>,
        env: I,
        flags: &Overrides,
    ) -> Result<Overrides, ConfigError>
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
        Ok(flags.clone().over(env.over(file)))
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
            // On by default where it can run: its cost with 50 processes blocking a thousand
            // times a second is 0.8% of a core (`cargo xtask bench ebpf --only offcpu`).
            off_cpu: layer
                .off_cpu
                .unwrap_or(layer.mode.unwrap_or(defaults.mode) != Mode::Userspace),
            native: layer.native.unwrap_or(defaults.native),
            debug_dirs: layer.debug_dirs.map_or(defaults.debug_dirs, DebugDirs::new),
            async_tasks: layer.async_tasks.unwrap_or(defaults.async_tasks),
            cpu_budget: layer.cpu_budget.unwrap_or(defaults.cpu_budget),
            stall_after: layer.stall_after.unwrap_or(defaults.stall_after),
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
            otlp_endpoint: layer.otlp_endpoint,
            otlp_headers: layer.otlp_headers.unwrap_or_default(),
            service_names: layer.service_names.unwrap_or_default(),
        };
        config.validate()?;
        Ok(config)
    }

    /// The upload sink's configuration, when uploads are configured: to Pyroscope, or to an
    /// OTLP receiver (validation allows one of them).
    pub fn upload(&self) -> Option<UploadConfig> {
        self.pyroscope().or_else(|| self.otlp())
    }

    /// The upload to Pyroscope, when `pyroscope.url` is set.
    pub fn pyroscope(&self) -> Option<UploadConfig> {
        let url = self.pyroscope_url.as_ref()?;
        let mut config = UploadConfig::new(url.clone(), self.pyroscope_api);
        config.auth = self.pyroscope_auth.clone();
        config.tenant = self.pyroscope_tenant.clone();
        Some(config)
    }

    /// The upload to an OTLP receiver, when `otlp.endpoint` is set.
    pub fn otlp(&self) -> Option<UploadConfig> {
        let url = self.otlp_endpoint.as_ref()?;
        let mut config = UploadConfig::new(url.clone(), UploadApi::Otlp);
        config.headers = self.otlp_headers.clone();
        Some(config)
    }
}

/// A file setting most keys, shared by the tests of the layers.
#[cfg(test)]
const FILE_EXAMPLE: &str = r#"
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

/// The error of a refused configuration, as the binary prints it; it must be one line.
#[cfg(test)]
fn err_line(result: Result<ServiceConfig, ConfigError>) -> String {
    let err = result.expect_err("the configuration must be refused");
    let line = format!("{:#}", anyhow::Error::new(err));
    assert!(!line.contains('\n'), "not one line: {line}");
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn otlp_is_set_in_every_layer_and_excludes_pyroscope() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pyagent.toml");
        std::fs::write(
            &file,
            "[otlp]\nendpoint = \"http://collector:4318\"\nheaders = { authorization = \"Bearer a,b\" }\n",
        )
        .unwrap();
        let none: [(&str, &str); 0] = [];
        let config = ServiceConfig::load(Some(&file), none, &Overrides::default()).unwrap();
        let upload = config.upload().expect("an upload");
        assert_eq!(upload.api, UploadApi::Otlp);
        assert_eq!(upload.url, "http://collector:4318");
        assert_eq!(
            upload.headers.0,
            [("authorization".to_string(), "Bearer a,b".to_string())]
        );
        // The environment over the file, the flags over both.
        let env = [
            ("PYAGENT_OTLP_ENDPOINT", "http://env:4318"),
            ("PYAGENT_OTLP_HEADERS", "x-token=t1,x-tenant=a"),
        ];
        let config = ServiceConfig::load(Some(&file), env, &Overrides::default()).unwrap();
        assert_eq!(config.otlp_endpoint.as_deref(), Some("http://env:4318"));
        assert_eq!(config.otlp_headers.0.len(), 2);
        let flags = Overrides {
            otlp_endpoint: Some("https://flag:4318".into()),
            ..Overrides::default()
        };
        let config = ServiceConfig::load(Some(&file), env, &flags).unwrap();
        assert_eq!(config.upload().unwrap().url, "https://flag:4318");
        // One store takes the uploads.
        let both = Overrides {
            pyroscope_url: Some("http://pyroscope:4040".into()),
            ..flags
        };
        let line = err_line(ServiceConfig::load(Some(&file), env, &both));
        assert!(
            line.starts_with("otlp.endpoint: cannot be combined"),
            "{line}"
        );
        let bad = Overrides {
            otlp_endpoint: Some("collector:4318".into()),
            ..Overrides::default()
        };
        let line = err_line(ServiceConfig::from_overrides(bad));
        assert!(line.starts_with("otlp.endpoint: must be an http"), "{line}");
        let line = err_line(ServiceConfig::load(
            None::<&Path>,
            [("PYAGENT_OTLP_HEADERS", "no-value")],
            &Overrides::default(),
        ));
        assert!(line.starts_with("PYAGENT_OTLP_HEADERS: "), "{line}");
    }

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
    fn precedence_is_file_then_env_then_flags() {
        let dir = std::env::temp_dir().join(format!("pyagent-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("pyagent.toml");
        std::fs::write(&path, FILE_EXAMPLE).unwrap();
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
    fn the_cpu_budget_is_one_percent_by_default_and_set_in_every_layer() {
        let base = || Overrides {
            output_dir: Some("/tmp/p".into()),
            ..Overrides::default()
        };
        let default = ServiceConfig::from_overrides(base()).unwrap();
        assert_eq!(default.cpu_budget.to_string(), "1%");
        let file = Overrides::from_toml("cpu_budget = 0.5\n", Path::new("t.toml")).unwrap();
        assert_eq!(file.cpu_budget.map(|b| b.to_string()), Some("0.5%".into()));
        let file_text = Overrides::from_toml("cpu_budget = \"2%\"\n", Path::new("t.toml")).unwrap();
        assert_eq!(
            file_text.cpu_budget.map(|b| b.to_string()),
            Some("2%".into())
        );
        let env = Overrides::from_env([("PYAGENT_CPU_BUDGET", "off")]).unwrap();
        let config = ServiceConfig::from_overrides(env.over(file).over(base())).unwrap();
        assert_eq!(
            config.cpu_budget,
            CpuBudget::Off,
            "the environment wins over the file"
        );
        let refused = Overrides::from_toml("cpu_budget = \"200%\"\n", Path::new("t.toml"));
        let line = refused.expect_err("200% is refused").to_string();
        assert!(
            line.starts_with("cpu_budget: not a share of one core"),
            "{line}"
        );
    }

    #[test]
    fn native_is_a_switch_in_every_layer_off_by_default_and_needs_ebpf() {
        let base = || Overrides {
            output_dir: Some("/tmp/p".into()),
            ..Overrides::default()
        };
        let file = Overrides::from_toml("native = true\n", Path::new("t.toml")).unwrap();
        assert_eq!(file.native, Some(true));
        let env = Overrides::from_env([("PYAGENT_NATIVE", "false")]).unwrap();
        assert_eq!(env.native, Some(false));
        let config = ServiceConfig::from_overrides(env.over(file.clone()).over(base())).unwrap();
        assert!(!config.native, "the environment wins over the file");
        assert!(
            ServiceConfig::from_overrides(file.over(base()))
                .unwrap()
                .native
        );
        assert!(!ServiceConfig::from_overrides(base()).unwrap().native);
        let line = err_line(ServiceConfig::from_overrides(Overrides {
            native: Some(true),
            mode: Some(Mode::Userspace),
            ..base()
        }));
        assert!(line.starts_with("native: needs mode ebpf"), "{line}");
    }

    #[test]
    fn debug_dirs_are_set_in_every_layer_absolute_and_default_to_usr_lib_debug() {
        let base = || Overrides {
            output_dir: Some("/tmp/p".into()),
            ..Overrides::default()
        };
        let dirs = |config: &ServiceConfig| -> Vec<PathBuf> {
            config.debug_dirs.iter().map(Path::to_owned).collect()
        };
        let default = ServiceConfig::from_overrides(base()).unwrap();
        assert_eq!(dirs(&default), [PathBuf::from("/usr/lib/debug")]);
        let file = Overrides::from_toml(
            "debug_dirs = [\"/srv/debug\", \"/usr/lib/debug\"]\n",
            Path::new("t.toml"),
        )
        .unwrap();
        let config = ServiceConfig::from_overrides(file.clone().over(base())).unwrap();
        assert_eq!(
            dirs(&config),
            [PathBuf::from("/srv/debug"), PathBuf::from("/usr/lib/debug")]
        );
        let env = Overrides::from_env([("PYAGENT_DEBUG_DIRS", "/a:/b/c")]).unwrap();
        let config = ServiceConfig::from_overrides(env.over(file).over(base())).unwrap();
        assert_eq!(
            dirs(&config),
            [PathBuf::from("/a"), PathBuf::from("/b/c")],
            "the environment wins over the file"
        );
        // An empty list: no debug files are looked for.
        let none = Overrides::from_toml("debug_dirs = []\n", Path::new("t.toml")).unwrap();
        let config = ServiceConfig::from_overrides(none.over(base())).unwrap();
        assert!(dirs(&config).is_empty());
        // A relative directory would be relative to nothing in particular under a process's
        // root: refused.
        let relative = Overrides::from_toml("debug_dirs = [\"debug\"]\n", Path::new("t.toml"));
        let line = err_line(relative.and_then(|r| ServiceConfig::from_overrides(r.over(base()))));
        assert!(
            line.starts_with("debug_dirs: must be absolute paths, not \"debug\""),
            "{line}"
        );
    }

    #[test]
    fn async_is_a_switch_in_every_layer_off_by_default_in_every_mode() {
        let with_dir = || Overrides {
            output_dir: Some("/tmp/p".into()),
            ..Overrides::default()
        };
        let async_tasks = |toml: &str, env: &[(&str, &str)]| {
            let file = Overrides::from_toml(toml, Path::new("t.toml")).unwrap();
            let env = Overrides::from_env(env.iter().copied()).unwrap();
            let layers = env.over(file).over(with_dir());
            ServiceConfig::from_overrides(layers).unwrap().async_tasks
        };
        assert!(!async_tasks("", &[]), "off by default");
        assert!(async_tasks("async = true\n", &[]));
        assert!(async_tasks("", &[("PYAGENT_ASYNC", "true")]));
        let file_on = "async = true\n";
        assert!(
            !async_tasks(file_on, &[("PYAGENT_ASYNC", "false")]),
            "the environment wins over the file"
        );
        assert!(async_tasks("async = true\nmode = \"userspace\"\n", &[]));
        let err = Overrides::from_env([("PYAGENT_ASYNC", "maybe")]).expect_err("not a bool");
        assert!(err.to_string().starts_with("PYAGENT_ASYNC: "), "{err}");
    }

    #[test]
    fn off_cpu_is_a_switch_in_every_layer_and_needs_ebpf() {
        let base = || Overrides {
            output_dir: Some("/tmp/p".into()),
            ..Overrides::default()
        };
        let file = Overrides::from_toml("off_cpu = true\n", Path::new("t.toml")).unwrap();
        assert_eq!(file.off_cpu, Some(true));
        let env = Overrides::from_env([("PYAGENT_OFF_CPU", "no")]).unwrap();
        assert_eq!(env.off_cpu, Some(false));
        let config = ServiceConfig::from_overrides(env.over(file).over(base())).unwrap();
        assert!(!config.off_cpu, "the environment wins over the file");
        let line = err_line(
            Overrides::from_env([("PYAGENT_OFF_CPU", "maybe")]).map(|_| ServiceConfig::default()),
        );
        assert!(
            line.starts_with("PYAGENT_OFF_CPU: not true or false"),
            "{line}"
        );
        let line = err_line(ServiceConfig::from_overrides(Overrides {
            off_cpu: Some(true),
            mode: Some(Mode::Userspace),
            ..base()
        }));
        assert!(line.starts_with("off_cpu: needs mode ebpf"), "{line}");
        // Unset: on, unless the mode is userspace.
        assert!(ServiceConfig::from_overrides(base()).unwrap().off_cpu);
        let userspace = ServiceConfig::from_overrides(Overrides {
            mode: Some(Mode::Userspace),
            ..base()
        })
        .unwrap();
        assert!(!userspace.off_cpu);
    }

    #[test]
    fn stall_after_is_a_duration_in_every_layer() {
        let file = Overrides::from_toml("stall_after = \"40s\"\n", Path::new("t.toml")).unwrap();
        assert_eq!(file.stall_after, Some(Duration::from_secs(40)));
        let env = Overrides::from_env([("PYAGENT_STALL_AFTER", "0")]).unwrap();
        assert_eq!(env.stall_after, Some(Duration::ZERO), "0 turns it off");
        assert_eq!(
            ServiceConfig::default().stall_after,
            Duration::from_secs(30)
        );
        let line = err_line(
            Overrides::from_env([("PYAGENT_STALL_AFTER", "soon")])
                .map(|_| ServiceConfig::default()),
        );
        assert!(line.starts_with("PYAGENT_STALL_AFTER"), "{line}");
    }

    /// The shipped examples load: `deploy/pyagent.toml`, and the TOML in the Kubernetes ConfigMap.
    #[test]
    fn deploy_examples_are_valid() {
        let example = Path::new("deploy/pyagent.toml");
        let layer =
            Overrides::from_toml(include_str!("../../../deploy/pyagent.toml"), example).unwrap();
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
        let daemonset = include_str!("../../../deploy/kubernetes/daemonset.yaml");
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
}
