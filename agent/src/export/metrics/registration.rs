//! Creating a collector and registering it in one call: every family of the agent is made this way.

use prometheus::{IntCounter, IntCounterVec, IntGaugeVec, Opts, Registry};

/// Registers `collector` and returns it; names are fixed in `export::metrics`, so a clash is a bug.
pub(super) fn register<C: prometheus::core::Collector + Clone + 'static>(
    registry: &Registry,
    collector: C,
) -> C {
    registry
        .register(Box::new(collector.clone()))
        .expect("metric names in export::metrics are unique and valid");
    collector
}

pub(super) fn counter(registry: &Registry, name: &str, help: &str) -> IntCounter {
    register(
        registry,
        IntCounter::new(name, help).expect("valid counter name"),
    )
}

pub(super) fn counter_vec(
    registry: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> IntCounterVec {
    register(
        registry,
        IntCounterVec::new(Opts::new(name, help), labels).expect("valid counter vec"),
    )
}

pub(super) fn gauge_vec(
    registry: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> IntGaugeVec {
    register(
        registry,
        IntGaugeVec::new(Opts::new(name, help), labels).expect("valid gauge vec"),
    )
}
