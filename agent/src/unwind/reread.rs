//! How long a thread's stack is read again when the thread moves under the walk: a budget of
//! the sampler's CPU time, capped in wall time.

use std::time::{Duration, Instant};

/// The re-reads of one thread's stack stop once they have cost the sampling thread this much
/// CPU time, whatever `read_attempts` says: a stack that deep or that busy must not make the
/// profiler expensive. CPU time, not wall time: on a loaded host the sampler waits for a CPU
/// between reads, which costs nobody anything but would eat a wall-clock budget.
pub(super) const REREAD_CPU_BUDGET: Duration = Duration::from_millis(2);

/// ... and once this much wall time has passed, so a starved sampler still moves on to the
/// other threads within about a tick at the default rate.
pub(super) const REREAD_WALL_CAP: Duration = Duration::from_millis(8);

/// A frame chain that loops on this many walks in a row, each with the thread still in the top
/// frame it was read in, loops in the process's memory, not in our copy of it: reading it again
/// would spend the whole budget on every tick of a corrupt thread (about 120 re-reads a tick,
/// measured on `tests/scripts/cycles.py`).
pub(super) const CYCLIC_WALKS_IN_A_ROW: u32 = 3;

/// A walk the thread moved under is kept as its proven root ([`super::Unwinder::recheck_walk`])
/// after this many re-reads that found no whole walk. More would name more leaves, and favour
/// the frames the thread stays in longest: the bias the proven root is there to avoid.
pub(super) const ROOTED_REREADS: u32 = 2;

/// How much re-reading of one thread is left.
pub(super) struct RereadBudget {
    /// the thread's CPU clock at the first check (`None` inside: no thread CPU clock). Read
    /// then, not at the start: most threads are walked once and never checked, and the clock
    /// is a system call on every sample.
    cpu_start: Option<Option<Duration>>,
    wall_start: Instant,
    checks: u32,
}

impl RereadBudget {
    pub(super) fn start() -> RereadBudget {
        RereadBudget {
            cpu_start: None,
            wall_start: Instant::now(),
            checks: 0,
        }
    }

    /// Whether the budget is spent. The thread CPU clock is a syscall: it is read every 4th
    /// call only.
    pub(super) fn spent(&mut self) -> bool {
        self.checks += 1;
        if self.wall_start.elapsed() >= REREAD_WALL_CAP {
            return true;
        }
        let Some(cpu_start) = self.cpu_start else {
            self.cpu_start = Some(thread_cpu_time());
            return false;
        };
        if !self.checks.is_multiple_of(4) {
            return false;
        }
        match (cpu_start, thread_cpu_time()) {
            (Some(start), Some(now)) => now.saturating_sub(start) >= REREAD_CPU_BUDGET,
            // No thread CPU clock: the wall clock alone, at the CPU budget.
            _ => self.wall_start.elapsed() >= REREAD_CPU_BUDGET,
        }
    }
}

/// Whether two addresses are on the same 4 KiB page.
pub(super) fn same_page(a: u64, b: u64) -> bool {
    a >> 12 == b >> 12
}

/// CPU time used by the calling thread (`CLOCK_THREAD_CPUTIME_ID`).
fn thread_cpu_time() -> Option<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec, which lives on our stack for the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    (rc == 0).then(|| Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}
