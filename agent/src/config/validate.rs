//! Validation of the merged configuration: ranges, combinations, and that profiles go somewhere.

use std::time::Duration;

use super::values::{check_rate_hz, parse_log_filter};
use super::{invalid, ConfigError, Mode, ServiceConfig};

/// The shortest and longest profile window.
const INTERVAL: std::ops::RangeInclusive<Duration> =
    Duration::from_secs(1)..=Duration::from_secs(3600);

impl ServiceConfig {
    /// Checks every value; the first problem comes back as a one-line error naming its key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !INTERVAL.contains(&self.interval) {
            return Err(invalid("interval", "must be between 1s and 1h"));
        }
        check_rate_hz(self.rate_hz).map_err(|err| invalid("rate_hz", err))?;
        if self.off_cpu && self.mode == Mode::Userspace {
            return Err(invalid(
                "off_cpu",
                "needs mode ebpf or auto (the userspace sampler cannot see a thread block)",
            ));
        }
        if self.native && self.mode == Mode::Userspace {
            return Err(invalid(
                "native",
                "needs mode ebpf or auto (native stacks are copied by the BPF program)",
            ));
        }
        if let Some(dir) = self.debug_dirs.iter().find(|d| !d.is_absolute()) {
            return Err(invalid(
                "debug_dirs",
                format!(
                    "must be absolute paths, not {:?}",
                    dir.display().to_string()
                ),
            ));
        }
        if let Err(err) = parse_log_filter(&self.log) {
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
        for (key, url) in [
            ("pyroscope.url", &self.pyroscope_url),
            ("otlp.endpoint", &self.otlp_endpoint),
        ] {
            let Some(url) = url else { continue };
            let rest = url
                .strip_prefix("http://")
                .or_else(|| url.strip_prefix("https://"));
            match rest {
                Some(host) if !host.is_empty() && !host.starts_with('/') => {}
                _ => {
                    return Err(invalid(
                        key,
                        format!("must be an http:// or https:// URL with a host, not {url:?}"),
                    ))
                }
            }
        }
        if self.otlp_endpoint.is_none() && !self.otlp_headers.0.is_empty() {
            return Err(invalid(
                "otlp.headers",
                "needs otlp.endpoint (Pyroscope's own settings carry its credentials and tenant)",
            ));
        }
        if self.pyroscope_url.is_some() && self.otlp_endpoint.is_some() {
            return Err(invalid(
                "otlp.endpoint",
                "cannot be combined with pyroscope.url: one store takes the uploads (Pyroscope 1.20+ \
                 takes OTLP itself: pyroscope.api = \"otlp\")",
            ));
        }
        if self.output_dir.is_none() && self.pyroscope_url.is_none() && self.otlp_endpoint.is_none()
        {
            return Err(invalid(
                "output.dir",
                "set output.dir, pyroscope.url or otlp.endpoint, or profiles go nowhere",
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{err_line, Overrides};

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
                "rate_hz: must be between 1 and 10000",
            ),
            (
                Overrides {
                    rate_hz: Some(10_001),
                    ..dir()
                },
                "rate_hz: must be between 1 and 10000",
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
}
