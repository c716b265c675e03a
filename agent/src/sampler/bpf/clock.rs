//! The cpu-clock perf events the sampling program runs on, opened here instead of by aya, and
//! what the kernel says about them: the ticks it throttled.
//!
//! The kernel throttles a sampling event whose interrupts exceed `perf_event_max_sample_rate`
//! per second within one scheduler tick (`perf_event_max_sample_rate / HZ`; on a PMU the kernel
//! also lowers that rate by itself when interrupts take longer than `perf_cpu_time_max_percent`
//! allows). A throttled event stops firing until the next tick: those ticks are never walked, and
//! nothing in the program sees them. The kernel writes `PERF_RECORD_THROTTLE` and
//! `PERF_RECORD_UNTHROTTLE`, with their times, into the event's own ring buffer. aya 0.14 keeps
//! the event's descriptor to itself, so the events are opened here (`perf_event_open`, the same
//! attributes aya uses), each with a one-page ring for those records (a program attached to the
//! event returns 0, so the kernel writes no samples there), and the program is attached with
//! `PERF_EVENT_IOC_SET_BPF`. Ticks lost = time throttled × rate, up to a tick per episode, for
//! episodes begun on a busy CPU (see [`LONGEST_TICK_NS`]: an idle CPU stays throttled without
//! losing anything).
//!
//! (Comparing the program's run count with the ticks expected from the elapsed time was the
//! other way: it cannot tell throttling from a vCPU the host did not run, which on these VMs is a
//! fifth of the time, and a thread-scoped event would need the thread's CPU time anyway.)

use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use aya::programs::perf_event::PerfEventScope;
use aya_obj::generated::{
    perf_event_sample_format::{PERF_SAMPLE_RAW, PERF_SAMPLE_TID},
    perf_event_type, PERF_EVENT_IOC_ENABLE, PERF_EVENT_IOC_SET_BPF,
};

use crate::sampler::perf_event::{self, ioctl, PerfRing, Record};

/// Data pages of each event's ring (a power of two): throttle and unthrottle records are 40 bytes,
/// up to two per tick and event (an unthrottle, then a throttle again), and the ring is read at
/// every collection (about 10 a second): 2 KB between reads at HZ 250, up to 8 KB at HZ 1000, where
/// a throttled-every-tick event can fill it. A full ring loses records (counted as
/// `lost_records`). Every page is locked memory counted against `perf_event_mlock_kb` (516 KiB per
/// user by default) for each CPU's event, so the ring stays at one.
const RING_DATA_PAGES: usize = 1;

/// What the kernel reported about the events since they were opened.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Throttling {
    /// Times an event was throttled.
    pub episodes: u64,
    /// Of those, times on a CPU that was idle when the event reached its limit: they lose
    /// nothing while it stays idle (see [`LONGEST_TICK_NS`]), and are not counted as lost ticks.
    pub idle_episodes: u64,
    /// Ticks lost while throttled on a busy CPU (time throttled, up to [`LONGEST_TICK_NS`],
    /// × rate, rounded; at least 1 per episode).
    pub lost_ticks: u64,
    /// Records lost from the event's own ring (its reader fell behind): the throttling they
    /// would have reported is not counted.
    pub lost_records: u64,
}

/// A failed [`ClockEvents::reopen`].
#[derive(Debug)]
pub struct ReopenError {
    /// Why the events could not be opened at the new rate.
    pub new: std::io::Error,
    /// The old rate and why they could not be opened again at it: then no event is open.
    pub restore: Option<(u64, std::io::Error)>,
}

/// One cpu-clock event with the program attached, and its ring.
struct ClockEvent {
    ring: PerfRing,
    fd: OwnedFd,
    /// the throttle episode under way
    episode: Episode,
}

/// The cpu-clock events of every scope, sampling at one rate. Dropping them detaches the program.
pub struct ClockEvents {
    events: Vec<ClockEvent>,
    rate_hz: u64,
    /// Totals of events closed before (a rate change opens new ones).
    throttling: Throttling,
}

impl ClockEvents {
    /// Opens a cpu-clock event at `rate_hz` samples a second for each scope and attaches the
    /// program whose descriptor is `program` to it.
    pub fn open(
        program: BorrowedFd<'_>,
        scopes: &[PerfEventScope],
        rate_hz: u64,
    ) -> std::io::Result<Self> {
        let events = scopes
            .iter()
            .map(|&scope| ClockEvent::open(program, scope, rate_hz))
            .collect::<std::io::Result<_>>()?;
        Ok(ClockEvents {
            events,
            rate_hz,
            throttling: Throttling::default(),
        })
    }

    /// Closes the events and opens new ones at `rate_hz`, keeping the throttling totals. If
    /// the new ones cannot be opened, the events are opened again at the old rate before the
    /// error is returned: a failed rate change must not leave the program without events (the
    /// sampler would go quiet while its rate still reads as before). If that fails too, the
    /// error says so and there are no events until a later `reopen` succeeds.
    pub fn reopen(
        &mut self,
        program: BorrowedFd<'_>,
        scopes: &[PerfEventScope],
        rate_hz: u64,
    ) -> Result<(), ReopenError> {
        let before = self.throttling();
        let old_rate = self.rate_hz;
        // Never two events at once: that would count a tick twice.
        self.events.clear();
        let result = match ClockEvents::open(program, scopes, rate_hz) {
            Ok(events) => {
                *self = events;
                Ok(())
            }
            Err(new) => match ClockEvents::open(program, scopes, old_rate) {
                Ok(events) => {
                    *self = events;
                    Err(ReopenError { new, restore: None })
                }
                Err(restore) => Err(ReopenError {
                    new,
                    restore: Some((old_rate, restore)),
                }),
            },
        };
        self.throttling = before;
        result
    }

    /// Whether no event is open (a rate change and its restore both failed).
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// Reads the events' rings and returns the totals since the first events were opened.
    pub fn throttling(&mut self) -> Throttling {
        let rate = self.rate_hz;
        for event in &mut self.events {
            event.read_ring(rate, &mut self.throttling);
        }
        self.throttling
    }
}

impl ClockEvent {
    fn open(program: BorrowedFd<'_>, scope: PerfEventScope, rate_hz: u64) -> std::io::Result<Self> {
        let mut attr = perf_event::cpu_clock_attr();
        // With `sample_id_all`, each throttle record names the task the CPU ran when it was
        // written (pid 0: the idle task). The program returns 0, so no sample is ever written.
        attr.sample_type = PERF_SAMPLE_RAW as u64 | PERF_SAMPLE_TID as u64;
        attr.set_sample_id_all(1);
        attr.set_freq(1);
        attr.__bindgen_anon_1.sample_freq = rate_hz;
        // Enabled once the program is attached: no tick without it.
        attr.set_disabled(1);
        let (pid, cpu) = match scope {
            PerfEventScope::CallingProcess { cpu } => (0, cpu.map_or(-1, |c| c as i32)),
            PerfEventScope::OneProcess { pid, cpu } => (pid as i32, cpu.map_or(-1, |c| c as i32)),
            PerfEventScope::AllProcessesOneCpu { cpu } => (-1, cpu as i32),
        };
        let fd = perf_event::open(&attr, pid, cpu)?;
        let ring = PerfRing::map(&fd, RING_DATA_PAGES)?;
        ioctl(
            &fd,
            PERF_EVENT_IOC_SET_BPF,
            program.as_raw_fd() as libc::c_ulong,
        )?;
        ioctl(&fd, PERF_EVENT_IOC_ENABLE, 0)?;
        Ok(ClockEvent {
            ring,
            fd,
            episode: Episode::default(),
        })
    }

    /// Reads the records the kernel wrote since the last call, and frees their room.
    fn read_ring(&mut self, rate_hz: u64, totals: &mut Throttling) {
        let episode = &mut self.episode;
        self.ring
            .drain(|record| episode.account(record, rate_hz, totals));
    }
}

/// An event's throttling as its records tell it: when the episode under way began, and whether
/// its CPU was idle then.
#[derive(Debug, Default)]
struct Episode {
    since: Option<(u64, bool)>,
}

impl Episode {
    /// Adds one ring record to `totals`.
    fn account(&mut self, record: &Record, rate_hz: u64, totals: &mut Throttling) {
        let (kind, len, word) = (record.kind, record.len, |i| record.word(i));
        if kind == perf_event_type::PERF_RECORD_THROTTLE as u32 && len >= 16 {
            totals.episodes += 1;
            // time, id, stream_id, then the sample id: pid and tid of the current task.
            let idle = len >= 40 && record.bytes[32..36] == [0; 4];
            totals.idle_episodes += u64::from(idle);
            self.since = Some((word(8), idle));
        } else if kind == perf_event_type::PERF_RECORD_UNTHROTTLE as u32 && len >= 16 {
            if let Some((since, idle)) = self.since.take() {
                if !idle {
                    totals.lost_ticks += episode_ticks(word(8).saturating_sub(since), rate_hz);
                }
            }
        } else if kind == perf_event_type::PERF_RECORD_LOST as u32 && len >= 24 {
            totals.lost_records += word(16);
        }
    }
}

impl Drop for ClockEvent {
    fn drop(&mut self) {
        // Closing the descriptor detaches the program; disabling first stops the ticks at once.
        perf_event::disable(&self.fd);
    }
}

/// The longest scheduler tick (`HZ` is at least 100): what one throttle episode of a busy CPU
/// can cost at most. The kernel counts an event's interrupts per tick and unthrottles it at the
/// next tick, so on a CPU that runs anything a throttle ends within a tick.
///
/// An idle CPU has no tick (NO_HZ): its interrupts add up across the idle stretch until they
/// reach the per-tick limit (400 at 100,000 a second and HZ 250: 80 ms of idle at 5 kHz, 4 s at
/// 99 Hz), and it stays throttled until a tick comes, which needs the CPU awake for a tick's
/// length. Such an episode (the idle task current when it began) is not counted as lost.
/// Counted whole, they reported 11,901 ticks lost beside a target that lost 10 (`record -r 5000
/// -d 3` with the other CPU idle: 14,990 of 15,000 samples; none throttled with that CPU busy).
/// What this misses: a process that runs in bursts shorter than a tick on an otherwise idle CPU
/// loses the bursts' ticks until the episode ends, uncounted; and the pid in a throttle record is
/// in the agent's PID namespace, so an agent outside the host's (no `--pid=host`) takes every
/// task it cannot see for the idle task.
const LONGEST_TICK_NS: u64 = 10_000_000;

/// Ticks a throttle episode of `ns` nanoseconds lost at `rate_hz`: its length, up to the longest
/// tick.
fn episode_ticks(ns: u64, rate_hz: u64) -> u64 {
    ticks_in(ns.min(LONGEST_TICK_NS), rate_hz)
}

/// Ticks of a `rate_hz` clock in `ns` nanoseconds, at least 1 (a throttle always costs one).
fn ticks_in(ns: u64, rate_hz: u64) -> u64 {
    let ticks = (u128::from(ns) * u128::from(rate_hz) + 500_000_000) / 1_000_000_000;
    u64::try_from(ticks).unwrap_or(u64::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_throttle_costs_the_ticks_of_its_duration_and_at_least_one() {
        assert_eq!(ticks_in(4_000_000, 999), 4);
        assert_eq!(ticks_in(1_000_000_000, 99), 99);
        assert_eq!(ticks_in(10, 99), 1);
    }

    /// A busy CPU's throttle ends at its next tick: an episode recorded longer (a late
    /// unthrottle record) counts at most the longest tick's ticks.
    #[test]
    fn a_throttle_counts_at_most_the_longest_tick() {
        assert_eq!(episode_ticks(2_000_000_000, 5000), 50);
        assert_eq!(episode_ticks(2_000_000_000, 99), 1);
        // A busy CPU's episode, within a 4 ms tick (HZ 250), counts whole.
        assert_eq!(episode_ticks(4_000_000, 999), 4);
    }

    /// A throttle or unthrottle record as the kernel writes it with `sample_id_all` and
    /// `PERF_SAMPLE_TID`: header, time, id, stream id, pid, tid.
    fn throttle_record(kind: perf_event_type, time: u64, pid: u32) -> Record {
        let mut r = [0u8; 40];
        r[0..4].copy_from_slice(&(kind as u32).to_ne_bytes());
        r[6..8].copy_from_slice(&40u16.to_ne_bytes());
        r[8..16].copy_from_slice(&time.to_ne_bytes());
        r[32..36].copy_from_slice(&pid.to_ne_bytes());
        r[36..40].copy_from_slice(&pid.to_ne_bytes());
        Record {
            kind: kind as u32,
            len: 40,
            bytes: r,
        }
    }

    /// An episode that began with the idle task current loses nothing; one that began in a
    /// task counts its length in ticks.
    #[test]
    fn only_episodes_begun_on_a_busy_cpu_lose_ticks() {
        use perf_event_type::{PERF_RECORD_THROTTLE as T, PERF_RECORD_UNTHROTTLE as U};
        let mut totals = Throttling::default();
        let mut episode = Episode::default();
        let mut feed =
            |kind, time, pid| episode.account(&throttle_record(kind, time, pid), 5000, &mut totals);
        // Idle for 2 s: throttled 80 ms in, unthrottled when the CPU woke.
        feed(T, 80_000_000, 0);
        feed(U, 2_000_000_000, 4242);
        // Busy: throttled for 4 ms, one tick.
        feed(T, 3_000_000_000, 4242);
        feed(U, 3_004_000_000, 4242);
        assert_eq!(totals.episodes, 2);
        assert_eq!(totals.idle_episodes, 1);
        assert_eq!(totals.lost_ticks, 20);
    }
}
