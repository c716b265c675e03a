//! Memory stage: reads (and, for the 3.15 frame cache, one kind of write) of another process.
//!
//! In: remote addresses. Out: bytes. [`RemoteMemory`] wraps `process_vm_readv`; [`PageCache`]
//! sits in front of it and keeps pages for the duration of one sample, so walking a frame chain
//! that lives in one data-stack chunk costs a few page reads instead of one read per frame. Each
//! sample starts with one vectored read of what the previous sample used: on a steady target,
//! the whole sample is that one syscall.
//! Errors carry the decision a caller needs: [`MemoryError::Gone`] (the process exited),
//! [`MemoryError::Denied`] (missing ptrace rights), or a fault at an address (torn read).

mod page_cache;
mod remote;

pub use page_cache::{PageCache, PageCacheStats};
pub use remote::RemoteMemory;

/// A failed remote read or write.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum MemoryError {
    /// The process no longer exists (ESRCH).
    #[error("process {pid} is gone")]
    Gone {
        /// target pid
        pid: u32,
    },
    /// Not allowed to read it (EPERM): needs CAP_SYS_PTRACE or the same user.
    #[error("permission denied reading process {pid} (needs CAP_SYS_PTRACE or the same uid)")]
    Denied {
        /// target pid
        pid: u32,
    },
    /// The range is not (fully) mapped in the target (EFAULT, short read).
    #[error("cannot read {len} bytes at {addr:#x} in process {pid}")]
    Fault {
        /// target pid
        pid: u32,
        /// remote address
        addr: u64,
        /// length asked for
        len: usize,
    },
    /// Any other failure of the syscall.
    #[error("remote memory access to process {pid} failed: errno {errno}")]
    Other {
        /// target pid
        pid: u32,
        /// errno
        errno: i32,
    },
}

/// Something remote memory can be read from. Implemented by [`RemoteMemory`] and [`PageCache`],
/// and by byte buffers in unit tests.
pub trait ProcessMemory {
    /// Fills `buf` from `addr`, completely or not at all.
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError>;

    /// Reads a little-endian u64.
    fn read_u64(&mut self, addr: u64) -> Result<u64, MemoryError> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Reads a little-endian u32.
    fn read_u32(&mut self, addr: u64) -> Result<u32, MemoryError> {
        let mut b = [0u8; 4];
        self.read(addr, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    /// Reads `len` bytes into a new vector.
    fn read_vec(&mut self, addr: u64, len: usize) -> Result<Vec<u8>, MemoryError> {
        let mut v = vec![0u8; len];
        self.read(addr, &mut v)?;
        Ok(v)
    }
}

/// Little-endian field accessors on a struct copied out of the target in one read.
pub trait StructBytes {
    /// u64 at `off`, 0 if out of range (offsets were validated against the read length).
    fn u64_at(&self, off: u64) -> u64;
    /// u32 at `off`
    fn u32_at(&self, off: u64) -> u32;
    /// u8 at `off`
    fn u8_at(&self, off: u64) -> u8;
}

impl StructBytes for [u8] {
    fn u64_at(&self, off: u64) -> u64 {
        let o = off as usize;
        self.get(o..o + 8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
            .unwrap_or(0)
    }
    fn u32_at(&self, off: u64) -> u32 {
        let o = off as usize;
        self.get(o..o + 4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
            .unwrap_or(0)
    }
    fn u8_at(&self, off: u64) -> u8 {
        self.get(off as usize).copied().unwrap_or(0)
    }
}

/// A flat byte image standing in for a process in unit tests: `base` is the address of byte 0.
#[cfg(test)]
pub(crate) struct FakeMemory {
    pub base: u64,
    pub bytes: Vec<u8>,
}

#[cfg(test)]
impl ProcessMemory for FakeMemory {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        let fault = MemoryError::Fault {
            pid: 0,
            addr,
            len: buf.len(),
        };
        let start = addr.checked_sub(self.base).ok_or(fault.clone())? as usize;
        let src = self.bytes.get(start..start + buf.len()).ok_or(fault)?;
        buf.copy_from_slice(src);
        Ok(())
    }
}
