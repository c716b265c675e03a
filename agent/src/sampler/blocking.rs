//! `--blocking`: stop every thread of a process around one sample (ptrace seize + interrupt),
//! so the stacks read are consistent.
//!
//! A thread that cannot be seized because it exited after we listed it (ESRCH) or cannot be
//! traced (EPERM: traced by someone else, or no rights) is skipped and counted, never retried in
//! a loop (CPython gh-138122 / PR #143368 fixed exactly that endless retry in its own sampler).

use nix::errno::Errno;
use nix::sys::ptrace;
use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::Pid;

use crate::discovery::task_ids;

/// Counters of blocking-mode seizes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SeizeStats {
    /// threads stopped
    pub seized: u64,
    /// threads skipped because they were gone (ESRCH)
    pub skipped_gone: u64,
    /// threads skipped because tracing was refused (EPERM)
    pub skipped_denied: u64,
    /// other failures (the thread is skipped too)
    pub failed: u64,
}

/// Threads stopped for one sample; they resume when this is dropped.
#[derive(Debug)]
pub struct PausedThreads {
    seized: Vec<Pid>,
}

impl PausedThreads {
    /// Stops every thread of `pid` that can be stopped.
    pub fn pause(pid: u32, stats: &mut SeizeStats) -> PausedThreads {
        let mut seized = Vec::new();
        for t in task_ids(pid) {
            let tid = Pid::from_raw(t.host_tid as i32);
            match ptrace::seize(tid, ptrace::Options::empty()) {
                Ok(()) => {}
                Err(Errno::ESRCH) => {
                    stats.skipped_gone += 1;
                    continue;
                }
                Err(Errno::EPERM) => {
                    stats.skipped_denied += 1;
                    continue;
                }
                Err(_) => {
                    stats.failed += 1;
                    continue;
                }
            }
            seized.push(tid);
            if ptrace::interrupt(tid).is_err() {
                continue; // gone already; detach below tolerates that
            }
            // Wait for the group-stop; a thread that vanished reports ECHILD/ESRCH.
            let _ = waitpid(tid, Some(WaitPidFlag::__WALL));
            stats.seized += 1;
        }
        PausedThreads { seized }
    }
}

impl Drop for PausedThreads {
    fn drop(&mut self) {
        for &tid in &self.seized {
            let _ = ptrace::detach(tid, None);
        }
    }
}
