//! The targets the report checks pyagent against: one table, read by the targets section.

/// Where the targets were set.
pub const ISSUE: &str = "issue 5";

/// One target.
#[derive(Debug, Clone, Copy)]
pub enum Target {
    /// The target's median slowdown at `rate_hz`, percent, at most `max_pct`.
    Slowdown { rate_hz: u32, max_pct: f64 },
    /// The profile's largest error against the known split, percentage points, at most this.
    Accuracy { max_error_pp: f64 },
}

/// Every target, in the order the report lists them.
pub const TARGETS: &[Target] = &[
    Target::Slowdown {
        rate_hz: 99,
        max_pct: 0.5,
    },
    Target::Slowdown {
        rate_hz: 1000,
        max_pct: 2.0,
    },
    Target::Accuracy { max_error_pp: 1.5 },
];

/// The slowdown target at `rate_hz`, percent, if there is one.
pub fn slowdown_target(rate_hz: u32) -> Option<f64> {
    TARGETS.iter().find_map(|t| match *t {
        Target::Slowdown {
            rate_hz: r,
            max_pct,
        } if r == rate_hz => Some(max_pct),
        _ => None,
    })
}
