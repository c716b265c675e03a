//! Looking again, less and less often, for something a process may publish later (its
//! OpenTelemetry context, once its SDK starts): each look reads `/proc/PID/maps`, which costs
//! the kernel a walk of every mapping, so a host of processes that never publish must not pay
//! it at every profile window.

use std::time::{Duration, Instant};

/// When to look next: after `first`, then twice as long after each look that found nothing,
/// up to `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LookAgain {
    wait: Duration,
    max: Duration,
    next: Option<Instant>,
}

impl LookAgain {
    /// Due at once; after the first miss, due again `first` later.
    pub const fn new(first: Duration, max: Duration) -> LookAgain {
        LookAgain {
            wait: first,
            max,
            next: None,
        }
    }

    /// Whether a look is due at `now`.
    pub fn due(&self, now: Instant) -> bool {
        self.next.is_none_or(|next| now >= next)
    }

    /// A look at `now` found nothing: the next is due one wait later, and the wait doubles.
    pub fn missed(&mut self, now: Instant) {
        self.next = Some(now + self.wait);
        self.wait = (self.wait * 2).min(self.max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_miss_doubles_the_wait_up_to_the_bound() {
        let start = Instant::now();
        let mut look = LookAgain::new(Duration::from_secs(5), Duration::from_secs(15));
        assert!(look.due(start));
        let mut at = start;
        let mut waits = Vec::new();
        for _ in 0..4 {
            look.missed(at);
            let mut next = at;
            while !look.due(next) {
                next += Duration::from_secs(1);
            }
            waits.push((next - at).as_secs());
            at = next;
        }
        assert_eq!(waits, [5, 10, 15, 15]);
    }
}
