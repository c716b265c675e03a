use std::collections::HashMap;

use super::{MemoryError, ProcessMemory, RemoteMemory};

const PAGE: u64 = 4096;

/// Hit and miss counts of a [`PageCache`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PageCacheStats {
    /// reads answered from a cached page
    pub hits: u64,
    /// pages fetched
    pub misses: u64,
    /// reads that went straight to the process (too large, or the page was not readable whole)
    pub bypassed: u64,
}

/// Whole-page copies of a process's memory, valid for one sample.
///
/// The target keeps running while we read, so pages are only trusted within one sample
/// ([`PageCache::begin_sample`] drops them); within it, every frame of a data-stack chunk, and
/// the thread states next to each other, come from one read. Reads larger than a page, and pages
/// that cannot be read whole (the end of a mapping), go to the process directly.
#[derive(Debug)]
pub struct PageCache {
    remote: RemoteMemory,
    pages: HashMap<u64, Box<[u8; PAGE as usize]>>,
    /// pages kept from earlier samples, reused as buffers to avoid allocation
    spare: Vec<Box<[u8; PAGE as usize]>>,
    max_pages: usize,
    stats: PageCacheStats,
}

impl PageCache {
    /// A cache over `remote` holding at most `max_pages` pages per sample.
    pub fn new(remote: RemoteMemory, max_pages: usize) -> PageCache {
        PageCache {
            remote,
            pages: HashMap::new(),
            spare: Vec::new(),
            max_pages,
            stats: PageCacheStats::default(),
        }
    }

    /// Forgets every cached page: the next reads see the process as it is now.
    pub fn begin_sample(&mut self) {
        self.spare.extend(self.pages.drain().map(|(_, p)| p));
        self.spare.truncate(self.max_pages);
    }

    /// Reads straight from the process, never from (nor into) the cache: for values that
    /// must be fresh even within a sample, such as the frame-cache anchor re-check.
    pub fn read_uncached(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        self.remote.read(addr, buf)
    }

    /// The underlying process access, e.g. for the anchor write.
    pub fn remote(&mut self) -> &mut RemoteMemory {
        &mut self.remote
    }

    /// Counters since creation.
    pub fn stats(&self) -> PageCacheStats {
        self.stats
    }

    fn page(&mut self, page_addr: u64) -> Result<Option<&[u8; PAGE as usize]>, MemoryError> {
        if !self.pages.contains_key(&page_addr) {
            if self.pages.len() >= self.max_pages {
                return Ok(None);
            }
            let mut buf = self
                .spare
                .pop()
                .unwrap_or_else(|| Box::new([0u8; PAGE as usize]));
            match self.remote.read(page_addr, &mut buf[..]) {
                Ok(()) => {}
                // Part of the page is unmapped: let the caller read its exact range.
                Err(MemoryError::Fault { .. }) => {
                    self.spare.push(buf);
                    return Ok(None);
                }
                Err(e) => return Err(e),
            }
            self.stats.misses += 1;
            self.pages.insert(page_addr, buf);
        } else {
            self.stats.hits += 1;
        }
        Ok(self.pages.get(&page_addr).map(|p| &**p))
    }
}

impl ProcessMemory for PageCache {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        let len = buf.len() as u64;
        let first = addr & !(PAGE - 1);
        let last = addr.saturating_add(len.saturating_sub(1)) & !(PAGE - 1);
        // At most two pages: anything bigger is a bulk read (line tables, strings).
        if len == 0 || last - first > PAGE {
            self.stats.bypassed += 1;
            return self.remote.read(addr, buf);
        }
        let mut done = 0usize;
        let mut page_addr = first;
        while done < buf.len() {
            let in_page = ((addr + done as u64) - page_addr) as usize;
            let n = (PAGE as usize - in_page).min(buf.len() - done);
            match self.page(page_addr)? {
                Some(page) => buf[done..done + n].copy_from_slice(&page[in_page..in_page + n]),
                None => {
                    self.stats.bypassed += 1;
                    self.remote
                        .read(page_addr + in_page as u64, &mut buf[done..done + n])?;
                }
            }
            done += n;
            page_addr += PAGE;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caches_pages_within_a_sample() {
        let data: Vec<u8> = (0..20000u32).map(|i| i as u8).collect();
        let base = data.as_ptr() as u64;
        let mut cache = PageCache::new(RemoteMemory::new(std::process::id()), 64);
        let mut a = [0u8; 16];
        for off in [100u64, 200, 300, 4090, 8000] {
            cache.read(base + off, &mut a).expect("readable");
            assert_eq!(a[0], off as u8);
        }
        let s = cache.stats();
        assert!(s.hits >= 2, "{s:?}");
        assert!(s.misses <= 4, "{s:?}");
        cache.begin_sample();
        cache.read(base + 100, &mut a).expect("readable");
        assert!(cache.stats().misses > s.misses, "new sample re-reads");
        let mut big = vec![0u8; 10000];
        cache.read(base + 5, &mut big).expect("readable");
        assert_eq!(big[0], 5);
        assert_eq!(cache.stats().bypassed, 1);
    }
}
