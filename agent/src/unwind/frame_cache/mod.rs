//! The 3.15 frame cache: remembers each thread's last complete stack so the next sample only
//! reads the frames pushed since.
//!
//! Protocol (CPython 3.15 `last_profiled_frame`, gh-138122; sequence counter gh-151613): after
//! a walk we write the top frame's address into the thread's `last_profiled_frame` (the anchor).
//! When that frame leaves the chain, the interpreter moves the anchor to its caller and adds 1 to
//! `last_profiled_frame_seq`; it never touches the anchor otherwise. So if the next sample finds
//! the anchor at position *i* of our cached stack, exactly *i* cached frames were popped iff
//! `seq == cached_seq + i`; any other value (a reused frame address, a generator resumed under
//! another caller, a foreign writer) is a miss, never a spliced chain (the ABA problem).

// foldhash: these maps are looked up several times per sample, keyed by addresses.
pub(in crate::unwind) mod anchor;

use foldhash::HashMap;

use crate::symbolize::{Frame, FrameKind};

/// Identifies a thread across samples: its `PyThreadState` address and native thread id
/// (either alone can be reused).
pub type ThreadKey = (u64, u32);

/// A frame in a cached stack: the frame's address (0 for pseudo-frames) and its symbol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedFrame {
    /// `_PyInterpreterFrame` address, 0 for `<native>`
    pub addr: u64,
    /// the symbolized frame
    pub frame: Frame,
}

/// One frame of the walked chain, reported or not (a C-level entry frame, the base frame, an
/// `__init__` shim): the interpreter moves the anchor through every one of them, one sequence
/// step each, so the arithmetic counts them all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Link {
    /// `_PyInterpreterFrame` address
    addr: u64,
    /// where the stored frames below this one start
    tail: usize,
}

/// A stored stack: the reported frames, the chain they were walked from, and the sequence the
/// walk read.
#[derive(Debug)]
struct Stored {
    seq: u64,
    frames: Vec<CachedFrame>,
    chain: Vec<Link>,
}

impl Stored {
    /// Where `anchor` sits in the chain, if the sequence proves the frames above it were
    /// popped: exactly one step per chain frame above it.
    fn vouched(&self, anchor: u64, seq: u64) -> Option<usize> {
        let i = self.chain.iter().position(|l| l.addr == anchor)?;
        (self.seq.wrapping_add(i as u64) == seq).then_some(i)
    }

    /// The frames below chain position `i`.
    fn frames_below(&self, i: usize) -> &[CachedFrame] {
        &self.frames[self.chain[i].tail..]
    }

    /// The chain below position `i`, as addresses.
    fn chain_below(&self, i: usize) -> impl Iterator<Item = u64> + '_ {
        self.chain[i + 1..].iter().map(|l| l.addr)
    }
}

/// Links `chain` (every walked frame address, innermost first) to `frames` (the reported
/// ones, in the same order, with pseudo-frames at address 0 between them).
fn link_chain(frames: &[CachedFrame], chain: impl Iterator<Item = u64>) -> Vec<Link> {
    let mut next = 0;
    chain
        .map(|addr| {
            let real = frames[next..].iter().position(|f| f.addr != 0);
            if let Some(k) = real.filter(|&k| frames[next + k].addr == addr) {
                next += k + 1;
            }
            Link { addr, tail: next }
        })
        .collect()
}

#[derive(Debug)]
struct Entry {
    current: Stored,
    /// The stack stored before this one. A walk taken by someone else (the BPF program) in the
    /// instant before our anchor write still describes that one.
    previous: Option<Stored>,
    seen: u64,
}

/// A stored stack's part below an anchor: the frames to report and the chain they came from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tail {
    /// the reported frames
    pub frames: Vec<CachedFrame>,
    /// every frame address of the chain, reported or not
    pub chain: Vec<u64>,
}

/// Per-thread cached stacks of one process.
#[derive(Debug, Default)]
pub struct FrameCache {
    entries: HashMap<ThreadKey, Entry>,
    round: u64,
    /// BPF records of a thread whose anchor the cache could not vouch for, since its stack was
    /// last stored
    external_misses: HashMap<ThreadKey, u32>,
    /// threads not anchored again before this round: their anchor kept missing
    demoted: HashMap<ThreadKey, u64>,
    /// how many frames below its top each thread is anchored (0: the top frame), raised each
    /// time an anchor write could not be proven ([`FrameCache::raced`]), and the round of that
    anchor_depths: HashMap<ThreadKey, (usize, u64)>,
}

/// Deepest a thread is anchored below its top frame.
pub(crate) const MAX_ANCHOR_DEPTH: usize = 8;

/// Consecutive BPF anchor misses of a thread after which it is no longer anchored (each one is
/// a lost record): a guard for threads whose anchor moves in ways the arithmetic cannot follow
/// (a foreign writer, a bug). Walking such a thread whole in BPF costs more and loses nothing.
/// Event loops do not need it: a task step's C-level entry frame, which leaves the chain on
/// every `await`, is counted like any other frame.
const DEMOTE_AFTER_MISSES: u32 = 8;
/// Rounds a demoted thread stays unanchored before the cache tries it again.
const DEMOTED_ROUNDS: u64 = 64;

/// Most threads we keep stacks for; beyond that new threads are not cached, and their anchors
/// are cleared so that BPF walks them whole.
pub(crate) const MAX_THREADS: usize = 4096;
/// Longest stack we cache.
pub(crate) const MAX_CACHED_FRAMES: usize = 4096;

impl FrameCache {
    /// Heap bytes of the stored stacks and the per-thread bookkeeping.
    pub fn bytes(&self) -> u64 {
        use std::mem::size_of;
        let stored = |s: &Stored| {
            s.frames.capacity() * size_of::<CachedFrame>() + s.chain.capacity() * size_of::<Link>()
        };
        let stacks: usize = self
            .entries
            .values()
            .map(|e| stored(&e.current) + e.previous.as_ref().map_or(0, stored))
            .sum();
        let maps = self.entries.capacity() * size_of::<(ThreadKey, Entry)>()
            + self.external_misses.capacity() * size_of::<(ThreadKey, u32)>()
            + self.demoted.capacity() * size_of::<(ThreadKey, u64)>()
            + self.anchor_depths.capacity() * size_of::<(ThreadKey, (usize, u64))>();
        (stacks + maps) as u64
    }

    /// An empty cache.
    pub fn new() -> FrameCache {
        FrameCache::default()
    }

    /// Full hit: the thread's top frame is still the anchor and nothing moved it since we cached
    /// the stack. Returns the cached frames below the top (the caller re-reads the top itself,
    /// since its line changes while it runs).
    pub fn full_hit(&mut self, key: ThreadKey, top: u64, seq: u64) -> Option<&[CachedFrame]> {
        let round = self.round;
        let e = self.entries.get_mut(&key)?;
        let s = &e.current;
        if s.frames.first().map(|f| f.addr) != Some(top) || s.seq != seq {
            return None;
        }
        e.seen = round;
        Some(&e.current.frames[1..])
    }

    /// The stack stored for `key`, innermost first.
    pub fn stack(&self, key: ThreadKey) -> Option<&[CachedFrame]> {
        self.entries.get(&key).map(|e| &e.current.frames[..])
    }

    /// Partial hit: a walk from the top reached the anchor `anchor`; returns the cached frames
    /// below it, and the chain below it, if the sequence arithmetic proves they are still the
    /// anchor's callers.
    pub fn splice(&mut self, key: ThreadKey, anchor: u64, seq: u64) -> Option<Tail> {
        let round = self.round;
        let e = self.entries.get_mut(&key)?;
        e.seen = round;
        let s = &e.current;
        let i = s.vouched(anchor, seq)?;
        Some(Tail {
            frames: s.frames_below(i).to_vec(),
            chain: s.chain_below(i).collect(),
        })
    }

    /// [`FrameCache::splice`] for a walk taken by someone else at an earlier instant (a BPF
    /// record): it may predate our last anchor write, so the stack stored before the current
    /// one is tried too, which is what the anchor described until that write. The arithmetic is
    /// sound for each stored stack on its own (two live frames never share an address, so a
    /// later walk cannot satisfy the older stack's arithmetic with frames other than the ones
    /// both stacks share).
    pub fn splice_external(
        &mut self,
        key: ThreadKey,
        anchor: u64,
        seq: u64,
    ) -> Option<&[CachedFrame]> {
        let round = self.round;
        let found = self.entries.get_mut(&key).and_then(|e| {
            e.seen = round;
            let stored = [Some(&e.current), e.previous.as_ref()];
            stored
                .into_iter()
                .flatten()
                .find_map(|s| s.vouched(anchor, seq).map(|i| s.frames_below(i)))
        });
        if found.is_none() {
            *self.external_misses.entry(key).or_default() += 1;
        }
        found
    }

    /// After a miss of [`FrameCache::splice_external`]: demotes the thread now if its records
    /// have missed [`DEMOTE_AFTER_MISSES`] times in a row, and says so (the caller must then
    /// clear the anchor in the target, so that BPF walks the thread whole). Demotion at the
    /// next [`FrameCache::store`] is not enough: under task churn a thread's refresh walks
    /// tear, nothing is stored for seconds, and every record meanwhile stops at the stale
    /// anchor and is lost.
    pub fn demote_after_misses(&mut self, key: ThreadKey) -> bool {
        if self.external_misses.get(&key).copied().unwrap_or(0) < DEMOTE_AFTER_MISSES {
            return false;
        }
        self.external_misses.remove(&key);
        self.demoted.insert(key, self.round + DEMOTED_ROUNDS);
        self.entries.remove(&key);
        true
    }

    /// Stores a complete stack, taken while the anchor sequence was `seq`: the reported
    /// `frames` and the `chain` of every frame address they were walked from (innermost first,
    /// entry frames included). Returns whether it did: a new thread beyond [`MAX_THREADS`] and
    /// a stack deeper than [`MAX_CACHED_FRAMES`] are not stored (the caller must then not
    /// anchor the thread). `<GC>` markers are left out: a collection is over by the next
    /// sample.
    pub fn store(
        &mut self,
        key: ThreadKey,
        seq: u64,
        frames: impl Iterator<Item = CachedFrame>,
        chain: impl Iterator<Item = u64>,
    ) -> bool {
        if self.entries.len() >= MAX_THREADS && !self.entries.contains_key(&key) {
            return false;
        }
        if self.external_misses.remove(&key).unwrap_or(0) >= DEMOTE_AFTER_MISSES {
            self.demoted.insert(key, self.round + DEMOTED_ROUNDS);
        }
        if self
            .demoted
            .get(&key)
            .is_some_and(|&until| self.round < until)
        {
            self.entries.remove(&key);
            return false;
        }
        let frames: Vec<CachedFrame> = frames
            .filter(|f| f.frame.kind != FrameKind::Gc)
            .take(MAX_CACHED_FRAMES + 1)
            .collect();
        let chain = link_chain(&frames, chain.take(MAX_CACHED_FRAMES + 1));
        if frames.len() > MAX_CACHED_FRAMES || chain.len() > MAX_CACHED_FRAMES {
            self.entries.remove(&key);
            return false;
        }
        let previous = self.entries.remove(&key).map(|e| e.current);
        self.entries.insert(
            key,
            Entry {
                current: Stored { seq, frames, chain },
                previous,
                seen: self.round,
            },
        );
        true
    }

    /// How many frames below its top frame thread `key` is anchored.
    pub fn anchor_depth(&self, key: ThreadKey) -> usize {
        self.anchor_depths.get(&key).map_or(0, |&(depth, _)| depth)
    }

    /// An anchor write for `key` could not be proven right (the anchored frame returned before
    /// the check, or called on past it): anchor one frame deeper from now on. A frame that lives
    /// only microseconds (a leaf called in a loop) cannot be proven; its callers can.
    pub fn raced(&mut self, key: ThreadKey) {
        let round = self.round;
        let (depth, when) = self.anchor_depths.entry(key).or_default();
        *depth = (*depth + 1).min(MAX_ANCHOR_DEPTH);
        *when = round;
    }

    /// Drops everything stored for `key`: the anchor in the target may name a frame whose
    /// ancestry none of the stored stacks describes.
    pub fn forget(&mut self, key: ThreadKey) {
        self.entries.remove(&key);
    }

    /// Ends a sample round: entries of threads not seen in it are dropped.
    pub fn end_round(&mut self) {
        let round = self.round;
        self.entries.retain(|_, e| e.seen == round);
        self.demoted.retain(|_, &mut until| until > round);
        self.external_misses
            .retain(|key, _| self.entries.contains_key(key));
        // A raced thread has no stored stack until its next proven write: its depth is kept
        // for as long as a demotion lasts.
        self.anchor_depths.retain(|key, &mut (_, when)| {
            self.entries.contains_key(key) || when + DEMOTED_ROUNDS > round
        });
        self.round += 1;
    }

    /// Number of threads with a cached stack.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no stack is cached.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Stores `frames` walked from a chain of just the reported frames.
    fn store(
        c: &mut FrameCache,
        key: ThreadKey,
        seq: u64,
        frames: impl Iterator<Item = CachedFrame>,
    ) -> bool {
        let frames: Vec<CachedFrame> = frames.collect();
        let chain: Vec<u64> = frames.iter().map(|f| f.addr).filter(|&a| a != 0).collect();
        c.store(key, seq, frames.into_iter(), chain.into_iter())
    }

    fn f(addr: u64, name: &str) -> CachedFrame {
        CachedFrame {
            addr,
            frame: Frame {
                code: Arc::new(crate::symbolize::CodeName::new(name, "t.py", 1)),
                line: Some(1),
                kind: FrameKind::Python,
            },
        }
    }

    #[test]
    fn full_hit_needs_same_top_and_seq() {
        let mut c = FrameCache::new();
        let key = (0x1000, 7);
        store(
            &mut c,
            key,
            5,
            vec![f(0x30, "leaf"), f(0x20, "mid"), f(0x10, "main")].into_iter(),
        );
        assert_eq!(c.full_hit(key, 0x30, 5).map(|s| s.len()), Some(2));
        assert!(c.full_hit(key, 0x30, 6).is_none(), "anchor moved since");
        assert!(c.full_hit((0x1000, 8), 0x30, 5).is_none(), "another thread");
    }

    /// Stores `main→a_parent→a_leaf` (at 0x10, 0x20, 0x30) for `key`, written at sequence 10.
    fn store_a_chain(c: &mut FrameCache, key: ThreadKey) {
        let chain = [f(0x30, "a_leaf"), f(0x20, "a_parent"), f(0x10, "main")];
        store(c, key, 10, chain.into_iter());
    }

    /// The ABA case of gh-151613: `main→a_parent→a_leaf` is cached; later the anchor is found
    /// at a_parent's address again. Only if exactly one anchor departure happened (seq + 1) is
    /// the cached `main` below it still right; if the address was reused by another chain
    /// (`b_parent` pushed at the same address after a_parent returned), the sequence differs.
    #[test]
    fn splice_checks_sequence_arithmetic() {
        let mut c = FrameCache::new();
        let key = (0x1000, 7);
        store_a_chain(&mut c, key);
        // Anchor reached at 0x20 after one departure (a_leaf returned): seq 11.
        let tail = c.splice(key, 0x20, 11).expect("one pop, seq +1");
        assert_eq!(tail.frames.len(), 1);
        assert_eq!(tail.frames[0].frame.function(), "main");
        assert_eq!(tail.chain, [0x10]);
        // Same position but the sequence says something else happened: miss.
        assert!(c.splice(key, 0x20, 10).is_none());
        assert!(c.splice(key, 0x20, 13).is_none());
        // Unknown anchor address.
        assert!(c.splice(key, 0x99, 11).is_none());
    }

    /// A walk taken just before the anchor moved to a new stack is vouched for by the stack
    /// stored before; a walk after the move is not mistaken for it.
    #[test]
    fn previous_stack_covers_walks_before_the_last_write() {
        let mut c = FrameCache::new();
        let key = (0x1000, 7);
        store_a_chain(&mut c, key);
        // Both a frames returned (seq 12), b_parent/b_leaf reused the addresses; a new walk
        // stored that stack at seq 12 and moved the anchor to b_leaf.
        store(
            &mut c,
            key,
            12,
            vec![f(0x30, "b_leaf"), f(0x20, "b_parent"), f(0x10, "main")].into_iter(),
        );
        // Walk from before that write: anchor at main, seq 12: the older stack vouches.
        assert_eq!(c.splice_external(key, 0x10, 12).map(|t| t.len()), Some(0));
        // Walk after it, b_leaf returned: anchor at b_parent, seq 13: the new stack.
        let tail = c.splice_external(key, 0x20, 13).expect("new stack");
        assert_eq!(tail[0].frame.function(), "main");
        // b_leaf still running: anchor b_leaf, seq 12 → new stack, index 0.
        assert_eq!(c.splice_external(key, 0x30, 12).map(|t| t.len()), Some(2));
        // The userspace walk (taken after our write) trusts only the current stack.
        assert!(c.splice(key, 0x10, 12).is_none());
        // Nothing vouches for anchor at a_parent's address with seq 11 any more except the
        // older stack (a_leaf returned once): that is exactly what it describes.
        assert_eq!(
            c.splice_external(key, 0x20, 11)
                .map(|t| t[0].frame.function()),
            Some("main")
        );
        assert!(c.splice_external(key, 0x20, 14).is_none());
    }

    /// A `<native>` marker is no frame of the chain; the C-level entry frame under the
    /// callback is, and it moves the anchor like any other when it leaves.
    #[test]
    fn pseudo_frames_do_not_count_as_pops_entry_frames_do() {
        let mut c = FrameCache::new();
        let key = (1, 1);
        let native = CachedFrame {
            addr: 0,
            frame: Frame::pseudo(FrameKind::Native),
        };
        let frames = vec![f(0x30, "cb"), native, f(0x20, "caller"), f(0x10, "main")];
        c.store(
            key,
            0,
            frames.into_iter(),
            [0x30, 0x28, 0x20, 0x10].into_iter(),
        );
        // cb and the entry frame returned: two steps.
        assert_eq!(c.splice(key, 0x20, 2).map(|t| t.frames.len()), Some(1));
        assert!(c.splice(key, 0x20, 1).is_none());
        // Only cb returned: the anchor is the entry frame; the marker stays above `caller`.
        let tail = c.splice(key, 0x28, 1).expect("one step");
        assert_eq!(tail.frames.len(), 3);
        assert_eq!(tail.frames[0].frame.kind, FrameKind::Native);
        assert_eq!(tail.chain, [0x20, 0x10]);
    }

    /// The defect: an event loop's task step runs a coroutine on top of a C-level entry frame
    /// that the stored stack did not hold; on `await` both leave the chain, the sequence moves
    /// by 2 while the stack showed one frame above the loop's, so every record stopping at the
    /// loop's frame was an anchor miss (and the thread was demoted after 8 of them).
    #[test]
    fn an_awaiting_task_step_is_spliced_under_the_event_loop() {
        let mut c = FrameCache::new();
        let key = (1, 1);
        let frames = [f(0x40, "step_coro"), f(0x30, "run_once"), f(0x10, "main")];
        let chain = [0x40, 0x38, 0x30, 0x20, 0x10];
        c.store(key, 7, frames.into_iter(), chain.into_iter());
        let tail = c
            .splice_external(key, 0x30, 9)
            .expect("coroutine and entry frame left");
        assert_eq!(tail.len(), 1);
        assert_eq!(tail[0].frame.function(), "main");
        assert!(
            c.splice_external(key, 0x30, 8).is_none(),
            "one step is not two"
        );
        for _ in 0..2 * DEMOTE_AFTER_MISSES {
            assert!(c.splice_external(key, 0x30, 9).is_some());
        }
        assert!(
            store(
                &mut c,
                key,
                9,
                [f(0x30, "run_once"), f(0x10, "main")].into_iter()
            ),
            "not demoted"
        );
    }

    /// Under task churn the refresh walks tear and nothing is stored for seconds: the thread
    /// is demoted at its 8th miss in a row, not at the next store, and stays unanchored.
    #[test]
    fn a_thread_whose_records_keep_missing_is_demoted_at_once() {
        let mut c = FrameCache::new();
        let key = (1, 1);
        let frames = [f(0x30, "run_once"), f(0x10, "main")];
        c.store(key, 7, frames.clone().into_iter(), [0x30, 0x10].into_iter());
        for _ in 1..DEMOTE_AFTER_MISSES {
            assert!(c.splice_external(key, 0x99, 8).is_none());
            assert!(!c.demote_after_misses(key), "not before the 8th miss");
        }
        assert!(c.splice_external(key, 0x99, 8).is_none());
        assert!(c.demote_after_misses(key));
        assert!(c.stack(key).is_none(), "nothing left to splice");
        assert!(
            !store(&mut c, key, 9, frames.into_iter()),
            "demoted: not anchored again yet"
        );
    }

    #[test]
    fn unseen_threads_are_dropped() {
        let mut c = FrameCache::new();
        store(&mut c, (1, 1), 0, vec![f(0x10, "main")].into_iter());
        store(&mut c, (2, 2), 0, vec![f(0x10, "main")].into_iter());
        c.end_round();
        assert!(c.full_hit((1, 1), 0x10, 0).is_some());
        c.end_round();
        assert_eq!(c.len(), 1);
    }

    /// Beyond its thread bound the cache says so, so that the caller does not anchor a thread
    /// whose stack it cannot splice.
    #[test]
    fn store_reports_the_thread_bound() {
        let mut c = FrameCache::new();
        for t in 0..MAX_THREADS as u64 {
            assert!(store(&mut c, (t, 1), 0, vec![f(0x10, "main")].into_iter()));
        }
        assert!(!store(
            &mut c,
            (u64::MAX, 1),
            0,
            vec![f(0x10, "main")].into_iter()
        ));
        assert!(
            store(&mut c, (0, 1), 1, vec![f(0x10, "main")].into_iter()),
            "a known thread"
        );
    }
}
