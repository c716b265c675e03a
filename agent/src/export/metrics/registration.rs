//! Creating a collector and registering it in one call: every family of the agent is made this way.
//! (The module is private to `export::metrics`, so `pub` here reaches no further.)

use prometheus::{IntCounter, IntCounterVec, IntGaugeVec, Opts, Registry};

/// Registers `collector` and returns it; names are fixed in `export::metrics`, so a clash is a bug.
pub fn register<C: prometheus::core::Collector + Clone + 'static>(
    registry: &Registry,
    collector: C,
) -> C {
    registry
        .register(Box::new(collector.clone()))
        .expect("metric names in export::metrics are unique and valid");
    collector
}

/// A registered counter without labels.
pub fn counter(registry: &Registry, name: &str, help: &str) -> IntCounter {
    register(
        registry,
        IntCounter::new(name, help).expect("valid counter name"),
    )
}

/// A registered counter family with `labels`.
pub fn counter_vec(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    register(
        registry,
        IntCounterVec::new(Opts::new(name, help), labels).expect("valid counter vec"),
    )
}

/// A registered gauge family with `labels`.
pub fn gauge_vec(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    register(
        registry,
        IntGaugeVec::new(Opts::new(name, help), labels).expect("valid gauge vec"),
    )
}
