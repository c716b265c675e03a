//! What pyagent takes from a target's environment, and nothing more: the variables that name
//! its service (`PYAGENT_SERVICE`, OpenTelemetry's `OTEL_SERVICE_NAME`) and a fixed set of
//! OpenTelemetry resource attributes from `OTEL_RESOURCE_ATTRIBUTES`. A process's environment
//! also holds its secrets (`OTEL_EXPORTER_OTLP_HEADERS`, database passwords): every other
//! variable, and every other attribute, is skipped as it is read and never kept.

use std::collections::BTreeMap;

use super::process_context::published_context;

/// The variable in a *target* process's environment that names its service.
pub const SERVICE_ENV: &str = "PYAGENT_SERVICE";

/// OpenTelemetry's service name variable.
const OTEL_SERVICE_NAME: &str = "OTEL_SERVICE_NAME";

/// OpenTelemetry's resource attributes variable: `key=value` pairs separated by commas, values
/// percent-encoded (the W3C baggage format).
const OTEL_RESOURCE_ATTRIBUTES: &str = "OTEL_RESOURCE_ATTRIBUTES";

/// The resource attributes kept, with the label each becomes on a profile (profile stores take
/// label names without dots). `deployment.environment.name` is the newer name of
/// `deployment.environment`; both give the same label.
pub const KEPT_ATTRIBUTES: [(&str, &str); 4] = [
    ("deployment.environment", "deployment_environment"),
    ("deployment.environment.name", "deployment_environment"),
    ("service.version", "service_version"),
    ("service.namespace", "service_namespace"),
];

/// Longest value kept from a target's environment; longer ones are cut (on a character
/// boundary): a label is not the place for kilobytes.
const MAX_VALUE: usize = 256;

/// The few things a target's environment says about it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessEnv {
    /// `PYAGENT_SERVICE`.
    pub pyagent_service: Option<String>,
    /// `OTEL_SERVICE_NAME`, else `service.name` in `OTEL_RESOURCE_ATTRIBUTES`.
    pub otel_service: Option<String>,
    /// The [`KEPT_ATTRIBUTES`] found, by label name.
    pub labels: BTreeMap<&'static str, String>,
    /// The process publishes its context (OTEP 4719), and what is above includes it.
    pub published: bool,
}

impl ProcessEnv {
    /// Reads `/proc/PID/environ` (empty when it cannot be read: the process exited, or is not
    /// ours to read), then the context the process publishes (OTEP 4719), whose `service.name`
    /// and attributes win over the environment's OpenTelemetry ones: the process says them
    /// about itself as it runs.
    pub fn of(pid: u32) -> ProcessEnv {
        let mut env = std::fs::read(format!("/proc/{pid}/environ"))
            .map(|bytes| ProcessEnv::parse(&bytes))
            .unwrap_or_default();
        env.look_for_published(pid);
        env
    }

    /// Reads the context process `pid` publishes (OTEP 4719), if it does now, over what its
    /// environment said; returns whether it was found. SDKs publish once they have started, often
    /// after the agent found the process: the caller looks again until it appears.
    pub fn look_for_published(&mut self, pid: u32) -> bool {
        let Some(published) = published_context(pid) else {
            return false;
        };
        self.otel_service = published.service.or(self.otel_service.take());
        self.labels.extend(published.labels);
        self.published = true;
        true
    }

    /// The environment block `environ` (`NAME=value` entries separated by NULs).
    pub fn parse(environ: &[u8]) -> ProcessEnv {
        let mut env = ProcessEnv::default();
        let mut resource_service = None;
        for entry in environ.split(|&b| b == 0) {
            let Some(eq) = entry.iter().position(|&b| b == b'=') else {
                continue;
            };
            let (name, value) = (&entry[..eq], &entry[eq + 1..]);
            let text = || bounded(&String::from_utf8_lossy(value));
            match name {
                n if n == SERVICE_ENV.as_bytes() => env.pyagent_service = non_empty(text()),
                n if n == OTEL_SERVICE_NAME.as_bytes() => env.otel_service = non_empty(text()),
                n if n == OTEL_RESOURCE_ATTRIBUTES.as_bytes() => {
                    for (key, value) in resource_attributes(&String::from_utf8_lossy(value)) {
                        if key == "service.name" {
                            resource_service = non_empty(value);
                        } else if let Some((_, label)) =
                            KEPT_ATTRIBUTES.iter().find(|(name, _)| *name == key)
                        {
                            env.labels.insert(label, value);
                        }
                    }
                }
                _ => {}
            }
        }
        // OpenTelemetry's SDKs let OTEL_SERVICE_NAME win over the attribute.
        env.otel_service = env.otel_service.or(resource_service);
        env
    }
}

/// The `key=value` pairs of `OTEL_RESOURCE_ATTRIBUTES`, values percent-decoded and bounded; a
/// pair without `=` is skipped.
fn resource_attributes(text: &str) -> impl Iterator<Item = (&str, String)> {
    text.split(',').filter_map(|pair| {
        let (key, value) = pair.split_once('=')?;
        Some((key.trim(), bounded(&percent_decode(value.trim()))))
    })
}

/// `%XX` escapes decoded; a malformed escape stays as it is (the W3C baggage encoding of
/// OpenTelemetry's variables).
pub fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn non_empty(text: String) -> Option<String> {
    let trimmed = text.trim();
    (!trimmed.is_empty()).then(|| trimmed.to_owned())
}

/// `text` cut to [`MAX_VALUE`] bytes on a character boundary.
fn bounded(text: &str) -> String {
    let mut end = text.len().min(MAX_VALUE);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn environ(vars: &[&str]) -> Vec<u8> {
        vars.join("\0").into_bytes()
    }

    #[test]
    fn only_the_naming_variables_and_kept_attributes_are_read() {
        let env = ProcessEnv::parse(&environ(&[
            "PATH=/usr/bin",
            "OTEL_EXPORTER_OTLP_HEADERS=authorization=secret",
            "OTEL_RESOURCE_ATTRIBUTES=service.name=from-attr,deployment.environment=prod, service.version=1.2%2C3,service.namespace=shop,secret.token=s3cret,broken",
            "DB_PASSWORD=hunter2",
            "PYAGENT_SERVICE=",
        ]));
        assert_eq!(
            env.pyagent_service, None,
            "an empty PYAGENT_SERVICE names nothing"
        );
        assert_eq!(env.otel_service.as_deref(), Some("from-attr"));
        let labels: Vec<(&str, &str)> = env.labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
        assert_eq!(
            labels,
            [
                ("deployment_environment", "prod"),
                ("service_namespace", "shop"),
                ("service_version", "1.2,3"),
            ]
        );
        let kept = format!("{env:?}");
        for secret in ["secret", "hunter2", "s3cret", "/usr/bin"] {
            assert!(!kept.contains(secret), "{secret} kept: {kept}");
        }
    }

    #[test]
    fn otel_service_name_wins_over_the_attribute() {
        let env = ProcessEnv::parse(&environ(&[
            "OTEL_RESOURCE_ATTRIBUTES=service.name=attr",
            "OTEL_SERVICE_NAME= checkout ",
            "PYAGENT_SERVICE=billing",
        ]));
        assert_eq!(env.otel_service.as_deref(), Some("checkout"));
        assert_eq!(env.pyagent_service.as_deref(), Some("billing"));
    }

    #[test]
    fn values_are_decoded_and_bounded() {
        assert_eq!(percent_decode("a%20b%zz%4"), "a b%zz%4");
        let long = format!("OTEL_SERVICE_NAME={}", "é".repeat(400));
        let env = ProcessEnv::parse(long.as_bytes());
        let name = env.otel_service.unwrap();
        assert!(name.len() <= MAX_VALUE && name.chars().all(|c| c == 'é'));
    }
}
