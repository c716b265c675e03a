use std::io::{IoSlice, IoSliceMut};

use nix::errno::Errno;
use nix::sys::uio::{process_vm_readv, process_vm_writev, RemoteIoVec};
use nix::unistd::Pid;

use super::{MemoryError, ProcessMemory};

/// Direct `process_vm_readv` access to one process; counts its syscalls.
#[derive(Debug)]
pub struct RemoteMemory {
    pid: u32,
    /// `process_vm_readv` calls made
    pub reads: u64,
    /// bytes read
    pub bytes_read: u64,
}

impl RemoteMemory {
    /// Memory of process `pid` (host PID namespace).
    pub fn new(pid: u32) -> RemoteMemory {
        RemoteMemory {
            pid,
            reads: 0,
            bytes_read: 0,
        }
    }

    /// The target's pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    fn error(&self, errno: Errno, addr: u64, len: usize) -> MemoryError {
        match errno {
            Errno::ESRCH => MemoryError::Gone { pid: self.pid },
            Errno::EPERM | Errno::EACCES => MemoryError::Denied { pid: self.pid },
            Errno::EFAULT | Errno::EIO => MemoryError::Fault {
                pid: self.pid,
                addr,
                len,
            },
            e => MemoryError::Other {
                pid: self.pid,
                errno: e as i32,
            },
        }
    }

    /// One `process_vm_readv` of several ranges, filled in order; returns the bytes read, which
    /// stop short at the first range that is not (fully) mapped.
    pub fn read_vectored(
        &mut self,
        local: &mut [IoSliceMut<'_>],
        remote: &[RemoteIoVec],
    ) -> Result<usize, MemoryError> {
        if remote.is_empty() {
            return Ok(0);
        }
        self.reads += 1;
        match process_vm_readv(Pid::from_raw(self.pid as i32), local, remote) {
            Ok(n) => {
                self.bytes_read += n as u64;
                Ok(n)
            }
            Err(e) => Err(self.error(e, remote[0].base as u64, remote[0].len)),
        }
    }

    /// Reads the ranges `(addr, len)`, in order, into `buf` one after another (`buf` holds
    /// their total length); returns the bytes read, short at the first range not (fully)
    /// mapped. Adjacent ranges are read as one; as few syscalls as the kernel's limit of ranges
    /// per call allows.
    pub fn read_ranges(
        &mut self,
        ranges: &[(u64, usize)],
        buf: &mut [u8],
    ) -> Result<usize, MemoryError> {
        // IOV_MAX is 1024 on Linux.
        const PER_CALL: usize = 1024;
        let mut done = 0;
        for chunk in ranges.chunks(PER_CALL) {
            let want: usize = chunk.iter().map(|r| r.1).sum();
            let mut remote: Vec<RemoteIoVec> = Vec::with_capacity(chunk.len());
            for &(base, len) in chunk {
                match remote.last_mut() {
                    // Each page of a range costs more than its bytes: one range, not two.
                    Some(last) if last.base + last.len == base as usize => last.len += len,
                    _ => remote.push(RemoteIoVec {
                        base: base as usize,
                        len,
                    }),
                }
            }
            let mut local = [IoSliceMut::new(&mut buf[done..done + want])];
            let n = self.read_vectored(&mut local, &remote)?;
            done += n;
            if n < want {
                break;
            }
        }
        Ok(done)
    }

    /// Writes `data` at `addr`. The only write pyagent makes is the 3.15 frame-cache anchor.
    pub fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), MemoryError> {
        let local = [IoSlice::new(data)];
        let remote = [RemoteIoVec {
            base: addr as usize,
            len: data.len(),
        }];
        match process_vm_writev(Pid::from_raw(self.pid as i32), &local, &remote) {
            Ok(n) if n == data.len() => Ok(()),
            Ok(_) => Err(MemoryError::Fault {
                pid: self.pid,
                addr,
                len: data.len(),
            }),
            Err(e) => Err(self.error(e, addr, data.len())),
        }
    }
}

impl ProcessMemory for RemoteMemory {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        let len = buf.len();
        if len == 0 {
            return Ok(());
        }
        let mut done = 0usize;
        // process_vm_readv may return a short count when the range crosses into an unmapped
        // page; loop so a partial read either completes or reports the fault.
        while done < len {
            let remote = [RemoteIoVec {
                base: addr as usize + done,
                len: len - done,
            }];
            let mut local = [IoSliceMut::new(&mut buf[done..])];
            self.reads += 1;
            match process_vm_readv(Pid::from_raw(self.pid as i32), &mut local, &remote) {
                Ok(0) => {
                    return Err(MemoryError::Fault {
                        pid: self.pid,
                        addr,
                        len,
                    })
                }
                Ok(n) => {
                    done += n;
                    self.bytes_read += n as u64;
                }
                Err(e) => return Err(self.error(e, addr, len)),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_memory_and_reports_faults() {
        let data: Vec<u8> = (0..100u8).collect();
        let mut mem = RemoteMemory::new(std::process::id());
        let mut buf = [0u8; 10];
        mem.read(data.as_ptr() as u64 + 5, &mut buf)
            .expect("own memory is readable");
        assert_eq!(buf, [5, 6, 7, 8, 9, 10, 11, 12, 13, 14]);
        assert!(matches!(
            mem.read(8, &mut buf),
            Err(MemoryError::Fault { .. })
        ));
    }

    #[test]
    fn reads_ranges_in_order_merging_neighbours() {
        let data: Vec<u8> = (0..=255u8).cycle().take(40_000).collect();
        let base = data.as_ptr() as u64;
        let mut mem = RemoteMemory::new(std::process::id());
        // Two adjacent ranges, then a distant one: filled back to back.
        let mut buf = [0u8; 24];
        let n = mem
            .read_ranges(
                &[(base + 10, 8), (base + 18, 8), (base + 1000, 8)],
                &mut buf,
            )
            .expect("own memory is readable");
        assert_eq!(n, 24);
        assert_eq!(buf[..16], data[10..26]);
        assert_eq!(buf[16..], data[1000..1008]);
        assert_eq!(mem.reads, 1);
        // More ranges than one call takes.
        let ranges: Vec<(u64, usize)> = (0..3000u64).map(|i| (base + i * 13, 2)).collect();
        let mut buf = vec![0u8; 6000];
        assert_eq!(mem.read_ranges(&ranges, &mut buf), Ok(6000));
        assert!((0..3000).all(|i| buf[i * 2..i * 2 + 2] == data[i * 13..i * 13 + 2]));
        // Short at an unmapped range.
        let mut buf = [0u8; 16];
        assert_eq!(mem.read_ranges(&[(base, 8), (8, 8)], &mut buf), Ok(8));
    }

    #[test]
    fn gone_process_is_reported() {
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("spawn true");
        let pid = child.id();
        child.wait().expect("wait");
        let mut mem = RemoteMemory::new(pid);
        let mut buf = [0u8; 8];
        assert_eq!(mem.read(0x1000, &mut buf), Err(MemoryError::Gone { pid }));
    }
}
