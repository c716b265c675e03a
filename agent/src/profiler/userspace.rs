//! The userspace backend of the host profiler: where BPF cannot load (or is not asked for), a
//! timer samples every tracked process through `process_vm_readv`, one sample per collection.

use crate::sampler::userspace::{UserspaceConfig, UserspaceSampler};

use super::process::Collected;
use super::HostConfig;

/// The userspace sampler with no process yet: the host profiler adds them as discovery finds
/// them.
pub(super) fn sampler_for(config: &HostConfig) -> UserspaceSampler {
    UserspaceSampler::empty(UserspaceConfig {
        rate_hz: config.rate_hz,
        duration: None,
        subprocesses: false,
        blocking: false,
        idle: false,
        native_stacks: false,
        debug_dirs: config.debug_dirs.clone(),
        unwind: config.unwind,
    })
}

/// Ticks per tick timed for the CPU budget: reading a thread's CPU clock is a system call
/// (about 0.8 µs on these VMs), two per tick would add some 6% to a 26 µs tick.
const TIMED_EVERY: u64 = 8;

/// One sample of every tracked process, into its profile. One tick in [`TIMED_EVERY`] is timed
/// and counted for all of them in [`HostStats::drain_cpu_ns`](super::HostStats::drain_cpu_ns).
pub(super) fn collect(sampler: &mut UserspaceSampler, out: &mut Collected) {
    if !sampler.stats().ticks.is_multiple_of(TIMED_EVERY) {
        sampler.sample_once(&mut |sample| out.add(sample));
        return;
    }
    let cpu_before = super::thread_cpu_ns();
    sampler.sample_once(&mut |sample| out.add(sample));
    out.stats.drain_cpu_ns += TIMED_EVERY * super::thread_cpu_ns().saturating_sub(cpu_before);
}
