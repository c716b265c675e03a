//! One layer of settings: what the file, the environment or the flags say, each setting optional.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::discovery::service_name::ServiceNameRule;
use crate::export::sinks::{Headers, UploadApi};
use crate::profiler::{CpuBudget, Mode};

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
    /// Off-CPU profiling (eBPF).
    pub off_cpu: Option<bool>,
    /// Native stacks (eBPF).
    pub native: Option<bool>,
    /// Where debug files are looked for (native stacks).
    pub debug_dirs: Option<Vec<PathBuf>>,
    /// asyncio task-aware stacks (CPython 3.14+).
    pub async_tasks: Option<bool>,
    /// The agent's CPU budget .
    pub cpu_budget: Option<CpuBudget>,
    /// How long a thread stays blocked in one stack before it is reported stalled (0: never).
    pub stall_after: Option<Duration>,
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
    pub pyroscope_api: Option<UploadApi>,
    /// `X-Scope-OrgID`.
    pub pyroscope_tenant: Option<String>,
    /// Basic-auth user.
    pub pyroscope_basic_auth_user: Option<String>,
    /// Basic-auth password.
    pub pyroscope_basic_auth_password: Option<String>,
    /// Bearer token.
    pub pyroscope_bearer_token: Option<String>,
    /// OTLP receiver's base URL.
    pub otlp_endpoint: Option<String>,
    /// Headers of every OTLP request.
    pub otlp_headers: Option<Headers>,
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
            off_cpu: self.off_cpu.or(lower.off_cpu),
            native: self.native.or(lower.native),
            debug_dirs: self.debug_dirs.or(lower.debug_dirs),
            async_tasks: self.async_tasks.or(lower.async_tasks),
            cpu_budget: self.cpu_budget.or(lower.cpu_budget),
            stall_after: self.stall_after.or(lower.stall_after),
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
            otlp_endpoint: self.otlp_endpoint.or(lower.otlp_endpoint),
            otlp_headers: self.otlp_headers.or(lower.otlp_headers),
            service_names: self.service_names.or(lower.service_names),
        }
    }

    /// The settings this layer sets that only a running service uses (uploads, the metrics
    /// endpoint, the window length, stall reports, the directory's bounds), by their config
    /// names: a one-off `--duration` run names them rather than ignoring them in silence.
    pub fn service_only_settings(&self) -> Vec<&'static str> {
        [
            ("interval", self.interval.is_some()),
            ("stall_after", self.stall_after.is_some()),
            ("metrics_addr", self.metrics_addr.is_some()),
            ("output.max_bytes", self.output_max_bytes.is_some()),
            ("output.max_age", self.output_max_age.is_some()),
            ("pyroscope.url", self.pyroscope_url.is_some()),
            ("otlp.endpoint", self.otlp_endpoint.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, set)| set.then_some(name))
        .collect()
    }
}
