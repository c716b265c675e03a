//! One instant of a task chain: everything a chain was decoded from, read again in one
//! `process_vm_readv`, twice, and kept only when both copies are what it was decoded from.
//!
//! A chain is decoded from many reads (the task, its coroutine and the coroutines it awaits,
//! its name, its awaiters' set, each awaiter and its coroutines), some from pages copied earlier
//! in the tick, while the target runs on. Checking parts of it again one by one proves nothing
//! under churn: the allocator hands a freed task's, coroutine's and name's blocks to the next
//! ones made, in the same order, so a task read before its frames and again after them can be
//! byte for byte the same although the frames between were of another task's life (a child
//! started and awaited, then freed, then a new one made at the same addresses and not yet
//! awaited: "frames of a started child with no parent", a chain that never existed).
//!
//! So [`Reads`] keeps every range a decode read and the bytes it got, and [`Reads::hold`] reads
//! them all again, twice over, in one syscall, which the kernel copies in order: each range is
//! copied once in the first half and once in the second, so a range that reads the same in
//! both halves held over the moment between them (short of changing and changing back within
//! one copy). When every range does, and equals what the chain was decoded from, the chain is
//! the one the process had at that moment. The tasks in it must also be alive then: a freed
//! task keeps its fields until its block is reused, so each one's reference count is read with
//! the rest (not compared: it moves whenever anything takes or drops a reference).

use crate::memory::{MemoryError, ProcessMemory, RemoteMemory, StructBytes};

/// Most bytes one chain's check reads (both copies): far above any real chain (a few KiB),
/// and a bound on what garbage pointers can make it keep and read.
const MAX_CHECKED: usize = 1 << 20;

/// Free-threaded object header: `ob_ref_local` (u32) and `ob_ref_shared` offsets.
const FT_REF_LOCAL: u64 = 12;
const FT_REF_SHARED: u64 = 16;

/// The ranges a decode read, with the bytes it got, and the objects that must be alive.
#[derive(Debug, Default)]
pub struct Reads {
    /// (address, length), in the order read
    ranges: Vec<(u64, usize)>,
    /// their bytes, one after another
    bytes: Vec<u8>,
    /// objects whose reference count must be non-zero
    alive: Vec<u64>,
    /// more was read than one check reads: nothing more kept, and nothing holds
    overflow: bool,
}

impl Reads {
    /// Asks the check to find the object at `addr` alive.
    pub fn must_be_alive(&mut self, addr: u64) {
        self.alive.push(addr);
    }

    /// Whether what was read is what the process holds at one instant, every object asked for
    /// alive then. `Ok(false)` when anything changed, a range is no longer mapped, or there is
    /// too much to check; an error only when the process cannot be read at all. (Past the
    /// kernel's 1024 ranges a call the copies take consecutive calls: the first copy still
    /// ends before the second begins.)
    pub fn hold(
        &self,
        remote: &mut RemoteMemory,
        free_threaded: bool,
    ) -> Result<bool, MemoryError> {
        let header_len = if free_threaded {
            (FT_REF_SHARED + 8) as usize
        } else {
            4
        };
        let half = self.bytes.len() + self.alive.len() * header_len;
        if self.overflow || 2 * half > MAX_CHECKED {
            return Ok(false);
        }
        if half == 0 {
            return Ok(true);
        }
        let mut ranges = Vec::with_capacity(2 * (self.ranges.len() + self.alive.len()));
        for _ in 0..2 {
            ranges.extend_from_slice(&self.ranges);
            ranges.extend(self.alive.iter().map(|&a| (a, header_len)));
        }
        let mut buf = vec![0u8; 2 * half];
        match remote.read_ranges(&ranges, &mut buf) {
            Ok(n) if n == buf.len() => {}
            // Freed and unmapped since: not what was read.
            Ok(_) | Err(MemoryError::Fault { .. }) => return Ok(false),
            Err(e) => return Err(e),
        }
        let n = self.bytes.len();
        Ok(buf.chunks_exact(half).all(|copy| {
            copy[..n] == self.bytes[..]
                && copy[n..]
                    .chunks_exact(header_len)
                    .all(|header| object_alive(free_threaded, header))
        }))
    }
}

/// Whether the object whose header starts `header` has references: a deallocated object's
/// count is zero (the allocator reuses a block's first words, its GC links, below the count).
/// A free-threaded object is dead when both its owner's count and the shared one (above its
/// two flag bits) are.
fn object_alive(free_threaded: bool, header: &[u8]) -> bool {
    if free_threaded {
        header.u32_at(FT_REF_LOCAL) != 0 || header.u64_at(FT_REF_SHARED) >> 2 != 0
    } else {
        header.u32_at(0) != 0
    }
}

/// A [`ProcessMemory`] that reads through `mem` and keeps each range and its bytes in `reads`.
pub struct Recorder<'a, M: ProcessMemory> {
    mem: &'a mut M,
    /// what was read through it
    pub reads: &'a mut Reads,
}

impl<'a, M: ProcessMemory> Recorder<'a, M> {
    /// Reads through `mem`, recording into `reads`.
    pub fn new(mem: &'a mut M, reads: &'a mut Reads) -> Recorder<'a, M> {
        Recorder { mem, reads }
    }
}

impl<M: ProcessMemory> ProcessMemory for Recorder<'_, M> {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        self.mem.read(addr, buf)?;
        let r = &mut *self.reads;
        if r.overflow || 2 * (r.bytes.len() + buf.len()) > MAX_CHECKED {
            // Garbage pointers can lead to huge reads: keep none of them.
            r.overflow = true;
            r.ranges = Vec::new();
            r.bytes = Vec::new();
        } else {
            r.ranges.push((addr, buf.len()));
            r.bytes.extend_from_slice(buf);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes of this process, read back through `process_vm_readv` as a target's are.
    #[repr(C, align(8))]
    struct Image([u8; 256]);

    fn remote() -> RemoteMemory {
        RemoteMemory::new(std::process::id())
    }

    fn recorded(image: &Image, ranges: &[(u64, usize)]) -> Reads {
        let mut direct = remote();
        let mut reads = Reads::default();
        let mut rec = Recorder::new(&mut direct, &mut reads);
        let base = image.0.as_ptr() as u64;
        for &(off, len) in ranges {
            rec.read_vec(base + off, len).expect("own memory");
        }
        reads
    }

    #[test]
    fn what_still_reads_the_same_holds_and_what_changed_does_not() {
        let mut image = Box::new(Image([0; 256]));
        image.0[0] = 1;
        image.0[100] = 7;
        let base = image.0.as_ptr() as u64;
        let mut reads = recorded(&image, &[(96, 16), (8, 8), (96, 16)]);
        reads.must_be_alive(base);
        assert!(reads.hold(&mut remote(), false).expect("own memory"));
        // The count moves: not compared, only required non-zero.
        image.0[0] = 3;
        assert!(reads.hold(&mut remote(), false).expect("own memory"));
        // A read byte changed.
        image.0[101] = 1;
        assert!(!reads.hold(&mut remote(), false).expect("own memory"));
        image.0[101] = 0;
        assert!(reads.hold(&mut remote(), false).expect("own memory"));
        // The object died: its fields are intact, its count is zero.
        image.0[0] = 0;
        assert!(!reads.hold(&mut remote(), false).expect("own memory"));
    }

    #[test]
    fn an_unmapped_range_does_not_hold() {
        let image = Box::new(Image([1; 256]));
        let mut reads = recorded(&image, &[(0, 8)]);
        reads.ranges.push((8, 8));
        reads.bytes.extend_from_slice(&[0; 8]);
        assert!(!reads
            .hold(&mut remote(), false)
            .expect("a fault is no error"));
    }

    #[test]
    fn more_than_one_check_reads_is_not_kept_and_does_not_hold() {
        let image = Box::new(Image([1; 256]));
        let mut reads = Reads::default();
        let mut direct = remote();
        let mut rec = Recorder::new(&mut direct, &mut reads);
        let base = image.0.as_ptr() as u64;
        for _ in 0..MAX_CHECKED / 256 {
            rec.read_vec(base, 256).expect("own memory");
        }
        assert!(reads.bytes.len() < MAX_CHECKED);
        assert!(!reads.hold(&mut remote(), false).expect("own memory"));
    }
}
