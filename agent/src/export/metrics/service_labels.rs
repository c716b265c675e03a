//! The cap on distinct `service` label values, so that a host running many services keeps a bounded
//! number of series.

use std::collections::HashSet;
use std::sync::Mutex;

use super::OTHER_SERVICE;

/// Caps the number of distinct `service` label values; services past the cap share [`OTHER_SERVICE`].
///
/// The first `max` services seen keep their own series for the agent's lifetime (a Prometheus series that
/// disappears and comes back under another name would break `rate()`), later ones are folded.
#[derive(Debug)]
pub struct ServiceLabels {
    max: usize,
    known: Mutex<HashSet<String>>,
}

impl ServiceLabels {
    /// A cap of `max` distinct services (plus `other`).
    pub fn new(max: usize) -> ServiceLabels {
        ServiceLabels {
            max,
            known: Mutex::new(HashSet::new()),
        }
    }

    /// The label value to use for `service`: itself while under the cap (or already known), else `other`.
    /// An empty name becomes `unknown`.
    pub fn label(&self, service: &str) -> String {
        let service = if service.is_empty() {
            "unknown"
        } else {
            service
        };
        if service == OTHER_SERVICE {
            return OTHER_SERVICE.to_owned();
        }
        let mut known = self.known.lock().expect("service label set poisoned");
        if known.contains(service) {
            return service.to_owned();
        }
        if known.len() < self.max {
            known.insert(service.to_owned());
            return service.to_owned();
        }
        OTHER_SERVICE.to_owned()
    }

    /// How many distinct services have their own label value.
    pub fn len(&self) -> usize {
        self.known.lock().expect("service label set poisoned").len()
    }

    /// Whether no service was seen yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
