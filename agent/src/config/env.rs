//! The environment layer: the agent's own `PYAGENT_*` variables.

use std::path::PathBuf;

use super::values::{
    parse_bool, parse_cpu_budget, parse_duration, parse_size, parse_socket_addr, parse_whole_number,
};
use super::{invalid, ConfigError, Overrides};
use crate::discovery::service_name::ServiceNameRule;

/// Prefix of the agent's own environment variables.
pub const ENV_PREFIX: &str = "PYAGENT_";

impl Overrides {
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
            let named = |err| invalid(key, err);
            match key {
                "PYAGENT_INTERVAL" => layer.interval = Some(parse_duration(value).map_err(named)?),
                "PYAGENT_RATE_HZ" => {
                    layer.rate_hz = Some(parse_whole_number(value).map_err(named)?)
                }
                "PYAGENT_MODE" => layer.mode = Some(value.parse().map_err(|m| invalid(key, m))?),
                "PYAGENT_OFF_CPU" => layer.off_cpu = Some(parse_bool(value).map_err(named)?),
                "PYAGENT_NATIVE" => layer.native = Some(parse_bool(value).map_err(named)?),
                // `:`-separated, as gdb's debug-file-directory and PATH are.
                "PYAGENT_DEBUG_DIRS" => {
                    layer.debug_dirs = Some(
                        value
                            .split(':')
                            .filter(|d| !d.is_empty())
                            .map(PathBuf::from)
                            .collect(),
                    )
                }
                "PYAGENT_ASYNC" => layer.async_tasks = Some(parse_bool(value).map_err(named)?),
                "PYAGENT_CPU_BUDGET" => {
                    layer.cpu_budget = Some(parse_cpu_budget(value).map_err(named)?)
                }
                "PYAGENT_STALL_AFTER" => {
                    layer.stall_after = Some(parse_duration(value).map_err(named)?)
                }
                "PYAGENT_METRICS_ADDR" => {
                    layer.metrics_addr = Some(parse_socket_addr(value).map_err(named)?)
                }
                "PYAGENT_LOG" => layer.log = text(),
                "PYAGENT_OUTPUT_DIR" => layer.output_dir = Some(PathBuf::from(value)),
                "PYAGENT_OUTPUT_MAX_BYTES" => {
                    layer.output_max_bytes = Some(parse_size(value).map_err(named)?)
                }
                "PYAGENT_OUTPUT_MAX_AGE" => {
                    layer.output_max_age = Some(parse_duration(value).map_err(named)?)
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
                "PYAGENT_OTLP_ENDPOINT" => layer.otlp_endpoint = text(),
                "PYAGENT_OTLP_HEADERS" => {
                    layer.otlp_headers = Some(value.parse().map_err(|m| invalid(key, m))?)
                }
                "PYAGENT_SERVICE_NAMES" => layer.service_names = Some(parse_rules(key, value)?),
                // PYAGENT_SERVICE names a target, not the agent; others may belong to the CLI.
                _ => {}
            }
        }
        Ok(layer)
    }
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
    use std::time::Duration;

    use super::*;

    #[test]
    fn errors_name_the_variable() {
        for (key, value, expected) in [
            (
                "PYAGENT_INTERVAL",
                "10 parsecs",
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
    fn durations_take_plain_seconds_or_units() {
        for (value, expected) in [
            ("2", Duration::from_secs(2)),
            ("2s", Duration::from_secs(2)),
            ("500ms", Duration::from_millis(500)),
        ] {
            let layer = Overrides::from_env([("PYAGENT_INTERVAL", value)]).unwrap();
            assert_eq!(layer.interval, Some(expected), "{value}");
        }
        let layer = Overrides::from_env([("PYAGENT_OUTPUT_MAX_AGE", "3600")]).unwrap();
        assert_eq!(layer.output_max_age, Some(Duration::from_secs(3600)));
    }
}
