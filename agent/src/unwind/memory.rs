//! What the agent's caches hold, in bytes: per process (an unwinder's page, code-object, frame
//! and record caches; its native frames; its open profile window) and host-wide (the native
//! objects every process shares). Estimates from what each cache holds (entries, and the
//! names, line tables and pages in them), not allocator figures: what grows with the number
//! of processes and what bounds it.

use super::Unwinder;

/// Heap bytes held, by cache, summed over what was added.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CacheMemory {
    /// copies of target memory pages, valid for one sample, and their spare buffers
    pub pages: u64,
    /// code objects: names and decoded line tables
    pub code: u64,
    /// 3.15 frame cache: each thread's stored stack
    pub frames: u64,
    /// eBPF: each thread's last resolved stack, and which interpreter each thread state is of
    pub records: u64,
    /// native stacks: frames named per process, and the unwind cache
    pub native_frames: u64,
    /// native stacks: the objects' symbol tables, shared by every process
    pub native_objects: u64,
    /// the open profile windows: their stacks and counts
    pub profiles: u64,
}

impl CacheMemory {
    /// Adds the caches of `u`.
    pub fn add_unwinder(&mut self, u: &Unwinder) {
        self.pages += u.mem.bytes();
        self.code += u.symbolizer.bytes();
        self.frames += u.frame_cache.as_ref().map_or(0, |fc| fc.bytes());
        self.records += u.records.bytes();
    }

    /// Each cache with its `cache` label value.
    pub fn by_cache(&self) -> [(&'static str, u64); 7] {
        [
            ("page", self.pages),
            ("code", self.code),
            ("frame", self.frames),
            ("record", self.records),
            ("native_frames", self.native_frames),
            ("native_objects", self.native_objects),
            ("profile", self.profiles),
        ]
    }

    /// All caches.
    pub fn total(&self) -> u64 {
        self.by_cache().iter().map(|(_, b)| b).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cache_has_a_label_and_counts_in_the_total() {
        let m = CacheMemory {
            pages: 1,
            code: 2,
            frames: 4,
            records: 8,
            native_frames: 16,
            native_objects: 32,
            profiles: 64,
        };
        assert_eq!(m.total(), 127);
        let labels: Vec<_> = m.by_cache().iter().map(|(l, _)| *l).collect();
        assert_eq!(
            labels,
            [
                "page",
                "code",
                "frame",
                "record",
                "native_frames",
                "native_objects",
                "profile"
            ]
        );
    }
}
