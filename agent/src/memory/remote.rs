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
