//! How much CPU a thread really had, for the userspace sampler: `/proc/PID/task/TID/schedstat`
//! (time on a CPU, time waiting on a run queue, both in ns since the thread started).
//!
//! A thread found runnable at a tick (`R`) may be running, or waiting on a run queue for a CPU
//! that other threads hold (a loaded host, a container at its CPU limit). Counting every such
//! tick as CPU counted a worker that ran 1.15 s of 10 s as 9.9 s of CPU. Instead the CPU time the
//! kernel accounts is credited to the stacks: each time a thread is found runnable its stack is
//! read and weighted by the CPU time it had since its last credit, in whole sampling periods
//! (the remainder is carried to its next one), so a profile's CPU adds up to schedstat's. The
//! run-queue time since the last read goes to the same stack as waiting for a CPU (`wait=cpu`).
//!
//! Files are kept open, as [`super::run_state`] keeps its own: one `pread` a read.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::Instant;

/// Most files kept open per process: beyond, a thread's file is opened and closed each time.
const MAX_OPEN: usize = 256;

/// What a thread's read is worth.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Credit {
    /// sampling periods of CPU time the thread had since its last credit
    pub periods: u64,
    /// ns it waited on a run queue since its last read
    pub runqueue_ns: u64,
    /// ns on a CPU since its last read (0 at the first read)
    pub ran_ns: u64,
    /// ns of wall time since its last read (0 at the first read)
    pub elapsed_ns: u64,
}

/// One thread's clock as last read, and what was credited of it.
#[derive(Debug)]
struct Account {
    /// schedstat's run time at the last read
    run_ns: u64,
    /// run time credited to samples so far
    credited_ns: u64,
    /// schedstat's run-queue time at the last read
    wait_ns: u64,
    read_at: Instant,
}

/// The accounts of one process's threads.
#[derive(Debug)]
pub struct CpuTime {
    pid: u32,
    threads: HashMap<u32, Account>,
    /// the kept files, by host TID
    files: HashMap<u32, File>,
    buf: [u8; 96],
}

impl CpuTime {
    /// No thread read yet.
    pub fn new(pid: u32) -> CpuTime {
        CpuTime {
            pid,
            threads: HashMap::new(),
            files: HashMap::new(),
            buf: [0; 96],
        }
    }

    /// Reads thread `tid`'s clock and credits what it had since the last credit, in periods of
    /// `period_ns`. A thread seen for the first time is credited one period if it is on a CPU
    /// now (`running`), as a tick without the clock would; `None` if its clock cannot be read
    /// (it exited, or the kernel has no schedstat).
    pub fn credit(&mut self, tid: u32, period_ns: u64, running: bool) -> Option<Credit> {
        let (run_ns, wait_ns) = self.read(tid)?;
        let now = Instant::now();
        let period_ns = period_ns.max(1);
        let account = self.threads.entry(tid).or_insert_with(|| Account {
            run_ns,
            credited_ns: if running {
                run_ns.saturating_sub(period_ns)
            } else {
                run_ns
            },
            wait_ns,
            read_at: now,
        });
        let credit_ns = run_ns.saturating_sub(account.credited_ns);
        let periods = credit_ns / period_ns;
        account.credited_ns += periods * period_ns;
        let credit = Credit {
            periods,
            runqueue_ns: wait_ns.saturating_sub(account.wait_ns),
            ran_ns: run_ns.saturating_sub(account.run_ns),
            elapsed_ns: now
                .saturating_duration_since(account.read_at)
                .as_nanos()
                .try_into()
                .unwrap_or(u64::MAX),
        };
        account.run_ns = run_ns;
        account.wait_ns = wait_ns;
        account.read_at = now;
        Some(credit)
    }

    /// Forgets the threads not in `live` (host TIDs): they exited.
    pub fn retain(&mut self, live: impl Fn(u32) -> bool) {
        self.threads.retain(|&tid, _| live(tid));
        self.files.retain(|&tid, _| live(tid));
    }

    /// schedstat's run and wait times of `tid`, through its kept file (opened at first).
    fn read(&mut self, tid: u32) -> Option<(u64, u64)> {
        if let Some(file) = self.files.get(&tid) {
            match file.read_at(&mut self.buf, 0) {
                Ok(n) if n > 0 => return parse_schedstat(&self.buf[..n]),
                // Exited, or its ID now names another thread: a new account, opened again.
                _ => {
                    self.files.remove(&tid);
                    self.threads.remove(&tid);
                }
            }
        }
        let path = format!("/proc/{}/task/{tid}/schedstat", self.pid);
        let file = File::open(path).ok()?;
        let n = file.read_at(&mut self.buf, 0).ok()?;
        let times = parse_schedstat(&self.buf[..n])?;
        if self.threads.len() < MAX_OPEN {
            self.files.insert(tid, file);
        }
        Some(times)
    }
}

/// `run_ns wait_ns timeslices`.
fn parse_schedstat(text: &[u8]) -> Option<(u64, u64)> {
    let text = std::str::from_utf8(text).ok()?;
    let mut fields = text.split_ascii_whitespace().map(|f| f.parse::<u64>().ok());
    Some((fields.next()??, fields.next()??))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn schedstat_lines_parse() {
        assert_eq!(parse_schedstat(b"1234 567 8\n"), Some((1234, 567)));
        assert_eq!(parse_schedstat(b"0 3409584 1"), Some((0, 3409584)));
        assert_eq!(parse_schedstat(b"12"), None);
        assert_eq!(parse_schedstat(b"x y z"), None);
    }

    /// A spinning thread is credited about the CPU time it had, in whole periods, and a thread
    /// seen for the first time while running gets one period.
    #[test]
    fn a_spinning_thread_is_credited_its_cpu_time() {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let spin = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                tx.send(nix::unistd::gettid().as_raw() as u32)
                    .expect("send");
                while !stop.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        };
        let tid = rx.recv().expect("tid");
        let mut cpu = CpuTime::new(std::process::id());
        let period = 1_000_000;
        // Until it has run a period, a thread has no period to credit (on a loaded host that
        // takes a while).
        let deadline = Instant::now() + Duration::from_secs(30);
        while cpu.read(tid).expect("readable").0 < period {
            assert!(Instant::now() < deadline, "the spinner never ran 1 ms");
            std::thread::yield_now();
        }
        let first = cpu.credit(tid, period, true).expect("readable");
        assert_eq!(first.periods, 1, "{first:?}");
        let mut periods = 0;
        let mut ran = 0;
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(200) {
            std::thread::sleep(Duration::from_millis(10));
            let c = cpu.credit(tid, period, true).expect("readable");
            periods += c.periods;
            ran += c.ran_ns;
        }
        stop.store(true, Ordering::Relaxed);
        spin.join().expect("join");
        // Every ns it ran is credited, but the carried remainder under one period.
        assert!(ran > 0);
        assert!(
            periods * period <= ran + period,
            "{periods} periods, {ran} ns"
        );
        assert!(
            periods * period + period >= ran,
            "{periods} periods, {ran} ns"
        );
        // A thread that does not exist has no clock.
        assert_eq!(cpu.credit(u32::MAX, period, true), None);
    }
}
