//! Where each thread's stack ends, learned from walks that were proven to be one instant's.
//!
//! Before 3.15 a thread state does not say which frame is its stack's first, so a walk the
//! target moved under can only be judged by its last frame. Ending at a frame that starts an
//! evaluation (3.11 `is_entry`, 3.12+ an entry frame on the C stack) is not enough: a popped
//! frame's `previous` may point into C stack memory that has been reused since, where a stale
//! entry frame with no caller is one chance in a few hundred away (seen on 3.13t: a collection
//! under `Node.__init__` read as the whole stack, `churn` and `<module>` lost). A thread's first
//! evaluation, though, stays where it is for as long as the thread runs Python: its address,
//! taken from a verified walk, is what a kept moved walk must end at.

use std::collections::HashMap;

use super::ThreadKey;

/// Threads remembered at most; past it the map starts again (a thread's bottom is learned
/// back from its next verified walk, and until then its moved walks are read again).
const MAX_THREADS: usize = 8192;

/// The bottom frame of each thread's last verified whole walk.
#[derive(Debug, Default)]
pub(in crate::unwind) struct ThreadBottoms {
    by_thread: HashMap<ThreadKey, u64>,
}

impl ThreadBottoms {
    /// A verified walk of `thread` ended at the frame at `addr`, its first evaluation.
    pub(in crate::unwind) fn learn(&mut self, thread: ThreadKey, addr: u64) {
        if self.by_thread.len() >= MAX_THREADS && !self.by_thread.contains_key(&thread) {
            self.by_thread.clear();
        }
        self.by_thread.insert(thread, addr);
    }

    /// Whether `addr` is where `thread`'s verified walks ended.
    pub(in crate::unwind) fn is_bottom(&self, thread: ThreadKey, addr: u64) -> bool {
        self.by_thread.get(&thread) == Some(&addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bottom_is_known_only_once_learned_and_follows_the_last_verified_walk() {
        let mut b = ThreadBottoms::default();
        let t = (0x1000, 7);
        assert!(!b.is_bottom(t, 0x20));
        b.learn(t, 0x20);
        assert!(b.is_bottom(t, 0x20));
        assert!(
            !b.is_bottom((0x1000, 8), 0x20),
            "another thread at the same state"
        );
        b.learn(t, 0x40);
        assert!(!b.is_bottom(t, 0x20));
        assert!(b.is_bottom(t, 0x40));
    }

    #[test]
    fn the_map_is_bounded() {
        let mut b = ThreadBottoms::default();
        for i in 0..(MAX_THREADS as u64 + 10) {
            b.learn((i, 1), i);
        }
        assert!(b.by_thread.len() <= MAX_THREADS);
        assert!(b.is_bottom((MAX_THREADS as u64 + 9, 1), MAX_THREADS as u64 + 9));
    }
}
