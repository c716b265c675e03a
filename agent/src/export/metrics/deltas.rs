//! Counters fed from running totals: the agent's own statistics and the kernel's are totals
//! since their start, a Prometheus counter takes increments.

use std::collections::HashMap;
use std::hash::Hash;

/// The increase of a running total from `last` to `now`. A smaller `now` means the total
/// started again from zero (the BPF program was reloaded), so all of `now` is new: the same
/// reading Prometheus gives a counter that goes down. Totals fed here must otherwise only grow
/// (the host profiler keeps the totals of processes that exited for this reason).
pub fn increase(last: u64, now: u64) -> u64 {
    if now >= last {
        now - last
    } else {
        now
    }
}

/// The last value of each running total, by key, to turn the next value into an increment.
#[derive(Debug)]
pub struct Deltas<K> {
    last: HashMap<K, u64>,
}

impl<K> Default for Deltas<K> {
    fn default() -> Self {
        Deltas {
            last: HashMap::new(),
        }
    }
}

impl<K: Eq + Hash> Deltas<K> {
    /// The increase of total `key` since the last call with that key (all of it the first time).
    pub fn delta(&mut self, key: K, total: u64) -> u64 {
        let last = self.last.insert(key, total).unwrap_or(0);
        increase(last, total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn increments_per_key_and_a_restart_counts_from_zero() {
        let mut d = Deltas::default();
        assert_eq!(d.delta("a", 10), 10);
        assert_eq!(d.delta("b", 3), 3);
        assert_eq!(d.delta("a", 15), 5);
        assert_eq!(d.delta("a", 15), 0);
        assert_eq!(d.delta("a", 4), 4);
    }
}
