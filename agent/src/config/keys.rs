//! Every setting of the service as a table: its TOML key, its `PYAGENT_*` variable, its default
//! and what it does. The documentation's configuration reference is generated from [`KEYS`]
//! (`cargo xtask docs`), and the tests below hold the table to the parsers and the defaults, so
//! neither can drift from the other.

/// One setting of the service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfigKey {
    /// The TOML key (`output.max_age`; `[[service_name]]` for the rules).
    pub key: &'static str,
    /// The environment variable.
    pub env: &'static str,
    /// The default, as the variable would spell it (empty: none).
    pub default: &'static str,
    /// What else decides the default, if anything.
    pub default_note: &'static str,
    /// What it does, and the values it takes.
    pub what: &'static str,
    /// A value for the variable, for the tests.
    pub env_example: &'static str,
    /// A TOML document setting the key, for the tests.
    pub toml_example: &'static str,
}

/// Every setting, in the order the documentation lists them.
pub const KEYS: &[ConfigKey] = &[
    ConfigKey {
        key: "interval",
        env: "PYAGENT_INTERVAL",
        default: "10s",
        default_note: "",
        what: "Length of one profile window (1 s to 1 h): seconds (`10`) or with a unit (`10s`, `1m`).",
        env_example: "30s",
        toml_example: "interval = \"30s\"",
    },
    ConfigKey {
        key: "rate_hz",
        env: "PYAGENT_RATE_HZ",
        default: "19",
        default_note: "",
        what: "Samples per second (per CPU in eBPF mode, per thread in userspace mode), 1 to 10000; the CPU budget may lower it.",
        env_example: "49",
        toml_example: "rate_hz = 49",
    },
    ConfigKey {
        key: "mode",
        env: "PYAGENT_MODE",
        default: "auto",
        default_note: "",
        what: "Sampler: `auto` (eBPF if it loads, else userspace, saying why), `ebpf`, `userspace`.",
        env_example: "userspace",
        toml_example: "mode = \"userspace\"",
    },
    ConfigKey {
        key: "off_cpu",
        env: "PYAGENT_OFF_CPU",
        default: "true",
        default_note: "`false` with mode `userspace`",
        what: "Off-CPU profiling (eBPF): the time threads spend blocked, as an `off_cpu` sample type with a `wait` label.",
        env_example: "false",
        toml_example: "off_cpu = false",
    },
    ConfigKey {
        key: "native",
        env: "PYAGENT_NATIVE",
        default: "false",
        default_note: "",
        what: "Native stacks: the C, C++ and Rust frames between and below the Python ones, and kernel frames in eBPF mode.",
        env_example: "true",
        toml_example: "native = true",
    },
    ConfigKey {
        key: "debug_dirs",
        env: "PYAGENT_DEBUG_DIRS",
        default: "/usr/lib/debug",
        default_note: "",
        what: "Native stacks: directories of separate debug files for stripped objects (absolute paths; the variable separates them with `:`).",
        env_example: "/srv/debug:/usr/lib/debug",
        toml_example: "debug_dirs = [\"/srv/debug\"]",
    },
    ConfigKey {
        key: "async",
        env: "PYAGENT_ASYNC",
        default: "false",
        default_note: "",
        what: "asyncio task-aware stacks and the `task_name` label (CPython 3.14+).",
        env_example: "true",
        toml_example: "async = true",
    },
    ConfigKey {
        key: "cpu_budget",
        env: "PYAGENT_CPU_BUDGET",
        default: "1%",
        default_note: "",
        what: "How much of one core profiling may cost, the agent and its BPF programs together (`1%`, `0.5%`, `off`).",
        env_example: "0.5%",
        toml_example: "cpu_budget = \"0.5%\"",
    },
    ConfigKey {
        key: "stall_after",
        env: "PYAGENT_STALL_AFTER",
        default: "30s",
        default_note: "",
        what: "A thread blocked in one wait this long is reported as stalled (needs off-CPU; `0`: never).",
        env_example: "5s",
        toml_example: "stall_after = \"5s\"",
    },
    ConfigKey {
        key: "metrics_addr",
        env: "PYAGENT_METRICS_ADDR",
        default: "127.0.0.1:9464",
        default_note: "",
        what: "Address of the Prometheus `/metrics` endpoint.",
        env_example: "0.0.0.0:9464",
        toml_example: "metrics_addr = \"0.0.0.0:9464\"",
    },
    ConfigKey {
        key: "log",
        env: "PYAGENT_LOG",
        default: "info",
        default_note: "",
        what: "Log filter (tracing `EnvFilter` syntax), e.g. `pyagent=debug`.",
        env_example: "pyagent=debug",
        toml_example: "log = \"pyagent=debug\"",
    },
    ConfigKey {
        key: "output.dir",
        env: "PYAGENT_OUTPUT_DIR",
        default: "",
        default_note: "",
        what: "Directory for profile files: the archive, or with an upload target the spill directory. This or an upload target must be set.",
        env_example: "/var/lib/pyagent/profiles",
        toml_example: "[output]\ndir = \"/var/lib/pyagent/profiles\"",
    },
    ConfigKey {
        key: "output.max_bytes",
        env: "PYAGENT_OUTPUT_MAX_BYTES",
        default: "1GiB",
        default_note: "",
        what: "Bound on the output directory's size (`1GiB`, `500MB`, bytes).",
        env_example: "2GiB",
        toml_example: "[output]\nmax_bytes = \"2GiB\"",
    },
    ConfigKey {
        key: "output.max_age",
        env: "PYAGENT_OUTPUT_MAX_AGE",
        default: "7d",
        default_note: "",
        what: "Bound on a profile file's age.",
        env_example: "2d",
        toml_example: "[output]\nmax_age = \"2d\"",
    },
    ConfigKey {
        key: "pyroscope.url",
        env: "PYAGENT_PYROSCOPE_URL",
        default: "",
        default_note: "",
        what: "Grafana Pyroscope base URL to upload profiles to.",
        env_example: "http://pyroscope:4040",
        toml_example: "[pyroscope]\nurl = \"http://pyroscope:4040\"",
    },
    ConfigKey {
        key: "pyroscope.api",
        env: "PYAGENT_PYROSCOPE_API",
        default: "push",
        default_note: "",
        what: "Pyroscope API: `push`, `ingest` or `otlp` (Pyroscope 1.20+).",
        env_example: "ingest",
        toml_example: "[pyroscope]\napi = \"ingest\"",
    },
    ConfigKey {
        key: "pyroscope.tenant",
        env: "PYAGENT_PYROSCOPE_TENANT",
        default: "",
        default_note: "",
        what: "Tenant (`X-Scope-OrgID`).",
        env_example: "team-a",
        toml_example: "[pyroscope]\ntenant = \"team-a\"",
    },
    ConfigKey {
        key: "pyroscope.basic_auth_user",
        env: "PYAGENT_PYROSCOPE_BASIC_AUTH_USER",
        default: "",
        default_note: "",
        what: "Basic-auth user (with `pyroscope.basic_auth_password`).",
        env_example: "agent",
        toml_example: "[pyroscope]\nbasic_auth_user = \"agent\"",
    },
    ConfigKey {
        key: "pyroscope.basic_auth_password",
        env: "PYAGENT_PYROSCOPE_BASIC_AUTH_PASSWORD",
        default: "",
        default_note: "",
        what: "Basic-auth password (never logged).",
        env_example: "secret",
        toml_example: "[pyroscope]\nbasic_auth_password = \"secret\"",
    },
    ConfigKey {
        key: "pyroscope.bearer_token",
        env: "PYAGENT_PYROSCOPE_BEARER_TOKEN",
        default: "",
        default_note: "",
        what: "Bearer token (not with basic auth).",
        env_example: "token",
        toml_example: "[pyroscope]\nbearer_token = \"token\"",
    },
    ConfigKey {
        key: "otlp.endpoint",
        env: "PYAGENT_OTLP_ENDPOINT",
        default: "",
        default_note: "",
        what: "Base URL of an OTLP receiver (OpenTelemetry Collector, Pyroscope 1.20+) to send OTLP profiles to; not with `pyroscope.url`.",
        env_example: "http://collector:4318",
        toml_example: "[otlp]\nendpoint = \"http://collector:4318\"",
    },
    ConfigKey {
        key: "otlp.headers",
        env: "PYAGENT_OTLP_HEADERS",
        default: "",
        default_note: "",
        what: "Headers of every OTLP request: a table in the file, `name=value,...` in the variable (values never logged).",
        env_example: "authorization=Bearer x",
        toml_example: "[otlp]\nheaders = { authorization = \"Bearer x\" }",
    },
    ConfigKey {
        key: "[[service_name]]",
        env: "PYAGENT_SERVICE_NAMES",
        default: "",
        default_note: "",
        what: "Service-name rules, tried in order: a process whose command line contains `contains` is named `name` (the variable: `text=name,...`).",
        env_example: "celery=billing-worker",
        toml_example: "[[service_name]]\ncontains = \"celery\"\nname = \"billing-worker\"",
    },
];

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::KEYS;
    use crate::config::{Overrides, ServiceConfig};

    /// Each row's variable and TOML key are read by the parsers, and between them the rows set
    /// every setting an [`Overrides`] has: a new setting without a row fails here.
    #[test]
    fn every_setting_has_a_row_and_every_row_is_read() {
        let (mut from_env, mut from_file) = (Overrides::default(), Overrides::default());
        for key in KEYS {
            let env = Overrides::from_env([(key.env, key.env_example)]).expect(key.env);
            assert_ne!(env, Overrides::default(), "{} is not read", key.env);
            let file = Overrides::from_toml(key.toml_example, Path::new("pyagent.toml"))
                .unwrap_or_else(|err| panic!("{}: {err}", key.key));
            assert_ne!(file, Overrides::default(), "{} is not read", key.key);
            from_env = env.over(from_env);
            from_file = file.over(from_file);
        }
        for layer in [from_env, from_file] {
            let text = format!("{layer:?}");
            assert!(!text.contains("None"), "a setting has no row: {text}");
        }
    }

    /// Each default, given explicitly, changes nothing.
    #[test]
    fn defaults_are_the_services() {
        let base = [("PYAGENT_OUTPUT_DIR", "/tmp/pyagent-keys-test")];
        let defaults = ServiceConfig::from_overrides(Overrides::from_env(base).unwrap()).unwrap();
        for key in KEYS.iter().filter(|key| !key.default.is_empty()) {
            let layer = Overrides::from_env(base.into_iter().chain([(key.env, key.default)]))
                .expect(key.env);
            let config = ServiceConfig::from_overrides(layer).expect(key.env);
            assert_eq!(config, defaults, "{} = {}", key.env, key.default);
        }
    }
}
