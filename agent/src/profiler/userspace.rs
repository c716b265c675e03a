//! The userspace backend of the host profiler: where BPF cannot load (or is not asked for), the
//! userspace sampler's timer has every tracked process read through `process_vm_readv` at each
//! tick, and the samples go into the processes' profiles like the BPF backend's.

use std::collections::HashMap;
use std::time::Instant;

use crate::aggregate::WaitReason;
use crate::sampler::userspace::{ProcessRead, SamplerStats, UserspaceConfig, UserspaceSampler};
use crate::unwind::native::{NativeMix, NativeUnwinder};
use crate::unwind::Unwinder;

use super::process::Collected;
use super::{HostConfig, Mode};

/// Ticks per tick timed for the CPU budget: reading a thread's CPU clock is a system call, two
/// per tick would add a noticeable share to a tick's cost.
const TIMED_EVERY: u64 = 8;

/// The userspace sampler and the unwinders of the processes it reads.
pub(super) struct UserspaceBackend {
    pub sampler: UserspaceSampler,
    /// host PID → the unwinder that reads it
    unwinders: HashMap<u32, Unwinder>,
}

impl UserspaceBackend {
    /// The backend with no process yet: the host profiler adds them as discovery finds them.
    pub fn new(config: &HostConfig) -> UserspaceBackend {
        // Native stacks stop each process around its sample: only where the userspace mode is
        // asked for by name, never as the fallback of a host-wide run.
        let native_stacks = config.native_stacks && config.mode == Mode::Userspace;
        let sampler = UserspaceSampler::new(UserspaceConfig {
            rate_hz: config.rate_hz,
            blocking: config.blocking,
            idle: config.idle,
            native_stacks,
            debug_dirs: config.debug_dirs.clone(),
        });
        UserspaceBackend {
            sampler,
            unwinders: HashMap::new(),
        }
    }

    pub fn track(&mut self, unwinder: Unwinder) {
        self.unwinders.insert(unwinder.target().pid, unwinder);
    }

    /// Stops reading `pid`; its unwinder, if it was read.
    pub fn untrack(&mut self, pid: u32) -> Option<Unwinder> {
        self.sampler.forget(pid);
        self.unwinders.remove(&pid)
    }

    pub fn unwinders(&self) -> impl Iterator<Item = &Unwinder> {
        self.unwinders.values()
    }

    /// Waits for the sampler's next tick, until `until` at most; true when it came.
    pub fn wait(&mut self, until: Instant) -> bool {
        self.sampler.wait(Some(until))
    }

    pub fn stats(&self) -> SamplerStats {
        self.sampler.stats()
    }

    pub fn native_mix(&self) -> NativeMix {
        self.sampler.native_mix()
    }

    pub fn native_unwinders(&self) -> impl Iterator<Item = &NativeUnwinder> {
        self.sampler.native_unwinders()
    }

    /// One read of every tracked process, into its profile; returns the processes found gone.
    /// One tick in [`TIMED_EVERY`] is timed and counted for all of them in
    /// [`HostStats::drain_cpu_ns`](super::HostStats::drain_cpu_ns).
    pub fn collect(&mut self, out: &mut Collected) -> Vec<u32> {
        let timed = self.sampler.stats().ticks.is_multiple_of(TIMED_EVERY);
        let cpu_before = timed.then(super::thread_cpu_ns);
        let mut gone = Vec::new();
        for (&pid, unwinder) in &mut self.unwinders {
            match self.sampler.read_process(pid, unwinder) {
                ProcessRead::Samples(samples) => {
                    for s in &samples {
                        out.add_periods(&s.sample, s.periods);
                        if s.runqueue_ns > 0 {
                            out.add_off_cpu(&s.sample, WaitReason::Cpu, s.runqueue_ns);
                        }
                    }
                }
                ProcessRead::Failed => out.add_dropped(pid, 1),
                ProcessRead::Gone => gone.push(pid),
            }
        }
        if let Some(before) = cpu_before {
            out.stats.drain_cpu_ns += TIMED_EVERY * super::thread_cpu_ns().saturating_sub(before);
        }
        gone.sort_unstable();
        gone
    }
}
