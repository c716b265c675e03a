// foldhash: these maps are looked up several times per sample, keyed by addresses.
use foldhash::{HashMap, HashMapExt};
use std::io::IoSliceMut;

use nix::sys::uio::RemoteIoVec;

use super::{MemoryError, ProcessMemory, RemoteMemory};

const PAGE: u64 = 4096;
/// Most pages one prefetch reads (bounds the iovec arrays; a 1000-deep chain spans ~25 pages).
const MAX_PREFETCH: usize = 128;
/// Prefetched spans are widened to this alignment, so a field next to last sample's is covered.
const SPAN_ALIGN: usize = 64;

type Page = Box<[u8; PAGE as usize]>;

/// Hit and miss counts of a [`PageCache`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PageCacheStats {
    /// reads answered from a cached page
    pub hits: u64,
    /// pages fetched one by one, on demand
    pub misses: u64,
    /// pages fetched by prefetches (one `process_vm_readv` each)
    pub prefetched: u64,
    /// reads that went straight to the process (too large, or the page was not readable whole)
    pub bypassed: u64,
}

#[derive(Debug)]
struct CachedPage {
    bytes: Page,
    /// the part of `bytes` read from the process (all of it unless prefetched)
    valid: (usize, usize),
    /// the part this sample has read (empty: unused; a prefetched page nobody reads is not
    /// prefetched again)
    used: (usize, usize),
    /// when it was read: larger is later ([`PageCache::read_order`])
    stamp: u64,
}

impl CachedPage {
    fn is_used(&self) -> bool {
        self.used.0 < self.used.1
    }
}

/// Whole-page copies of a process's memory, valid for one sample.
///
/// The target keeps running while we read, so pages are only trusted within one sample
/// ([`PageCache::begin_sample`] drops them); within it, every frame of a data-stack chunk, and
/// the thread states next to each other, come from one read. Reads larger than a page, and pages
/// that cannot be read whole (the end of a mapping), go to the process directly.
///
/// A steady target touches the same few pages every sample (runtime, interpreter, thread states,
/// the top of each data stack), and each `process_vm_readv` costs far more than its copy. So
/// `begin_sample` fetches the parts of the pages the previous sample used in one vectored read,
/// which the kernel copies in order: pages asked for with [`PageCache::fetch_first`] first, then
/// the others in the order they were first used. [`PageCache::read_order`] tells which of two
/// cached ranges was read first, which is what the 3.15 anchor check needs.
#[derive(Debug)]
pub struct PageCache {
    remote: RemoteMemory,
    pages: HashMap<u64, CachedPage>,
    /// pages kept from earlier samples, reused as buffers to avoid allocation
    spare: Vec<Page>,
    max_pages: usize,
    /// pages used in this sample, in order of first use: the next sample's prefetch
    used_order: Vec<u64>,
    /// what the next `begin_sample` prefetches: (page, start, end) of used parts
    plan: Vec<(u64, usize, usize)>,
    /// pages the next prefetch reads before the others
    first_next: Vec<u64>,
    /// counts reads from the process: the stamp of the next one
    next_stamp: u64,
    stats: PageCacheStats,
}

impl PageCache {
    /// Bytes the cache holds: its pages (cached, and kept as buffers) and what says which
    /// parts the next sample prefetches. At most `max_pages` of each kind of page.
    pub fn bytes(&self) -> u64 {
        use std::mem::size_of;
        let pages = self.pages.capacity() * (size_of::<(u64, CachedPage)>() + 8)
            + (self.pages.len() + self.spare.len()) * PAGE as usize
            + self.spare.capacity() * size_of::<Page>();
        let plans = (self.used_order.capacity() + self.first_next.capacity()) * size_of::<u64>()
            + self.plan.capacity() * size_of::<(u64, usize, usize)>();
        (pages + plans) as u64
    }

    /// A cache over `remote` holding at most `max_pages` pages per sample.
    pub fn new(remote: RemoteMemory, max_pages: usize) -> PageCache {
        PageCache {
            remote,
            pages: HashMap::new(),
            spare: Vec::new(),
            max_pages,
            used_order: Vec::new(),
            plan: Vec::new(),
            first_next: Vec::new(),
            next_stamp: 0,
            stats: PageCacheStats::default(),
        }
    }

    /// Forgets every cached page: the next reads see the process as it is now. Fetches the parts
    /// of the pages the previous sample used in one read.
    pub fn begin_sample(&mut self) {
        self.carry_used();
        let mut want = std::mem::take(&mut self.plan);
        // Stable: the pages asked for first keep their relative order, as do the rest.
        want.sort_by_key(|(a, _, _)| !self.first_next.contains(a));
        self.first_next.clear();
        self.drop_pages();
        self.prefetch(&want);
        want.clear();
        self.plan = want;
    }

    /// Forgets every cached page, like [`PageCache::begin_sample`], but fetches only the pages
    /// holding `addrs`, in that order, in one read: for reading one thread again within a
    /// sample (its thread state, then its frames), as often as the thread moves under the
    /// walk, without copying the runtime, the interpreter and the other threads each time. A
    /// page is fetched as much as this sample used of it, or whole. What the sample used is
    /// still what the next `begin_sample` prefetches.
    pub fn restart_with(&mut self, addrs: &[u64]) {
        self.carry_used();
        self.drop_pages();
        let mut want: Vec<(u64, usize, usize)> = Vec::with_capacity(addrs.len());
        for &addr in addrs {
            let page = addr & !(PAGE - 1);
            if want.iter().any(|w| w.0 == page) || want.len() >= MAX_PREFETCH {
                continue;
            }
            let (lo, hi) = self
                .plan
                .iter()
                .find(|e| e.0 == page)
                .map_or((0, PAGE as usize), |e| (e.1, e.2));
            want.push((page, lo, hi));
        }
        self.prefetch(&want);
    }

    /// Forgets every cached page without reading anything; what the previous sample used is
    /// still prefetched by the next [`PageCache::begin_sample`]. For a batch that will most
    /// likely read nothing.
    pub fn begin_without_prefetch(&mut self) {
        self.carry_used();
        self.drop_pages();
    }

    /// Frees every page buffer, cached or spare, for a process read seldom: in eBPF mode a
    /// process's records are resolved in a batch per drain, and its buffers would otherwise
    /// stay allocated between batches, a few dozen KiB per process. The next
    /// [`PageCache::begin_sample`] still prefetches what this sample used.
    pub fn release(&mut self) {
        self.carry_used();
        if !self.pages.is_empty() || !self.spare.is_empty() {
            self.pages = HashMap::new();
            self.spare = Vec::new();
        }
    }

    /// Adds the used parts of this sample's pages to the next prefetch, in order of first use
    /// (a page already planned has its part widened).
    fn carry_used(&mut self) {
        for a in self.used_order.drain(..) {
            let Some(p) = self.pages.get(&a) else {
                continue;
            };
            // Pages cost far more than bytes, but copying only what was used still saves a
            // fifth of the syscall on a steady target.
            let lo = p.used.0 / SPAN_ALIGN * SPAN_ALIGN;
            let hi = (p.used.1.div_ceil(SPAN_ALIGN) * SPAN_ALIGN).min(PAGE as usize);
            let room = self.plan.len() < MAX_PREFETCH.min(self.max_pages);
            match self.plan.iter_mut().find(|e| e.0 == a) {
                Some(e) => *e = (a, e.1.min(lo), e.2.max(hi)),
                None if room => self.plan.push((a, lo, hi)),
                None => {}
            }
        }
    }

    fn drop_pages(&mut self) {
        self.spare.extend(self.pages.drain().map(|(_, p)| p.bytes));
        self.spare.truncate(self.max_pages);
    }

    /// Asks the next sample's prefetch to read the page holding `addr` before the others.
    pub fn fetch_first(&mut self, addr: u64) {
        let page = addr & !(PAGE - 1);
        if !self.first_next.contains(&page) && self.first_next.len() < MAX_PREFETCH {
            self.first_next.push(page);
        }
    }

    /// When `addr..addr + len` was read from the process, if it is cached: of two ranges, the one
    /// with the smaller value was read first (equal: in the same copy, order unknown).
    pub fn read_order(&self, addr: u64, len: usize) -> Option<u64> {
        let first = addr & !(PAGE - 1);
        let last = (addr + len.max(1) as u64 - 1) & !(PAGE - 1);
        let mut stamp = 0;
        let mut page = first;
        while page <= last {
            let p = self.pages.get(&page)?;
            stamp = stamp.max(p.stamp);
            page += PAGE;
        }
        Some(stamp)
    }

    fn stamp(&mut self) -> u64 {
        self.next_stamp += 1;
        self.next_stamp
    }

    fn prefetch(&mut self, want: &[(u64, usize, usize)]) {
        if want.is_empty() {
            return;
        }
        let mut bufs: Vec<Page> = want
            .iter()
            .map(|_| {
                self.spare
                    .pop()
                    .unwrap_or_else(|| Box::new([0u8; PAGE as usize]))
            })
            .collect();
        let remote: Vec<RemoteIoVec> = want
            .iter()
            .map(|&(a, lo, hi)| RemoteIoVec {
                base: a as usize + lo,
                len: hi - lo,
            })
            .collect();
        let n = {
            let mut local: Vec<IoSliceMut<'_>> = bufs
                .iter_mut()
                .zip(want)
                .map(|(b, &(_, lo, hi))| IoSliceMut::new(&mut b[lo..hi]))
                .collect();
            // A failure here (the process exited, a page went away) is reported by the
            // on-demand read that needs the data.
            self.remote.read_vectored(&mut local, &remote).unwrap_or(0)
        };
        let mut done = 0usize;
        for (&(addr, lo, hi), buf) in want.iter().zip(bufs.drain(..)) {
            if done + (hi - lo) <= n {
                self.stats.prefetched += 1;
                let stamp = self.stamp();
                self.pages.insert(
                    addr,
                    CachedPage {
                        bytes: buf,
                        valid: (lo, hi),
                        used: (0, 0),
                        stamp,
                    },
                );
            } else {
                self.spare.push(buf);
            }
            done += hi - lo;
        }
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

    /// `process_vm_readv` calls made since creation.
    pub fn syscalls(&self) -> u64 {
        self.remote.reads
    }

    /// The cached page at `page_addr` with `lo..hi` readable, fetched whole if it is not
    /// cached or that part was not prefetched; `None` if the page cannot be read whole.
    fn page(
        &mut self,
        page_addr: u64,
        lo: usize,
        hi: usize,
    ) -> Result<Option<&[u8; PAGE as usize]>, MemoryError> {
        let cached = self
            .pages
            .get(&page_addr)
            .map(|p| p.valid.0 <= lo && hi <= p.valid.1);
        match cached {
            Some(true) => self.stats.hits += 1,
            Some(false) | None => {
                let old = self.pages.remove(&page_addr);
                if old.is_none() && self.pages.len() >= self.max_pages {
                    return Ok(None);
                }
                let used = old.as_ref().map_or((0, 0), |p| p.used);
                let mut buf = old.map(|p| p.bytes).or_else(|| self.spare.pop());
                let buf_ref = buf.get_or_insert_with(|| Box::new([0u8; PAGE as usize]));
                match self.remote.read(page_addr, &mut buf_ref[..]) {
                    Ok(()) => {}
                    // Part of the page is unmapped: let the caller read its exact range.
                    Err(MemoryError::Fault { .. }) => {
                        self.spare.extend(buf);
                        return Ok(None);
                    }
                    Err(e) => return Err(e),
                }
                self.stats.misses += 1;
                let bytes = buf.expect("filled above");
                let stamp = self.stamp();
                self.pages.insert(
                    page_addr,
                    CachedPage {
                        bytes,
                        valid: (0, PAGE as usize),
                        used,
                        stamp,
                    },
                );
            }
        }
        let p = self.pages.get_mut(&page_addr).expect("cached above");
        if !p.is_used() {
            self.used_order.push(page_addr);
            p.used = (lo, hi);
        } else {
            p.used = (p.used.0.min(lo), p.used.1.max(hi));
        }
        Ok(Some(&*p.bytes))
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
            match self.page(page_addr, in_page, in_page + n)? {
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

    /// Four whole pages of this process's own memory, read back through `process_vm_readv`.
    struct OwnPages {
        data: Vec<u8>,
        /// the first page boundary inside `data`
        base: u64,
    }

    impl OwnPages {
        fn new() -> OwnPages {
            let data: Vec<u8> = vec![0; 5 * PAGE as usize];
            let base = (data.as_ptr() as u64).next_multiple_of(PAGE);
            OwnPages { data, base }
        }

        /// Writes `v` at `off` in page `page`. Volatile: only the kernel reads these bytes
        /// back, which the compiler cannot see.
        fn poke(&mut self, page: u64, off: u64, v: u8) {
            let i = (self.base - self.data.as_ptr() as u64 + page * PAGE + off) as usize;
            assert!(i < self.data.len());
            // SAFETY: `i` is inside `data` (checked above), which is alive and borrowed
            // mutably here only.
            unsafe { std::ptr::write_volatile(self.data.as_mut_ptr().add(i), v) };
        }
    }

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
        let mut big = vec![0u8; 10000];
        cache.read(base + 5, &mut big).expect("readable");
        assert_eq!(big[0], 5);
        assert_eq!(cache.stats().bypassed, 1);
    }

    #[test]
    fn restart_with_reads_only_the_pages_asked_for_in_order_and_forgets_the_rest() {
        let mut pages = OwnPages::new();
        let base = pages.base;
        let mut poke = |page, off, v| pages.poke(page, off, v);
        let mut cache = PageCache::new(RemoteMemory::new(std::process::id()), 64);
        let mut a = [0u8; 8];
        for page in [0, 1, 2] {
            cache
                .read(base + page * PAGE + 64, &mut a)
                .expect("readable");
        }
        for page in [0, 1, 2] {
            poke(page, 64, 5 + page as u8);
        }
        let syscalls = cache.syscalls();
        // Page 2 first, then page 0 (twice: one entry); page 1 is not asked for.
        cache.restart_with(&[base + 2 * PAGE + 64, base + 64, base + 70]);
        assert_eq!(cache.syscalls(), syscalls + 1, "one read");
        let later = cache.read_order(base + 64, 8).expect("cached");
        let earlier = cache.read_order(base + 2 * PAGE + 64, 8).expect("cached");
        assert!(earlier < later, "copied in the order given");
        cache.read(base + 64, &mut a).expect("readable");
        assert_eq!(a[0], 5, "read anew");
        assert!(
            cache.read_order(base + PAGE + 64, 8).is_none(),
            "a page not asked for is not kept from before"
        );
        cache.read(base + PAGE + 64, &mut a).expect("readable");
        assert_eq!(a[0], 6, "and is read fresh on demand");
    }

    #[test]
    fn next_sample_prefetches_what_was_used_in_one_read_and_sees_new_values() {
        let mut pages = OwnPages::new();
        let base = pages.base;
        let mut poke = |page, off, v| pages.poke(page, off, v);
        let mut cache = PageCache::new(RemoteMemory::new(std::process::id()), 64);
        let mut a = [0u8; 8];
        // Used: page 2 (offset 200), then page 0 (offsets 100..108 and 300..308).
        for (page, off) in [(2, 200), (0, 100), (0, 300)] {
            cache
                .read(base + page * PAGE + off, &mut a)
                .expect("readable");
        }
        let syscalls = cache.syscalls();
        poke(0, 300, 7);
        poke(2, 200, 9);
        cache.fetch_first(base);
        cache.begin_sample();
        assert_eq!(cache.syscalls(), syscalls + 1, "one read for both pages");
        assert_eq!(cache.stats().prefetched, 2);
        cache.read(base + 300, &mut a).expect("readable");
        assert_eq!(a[0], 7, "the prefetch read the process anew");
        cache.read(base + 2 * PAGE + 200, &mut a).expect("readable");
        assert_eq!(a[0], 9);
        assert_eq!(
            cache.syscalls(),
            syscalls + 1,
            "both served from the prefetch"
        );
        // Page 0 was asked for first, so it was copied before page 2.
        let first = cache.read_order(base + 300, 8).expect("cached");
        let second = cache.read_order(base + 2 * PAGE + 200, 8).expect("cached");
        assert!(first < second, "{first} < {second}");
        // Outside the prefetched span of a page: fetched whole, and later than everything.
        poke(0, 3000, 5);
        cache.read(base + 3000, &mut a).expect("readable");
        assert_eq!(a[0], 5);
        assert_eq!(cache.syscalls(), syscalls + 2);
        assert!(cache.read_order(base, 8).expect("cached") > second);
        assert_eq!(cache.read_order(base + 4 * PAGE, 8), None, "never read");
        // An unused prefetched page is not prefetched again.
        cache.begin_sample();
        assert_eq!(cache.stats().prefetched, 4);
        cache.read(base + 300, &mut a).expect("readable");
        cache.begin_sample();
        assert_eq!(cache.stats().prefetched, 5, "page 2 went unused");
        // Dropping pages without a prefetch reads nothing; what was used is prefetched later.
        cache.read(base + 300, &mut a).expect("readable");
        let before = cache.syscalls();
        cache.begin_without_prefetch();
        assert_eq!(cache.syscalls(), before);
        assert_eq!(cache.read_order(base + 300, 8), None, "pages dropped");
        cache.begin_sample();
        assert_eq!(cache.syscalls(), before + 1);
        assert_eq!(cache.stats().prefetched, 6);
    }
}
