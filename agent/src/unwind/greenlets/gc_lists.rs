//! The garbage collector's lists of tracked objects, read from outside: the one registry of
//! every greenlet a process has (neither greenlet nor gevent keeps one).
//!
//! Every GC-tracked object of a build with a GIL is preceded by a `PyGC_Head` of two words,
//! `_gc_next` and `_gc_prev`, whose low two bits are flags; the lists are rings through them,
//! each with a head in the interpreter's `_gc_runtime_state`: three generations and the
//! permanent one. Where the heads lie moved between versions (3.12 and 3.13: the first
//! generation 24 bytes into the state; 3.15 and 3.14.10, generational again: 8 or 24, the
//! permanent list right after the three or one word later), so they are found, not looked up:
//! a head is where a ring closes (its `next`'s `prev` is the head). Free-threaded builds keep
//! no lists (their collector walks the allocator's heaps): no greenlet is found there.

use crate::memory::{MemoryError, ProcessMemory, StructBytes};

/// `PyGC_Head`: two words.
pub const GC_HEAD_BYTES: u64 = 16;
/// Flag bits of both words.
const FLAG_BITS: u64 = 3;
/// One generation: its head, then `threshold` and `count` (two ints).
const GENERATION_BYTES: u64 = 24;
/// Where the first generation's head may begin in `_gc_runtime_state`.
const FIRST_HEAD: [u64; 2] = [24, 8];
/// Where the permanent list's head may begin after the first generation's.
const PERMANENT_AFTER_FIRST: [u64; 2] = [80, 72];
/// Objects read per list at most: a walk that does not close by then is a list that changed
/// under it, or not a list.
pub const MAX_OBJECTS: usize = 2_000_000;

/// Why a list could not be walked whole.
#[derive(Debug, thiserror::Error)]
pub enum GcListError {
    /// A read failed.
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// No ring closes where a generation's head could be.
    #[error("no garbage-collector list found in the interpreter state")]
    NoLists,
    /// An object's `prev` is not the object before it: the list changed while it was read
    /// (objects come and go as the program runs), or it is not a list.
    #[error("a garbage-collector list changed while it was read")]
    Changed,
    /// The walk did not come back to the head within [`MAX_OBJECTS`].
    #[error("a garbage-collector list did not close within {MAX_OBJECTS} objects")]
    Unbounded,
}

/// Whether a ring closes at `head`: its `next` is itself (an empty list) or an object whose
/// `prev` is the head.
fn is_head(mem: &mut impl ProcessMemory, head: u64) -> Result<bool, MemoryError> {
    let mut words = [0u8; 16];
    mem.read(head, &mut words)?;
    let next = words.u64_at(0) & !FLAG_BITS;
    let prev = words.u64_at(8) & !FLAG_BITS;
    if next == head || prev == head {
        return Ok(next == head && prev == head);
    }
    if next == 0 || !next.is_multiple_of(8) {
        return Ok(false);
    }
    let mut back = [0u8; 8];
    if mem.read(next + 8, &mut back).is_err() {
        return Ok(false);
    }
    Ok(back.u64_at(0) & !FLAG_BITS == head)
}

/// The heads of the lists of the collector state at `gc`: three generations, then the
/// permanent list when one is found.
pub fn list_heads(mem: &mut impl ProcessMemory, gc: u64) -> Result<Vec<u64>, GcListError> {
    for first in FIRST_HEAD {
        let generations: Vec<u64> = (0..3).map(|i| gc + first + i * GENERATION_BYTES).collect();
        let mut all = true;
        for &head in &generations {
            all &= is_head(mem, head)?;
        }
        if !all {
            continue;
        }
        let mut heads = generations;
        for after in PERMANENT_AFTER_FIRST {
            if is_head(mem, gc + first + after)? {
                heads.push(gc + first + after);
                break;
            }
        }
        return Ok(heads);
    }
    Err(GcListError::NoLists)
}

/// Calls `visit` with the address and type of every object of the list at `head`, in list
/// order. Each object's `prev` must be the one before it, and no object may be the head of
/// another of the lists (`heads`): a list changing under the walk (a collection merging a
/// generation into the next, whose ring the walk would then go round) stops it
/// ([`GcListError::Changed`]) rather than leading it into freed memory or another ring.
pub fn walk_list(
    mem: &mut impl ProcessMemory,
    head: u64,
    heads: &[u64],
    mut visit: impl FnMut(u64, u64),
) -> Result<(), GcListError> {
    let mut before = head;
    let mut node = {
        let mut w = [0u8; 8];
        mem.read(head, &mut w)?;
        w.u64_at(0) & !FLAG_BITS
    };
    for _ in 0..MAX_OBJECTS {
        if node == head {
            return Ok(());
        }
        if node == 0 || !node.is_multiple_of(8) || heads.contains(&node) {
            return Err(GcListError::Changed);
        }
        // next, prev, then the object: its reference count and its type.
        let mut words = [0u8; 32];
        mem.read(node, &mut words)?;
        if words.u64_at(8) & !FLAG_BITS != before {
            return Err(GcListError::Changed);
        }
        visit(node + GC_HEAD_BYTES, words.u64_at(24));
        before = node;
        node = words.u64_at(0) & !FLAG_BITS;
    }
    Err(GcListError::Unbounded)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// Memory of words: any read of whole words at known addresses; anything else faults.
    #[derive(Default)]
    struct Words(HashMap<u64, u64>);

    impl Words {
        fn set(&mut self, addr: u64, value: u64) {
            self.0.insert(addr, value);
        }
        /// A ring through `nodes` from `head` (each node's type word at +24 is `ty`).
        fn ring(&mut self, head: u64, nodes: &[u64], ty: u64) {
            let all: Vec<u64> = std::iter::once(head).chain(nodes.iter().copied()).collect();
            for (i, &n) in all.iter().enumerate() {
                self.set(n, all[(i + 1) % all.len()]);
                self.set(n + 8, all[(i + all.len() - 1) % all.len()]);
                if n != head {
                    self.set(n + 16, 1);
                    self.set(n + 24, ty);
                }
            }
        }
    }

    impl ProcessMemory for Words {
        fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
            for (i, chunk) in buf.chunks_mut(8).enumerate() {
                let at = addr + 8 * i as u64;
                let word = self.0.get(&at).ok_or(MemoryError::Fault {
                    pid: 1,
                    addr: at,
                    len: 8,
                })?;
                chunk.copy_from_slice(&word.to_le_bytes()[..chunk.len()]);
            }
            Ok(())
        }
    }

    const GC: u64 = 0x1000;

    /// Three generations 24 bytes in (3.12's place), the permanent list 80 after the first.
    fn three_generations() -> Words {
        let mut m = Words::default();
        for i in 0..3 {
            let head = GC + 24 + 24 * i;
            m.ring(head, &[0x10_000 + 0x100 * i, 0x20_000 + 0x100 * i], 0x77);
            m.set(head + 16, 0);
        }
        m.ring(GC + 104, &[], 0);
        m
    }

    #[test]
    fn heads_are_found_where_the_rings_close_and_walked_whole() {
        let mut m = three_generations();
        let heads = list_heads(&mut m, GC).expect("heads");
        assert_eq!(heads, [GC + 24, GC + 48, GC + 72, GC + 104]);
        let mut seen = Vec::new();
        walk_list(&mut m, heads[0], &heads, |addr, ty| seen.push((addr, ty))).expect("walk");
        assert_eq!(seen, [(0x10_000 + 16, 0x77), (0x20_000 + 16, 0x77)]);
    }

    #[test]
    fn a_walk_led_into_another_generation_stops() {
        let mut m = three_generations();
        let heads = list_heads(&mut m, GC).expect("heads");
        // A collection merged generation 0 into generation 1: its last node now leads to
        // generation 1's head, whose ring never comes back to generation 0's.
        m.set(0x20_000, GC + 48);
        let walked = walk_list(&mut m, heads[0], &heads, |_, _| {});
        assert!(matches!(walked, Err(GcListError::Changed)), "{walked:?}");
    }

    #[test]
    fn garbage_is_no_list() {
        let mut m = Words::default();
        for off in (0..200).step_by(8) {
            m.set(GC + off, 0xdead_beef_0000 + off);
        }
        assert!(matches!(list_heads(&mut m, GC), Err(GcListError::NoLists)));
    }
}
