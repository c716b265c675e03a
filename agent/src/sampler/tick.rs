//! What wakes the userspace sampler once a period: a cpu-clock perf event on its own CPU where it
//! may open one, a sleep to the next tick where it may not.
//!
//! Sleeping to the next tick arms a high-resolution timer in every call, and on these VMs each
//! arming and expiry of that timer costs the sleeper dearly: a C loop of absolute
//! `clock_nanosleep` at 1 kHz used 17–21 µs of its own CPU time a wake (rusage), at any rate
//! from 1 to 20 kHz, and one whose deadline had already passed 16.6 µs, more than a shallow
//! sample's own work. A cpu-clock perf event is a timer the kernel re-arms inside its own
//! interrupt; the sampler only waits on the event's ring (`ppoll`), and the event's tick record
//! wakes it: 5.4–6.6 µs a wake in the same loop. Measured on the CPU the waker ran on
//! (`cpuidle` residency), the whole machine spent about 16 µs a wake sleeping and 8–12 µs with
//! the event: the interrupt's work moves to the interrupted CPU (idle, here), and the total is
//! smaller too.
//!
//! The event counts time on one CPU, the one the sampler runs on when it opens it. The thread is
//! not pinned: the scheduler still moves it off a CPU that another task keeps busy, and a
//! sampler found on another CPU at [`MOVES_AFTER`] wakes in a row moves its event there (woken
//! from another CPU, a wake costs about 8.5 µs instead of 5–6).
//!
//! A CPU-wide event needs `CAP_PERFMON` (or `perf_event_paranoid` ≤ 0): without it the sampler
//! sleeps as before, and so it does above `perf_event_max_sample_rate`, where the kernel would
//! throttle the event at every scheduler tick (it does not refuse an event set by its period).
//!
//! On an idle CPU the kernel throttles such an event once its interrupts reach the per-tick limit
//! with no scheduler tick in between (NO_HZ: `perf_event_max_sample_rate / HZ`, 400 at the
//! defaults): seen here from 2 kHz up. So every wait also has a deadline, two periods and a
//! quarter after the last tick, after the event's next tick and the one after it (earlier, the
//! deadline's timer would be the CPU's next and cost its programming again: 10 µs a wake at one
//! and a half periods). A wait that reaches it is a tick, and the ticks after it come from
//! deadlines a period apart, as a sleep's would, until the event ticks again.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use aya_obj::generated::perf_event_type::{
    PERF_RECORD_LOST, PERF_RECORD_SAMPLE, PERF_RECORD_THROTTLE,
};

use nix::poll::{ppoll, PollFd, PollFlags};
use nix::sys::time::TimeSpec;

use crate::sampler::perf_event::{self, max_sample_rate, PerfRing};

/// Wakes in a row on another CPU after which the event moves to that CPU.
pub const MOVES_AFTER: u32 = 8;

/// Where the sampler's ticks come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TickSource {
    /// A cpu-clock perf event on the sampler's CPU.
    PerfEvent,
    /// A sleep to the next tick.
    Sleep,
}

impl std::fmt::Display for TickSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TickSource::PerfEvent => "a cpu-clock perf event",
            TickSource::Sleep => "sleeping",
        })
    }
}

/// How the ticks came.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TickStats {
    /// ticks the perf event gave
    pub event_ticks: u64,
    /// ticks that came from a deadline instead: sleeping, or the event throttled or stalled
    pub deadline_ticks: u64,
    /// times the kernel throttled the event
    pub throttles: u64,
    /// times the event moved to the CPU the sampler had moved to
    pub moves: u64,
}

/// One wait's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// A tick.
    Tick {
        /// ticks due before it that were not taken: the sampler was busy, or the event late
        missed: u64,
    },
    /// The wait's own limit came first.
    Until,
    /// A signal arrived.
    Interrupted,
}

/// The cpu-clock event and its ring.
struct ClockTick {
    fd: OwnedFd,
    ring: PerfRing,
    cpu: u32,
}

impl ClockTick {
    /// A cpu-clock event on `cpu` that writes a record (nothing but its header) every
    /// `period` and wakes its reader at each.
    fn open(cpu: u32, period: Duration) -> std::io::Result<ClockTick> {
        let mut attr = perf_event::cpu_clock_attr();
        attr.__bindgen_anon_1.sample_period = period.as_nanos().max(1) as u64;
        attr.__bindgen_anon_2.wakeup_events = 1;
        let fd = perf_event::open(&attr, -1, cpu as i32)?;
        let ring = PerfRing::map(&fd, 1)?;
        Ok(ClockTick { fd, ring, cpu })
    }

    /// Ticks recorded since the last call (a lost-records record counts its ticks); throttle
    /// records are added to `throttles`.
    fn take(&mut self, throttles: &mut u64) -> u64 {
        let mut ticks = 0;
        self.ring.drain(|r| {
            if r.kind == PERF_RECORD_SAMPLE as u32 {
                ticks += 1;
            } else if r.kind == PERF_RECORD_LOST as u32 && r.len >= 24 {
                ticks += r.word(16);
            } else if r.kind == PERF_RECORD_THROTTLE as u32 {
                *throttles += 1;
            }
        });
        ticks
    }
}

impl Drop for ClockTick {
    fn drop(&mut self) {
        perf_event::disable(&self.fd);
    }
}

/// The sampler's clock. The first wait returns at once: a run samples as it starts.
///
/// Ticks the sampler could not take on time are counted as missed. From the event: how late its
/// ticks came against the period, the fractions carried from tick to tick (`late_by`): the
/// kernel's ticks are a period apart, so the wake-up's jitter cancels out, while a sampler that
/// was busy, or an event the kernel throttled and restarted late, adds up to whole ticks. From
/// deadlines and sleeping: the due times are a period apart, and a tick stands for the last
/// one it passed.
pub struct Ticker {
    period: Duration,
    event: Option<ClockTick>,
    /// the time the last tick stands for (none before the first)
    last: Option<Instant>,
    /// periods the event's ticks came late by, carried over (never below -1/2)
    late_by: f64,
    /// the last tick came from a deadline: the next deadline is a period after it
    on_deadlines: bool,
    /// wakes in a row on a CPU other than the event's
    away: u32,
    stats: TickStats,
}

impl Ticker {
    /// Ticks at `rate_hz`, from a perf event on the calling thread's CPU where the kernel
    /// allows one and would not throttle it at every scheduler tick, from sleeping otherwise.
    pub fn new(rate_hz: u32) -> Ticker {
        let mut ticker = Ticker::sleeping(rate_hz);
        if max_sample_rate().is_some_and(|max| u64::from(rate_hz) > max) {
            tracing::debug!(
                rate_hz,
                "above kernel.perf_event_max_sample_rate: sleeping between ticks"
            );
            return ticker;
        }
        match current_cpu().map(|cpu| ClockTick::open(cpu, ticker.period)) {
            Some(Ok(event)) => ticker.event = Some(event),
            Some(Err(e)) => {
                tracing::debug!(error = %e, "no cpu-clock event for the ticks: sleeping")
            }
            None => tracing::debug!("the current CPU is unknown: sleeping between ticks"),
        }
        ticker
    }

    /// Ticks at `rate_hz` from sleeping.
    pub fn sleeping(rate_hz: u32) -> Ticker {
        Ticker {
            period: Duration::from_secs_f64(1.0 / f64::from(rate_hz.max(1))),
            event: None,
            last: None,
            late_by: 0.0,
            on_deadlines: false,
            away: 0,
            stats: TickStats::default(),
        }
    }

    /// Where the ticks come from now.
    pub fn source(&self) -> TickSource {
        if self.event.is_some() {
            TickSource::PerfEvent
        } else {
            TickSource::Sleep
        }
    }

    /// How the ticks came so far.
    pub fn stats(&self) -> TickStats {
        self.stats
    }

    /// Waits for the next tick, until `until` at most.
    pub fn wait(&mut self, until: Option<Instant>) -> Wait {
        let Some(mut last) = self.last else {
            self.last = Some(Instant::now());
            return Wait::Tick { missed: 0 };
        };
        loop {
            let throttles = &mut self.stats.throttles;
            let records = self.event.as_mut().map_or(0, |e| e.take(throttles));
            let now = Instant::now();
            if records > 0 {
                if self.on_deadlines && now < last + self.period / 2 {
                    // The tick a deadline just took: the event ticks again, the next record is
                    // the next tick.
                    self.on_deadlines = false;
                    continue;
                }
                self.on_deadlines = false;
                self.stats.event_ticks += 1;
                self.late_by += (now - last).as_secs_f64() / self.period.as_secs_f64() - 1.0;
                let missed = self.late_by.max(0.0).floor();
                self.late_by = (self.late_by - missed).max(-0.5);
                self.last = Some(now);
                self.follow_to_cpu();
                return Wait::Tick {
                    missed: missed as u64,
                };
            }
            if until.is_some_and(|u| now >= u) {
                return Wait::Until;
            }
            // Sleeping, or the event throttled: a tick by the clock, a period after the last,
            // or while the event is expected, after its next two ticks (see the module's doc).
            let deadline = match (&self.event, self.on_deadlines) {
                (Some(_), false) => last + self.period * 9 / 4,
                _ => last + self.period,
            };
            if now >= deadline {
                // The last due time it passed: the ones between are missed.
                let passed = self.periods_between(last, now).max(1);
                last += self.periods(passed);
                self.last = Some(last);
                self.late_by = 0.0;
                self.on_deadlines = true;
                self.stats.deadline_ticks += 1;
                self.follow_to_cpu();
                return Wait::Tick { missed: passed - 1 };
            }
            let limit = until.map_or(deadline, |u| u.min(deadline));
            let Some(event) = &self.event else {
                std::thread::sleep(limit - now);
                continue;
            };
            match poll_readable(event.fd.as_fd(), limit - now) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => return Wait::Interrupted,
                Err(e) => {
                    tracing::warn!(error = %e, "waiting on the cpu-clock event failed: sleeping between ticks from now on");
                    self.event = None;
                }
            }
        }
    }

    /// Whole periods from `from` to `to` (0 if `to` is earlier).
    fn periods_between(&self, from: Instant, to: Instant) -> u64 {
        (to.saturating_duration_since(from).as_nanos() / self.period.as_nanos().max(1)) as u64
    }

    /// `n` periods.
    fn periods(&self, n: u64) -> Duration {
        Duration::from_nanos((self.period.as_nanos() as u64).saturating_mul(n))
    }

    /// After a tick: the event follows the sampler to a CPU it stays on (also while the event is
    /// silent: an idle CPU left behind may keep it throttled).
    fn follow_to_cpu(&mut self) {
        let Some(event) = &self.event else { return };
        let Some(cpu) = current_cpu() else { return };
        if cpu == event.cpu {
            self.away = 0;
            return;
        }
        self.away += 1;
        if self.away < MOVES_AFTER {
            return;
        }
        self.away = 0;
        // Never two events at once: each would tick.
        self.event = None;
        match ClockTick::open(cpu, self.period) {
            Ok(moved) => {
                self.event = Some(moved);
                self.stats.moves += 1;
            }
            Err(e) => {
                tracing::warn!(cpu, error = %e, "cannot open the cpu-clock event on the sampler's new CPU: sleeping between ticks from now on");
            }
        }
    }
}

/// Waits until `fd` is readable or `timeout` passes; `Interrupted` when a signal came.
fn poll_readable(fd: BorrowedFd<'_>, timeout: Duration) -> std::io::Result<()> {
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
    ppoll(&mut fds, Some(TimeSpec::from_duration(timeout)), None)?;
    // An event the kernel ended (its CPU went offline) stays ready with nothing to read.
    let ended = PollFlags::POLLERR | PollFlags::POLLHUP | PollFlags::POLLNVAL;
    match fds[0].revents() {
        Some(r) if r.intersects(ended) => Err(std::io::Error::other(format!(
            "the event's descriptor reports {r:?}"
        ))),
        _ => Ok(()),
    }
}

/// The CPU the calling thread runs on.
fn current_cpu() -> Option<u32> {
    nix::sched::sched_getcpu()
        .ok()
        .and_then(|cpu| u32::try_from(cpu).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sleeping: the first wait returns at once, the next a period later, and a sampler that
    /// fell behind by several periods is told how many ticks it missed.
    #[test]
    fn a_sleeping_ticker_counts_the_ticks_it_fell_behind() {
        let mut t = Ticker::sleeping(1000);
        assert_eq!(t.source(), TickSource::Sleep);
        assert_eq!(t.wait(None), Wait::Tick { missed: 0 });
        assert!(matches!(t.wait(None), Wait::Tick { .. }));
        let behind = Instant::now();
        while behind.elapsed() < Duration::from_millis(5) {
            std::hint::spin_loop();
        }
        match t.wait(None) {
            Wait::Tick { missed } => assert!(missed >= 4, "missed {missed}"),
            other => panic!("{other:?}"),
        }
    }

    /// Without `CAP_PERFMON` and `CAP_SYS_ADMIN` a CPU-wide event is refused where
    /// `perf_event_paranoid` is above 0 (Debian's default is 2): the ticker sleeps. With either,
    /// the event opens. Capabilities are a thread's own: the test drops them in a thread of its
    /// own.
    #[test]
    fn without_perfmon_the_ticker_sleeps() {
        let paranoid: i32 = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
            .expect("perf_event_paranoid")
            .trim()
            .parse()
            .expect("a number");
        let [low, high] = capabilities();
        let perfmon = low.effective & (1 << CAP_SYS_ADMIN) != 0
            || high.effective & (1 << (CAP_PERFMON - 32)) != 0;
        if perfmon || paranoid <= 0 {
            assert_eq!(Ticker::new(100).source(), TickSource::PerfEvent);
        }
        let source = std::thread::spawn(|| {
            drop_effective_capabilities(&[CAP_PERFMON, CAP_SYS_ADMIN]);
            Ticker::new(100).source()
        })
        .join()
        .expect("the thread");
        let expected = if paranoid > 0 {
            TickSource::Sleep
        } else {
            TickSource::PerfEvent
        };
        assert_eq!(source, expected, "perf_event_paranoid {paranoid}");
    }

    const CAP_SYS_ADMIN: u32 = 21;
    const CAP_PERFMON: u32 = 38;

    #[repr(C)]
    struct CapHeader {
        version: u32,
        pid: i32,
    }

    /// One word of a thread's capability sets (capget/capset, version 3: two words).
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct CapData {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }

    const CAP_VERSION_3: u32 = 0x2008_0522;

    /// The calling thread's capability sets.
    fn capabilities() -> [CapData; 2] {
        let mut header = CapHeader {
            version: CAP_VERSION_3,
            pid: 0,
        };
        let mut data = [CapData::default(); 2];
        // SAFETY: a version 3 header and the two data words it fills.
        let got = unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) };
        assert_eq!(got, 0, "capget: {}", std::io::Error::last_os_error());
        data
    }

    /// Takes `caps` out of the calling thread's effective set.
    fn drop_effective_capabilities(caps: &[u32]) {
        let mut data = capabilities();
        for &cap in caps {
            data[(cap / 32) as usize].effective &= !(1 << (cap % 32));
        }
        let mut header = CapHeader {
            version: CAP_VERSION_3,
            pid: 0,
        };
        // SAFETY: a version 3 header and the two data words it reads.
        let set = unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) };
        assert_eq!(set, 0, "capset: {}", std::io::Error::last_os_error());
    }

    /// A limit before the next tick ends the wait there.
    #[test]
    fn a_wait_ends_at_its_limit() {
        for mut t in [Ticker::sleeping(1), Ticker::new(1)] {
            assert_eq!(t.wait(None), Wait::Tick { missed: 0 });
            let until = Instant::now() + Duration::from_millis(20);
            assert_eq!(t.wait(Some(until)), Wait::Until);
            assert!(Instant::now() >= until);
        }
    }
}
