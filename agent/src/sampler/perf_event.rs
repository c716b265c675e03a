//! Software cpu-clock perf events opened by the samplers, and the rings the kernel writes their
//! records into: the BPF sampler's events (which run its program), the userspace sampler's tick.
//!
//! aya 0.14 keeps the descriptors of the events it opens to itself, and the samplers need theirs:
//! to read the event's own ring (throttle records, tick records) and to wait on it.

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{fence, AtomicU64, Ordering};

use aya_obj::generated::{
    perf_event_attr, perf_event_mmap_page, perf_sw_ids::PERF_COUNT_SW_CPU_CLOCK,
    perf_type_id::PERF_TYPE_SOFTWARE, PERF_EVENT_IOC_DISABLE, PERF_FLAG_FD_CLOEXEC,
};

/// The attributes of a software cpu-clock event, everything else zero (the documented
/// defaults): the caller sets the rate, the sample format and the flags.
pub fn cpu_clock_attr() -> perf_event_attr {
    // SAFETY: perf_event_attr is plain data; all zeroes is its documented default.
    let mut attr: perf_event_attr = unsafe { std::mem::zeroed() };
    attr.type_ = PERF_TYPE_SOFTWARE as u32;
    attr.config = PERF_COUNT_SW_CPU_CLOCK as u64;
    attr.size = std::mem::size_of::<perf_event_attr>() as u32;
    attr
}

/// `perf_event_open(attr, pid, cpu, -1, FD_CLOEXEC)`.
pub fn open(attr: &perf_event_attr, pid: i32, cpu: i32) -> std::io::Result<OwnedFd> {
    // SAFETY: attr is a valid perf_event_attr that outlives the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr as *const perf_event_attr,
            pid,
            cpu,
            -1,
            PERF_FLAG_FD_CLOEXEC as libc::c_ulong,
        )
    };
    if ret < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(ret as i32) })
}

/// `kernel.perf_event_max_sample_rate`, if it can be read: the kernel refuses a sampling
/// event set by its frequency above it, and throttles one set by its period at every tick.
pub fn max_sample_rate() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// A perf ioctl with an integer argument.
pub fn ioctl(fd: &OwnedFd, request: u32, arg: libc::c_ulong) -> std::io::Result<()> {
    // SAFETY: perf ioctls with an integer argument on a perf event descriptor.
    let ret = unsafe { libc::ioctl(fd.as_fd().as_raw_fd(), request as libc::Ioctl, arg) };
    if ret < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Stops an event's ticks at once (closing its descriptor would too, once every copy is closed).
pub fn disable(fd: &OwnedFd) {
    let _ = ioctl(fd, PERF_EVENT_IOC_DISABLE, 0);
}

/// One record of a ring.
pub struct Record {
    /// `perf_event_type`
    pub kind: u32,
    /// its length in bytes
    pub len: u64,
    /// its first 40 bytes (the bytes past a shorter record are never looked at)
    pub bytes: [u8; 40],
}

impl Record {
    /// The 8-byte word at byte `i` of the record (`i + 8 <= 40`).
    pub fn word(&self, i: usize) -> u64 {
        u64::from_ne_bytes(self.bytes[i..i + 8].try_into().expect("8 bytes"))
    }
}

/// An event's ring, mapped: a control page, then `data_pages` pages of records.
pub struct PerfRing {
    map: memmap2::MmapRaw,
    data_pages: usize,
}

impl PerfRing {
    /// Maps the ring of the event `fd` with `data_pages` data pages (a power of two). Every page
    /// is locked memory counted against `perf_event_mlock_kb`.
    pub fn map(fd: &OwnedFd, data_pages: usize) -> std::io::Result<PerfRing> {
        let map = memmap2::MmapOptions::new()
            .len(page_size() * (1 + data_pages))
            .map_raw(fd)?;
        Ok(PerfRing { map, data_pages })
    }

    /// Hands every complete record the kernel wrote since the last call to `each`, then gives
    /// their room back.
    pub fn drain(&mut self, mut each: impl FnMut(&Record)) {
        let base = self.map.as_mut_ptr();
        let header = base.cast::<perf_event_mmap_page>();
        // SAFETY: the first page of the mapping is the kernel's perf_event_mmap_page; data_head
        // and data_tail are naturally aligned u64s the kernel and this reader share.
        let (head, tail) = unsafe {
            (
                &*std::ptr::addr_of!((*header).data_head).cast::<AtomicU64>(),
                &*std::ptr::addr_of!((*header).data_tail).cast::<AtomicU64>(),
            )
        };
        let end = head.load(Ordering::Relaxed);
        // Records up to `end` are complete once data_head is seen (the kernel's protocol).
        fence(Ordering::Acquire);
        let size = page_size() * self.data_pages;
        // SAFETY: the data pages follow the first page, inside the mapping.
        let data = unsafe { std::slice::from_raw_parts(base.add(page_size()), size) };
        let mut at = tail.load(Ordering::Relaxed);
        while end.wrapping_sub(at) >= 8 {
            let bytes = ring_bytes(data, at);
            let kind = u32::from_ne_bytes(bytes[0..4].try_into().expect("4 bytes"));
            let len = u64::from(u16::from_ne_bytes(bytes[6..8].try_into().expect("2 bytes")));
            if len < 8 || end.wrapping_sub(at) < len {
                break;
            }
            each(&Record { kind, len, bytes });
            at = at.wrapping_add(len);
        }
        // The records are read before their room is given back.
        fence(Ordering::Release);
        tail.store(at, Ordering::Relaxed);
    }
}

/// The 40 bytes of the ring `data` from position `at` (which wraps), copied out: enough for
/// any record read here.
fn ring_bytes(data: &[u8], at: u64) -> [u8; 40] {
    let mut out = [0u8; 40];
    let size = data.len();
    for (i, b) in out.iter_mut().enumerate() {
        *b = data[(at as usize + i) % size];
    }
    out
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(page).unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_reads_wrap_around_the_end() {
        let data: Vec<u8> = (0..64).collect();
        let got = ring_bytes(&data, 60);
        assert_eq!(&got[..8], &[60, 61, 62, 63, 0, 1, 2, 3]);
    }
}
