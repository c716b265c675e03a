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
pub const MAX_OBJECTS: usize = 4_000_000;

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
/// order. Each object's `prev` must be the one before it, so that a list changing under the
/// walk stops it ([`GcListError::Changed`]) rather than leading it into freed memory.
pub fn walk_list(
    mem: &mut impl ProcessMemory,
    head: u64,
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
        if node == 0 || !node.is_multiple_of(8) {
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
