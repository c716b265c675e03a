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

/// One sample of every tracked process, into its profile.
pub(super) fn collect(sampler: &mut UserspaceSampler, out: &mut Collected) {
    let cpu_before = super::thread_cpu_ns();
    sampler.sample_once(&mut |sample| out.add(sample));
    out.stats.drain_cpu_ns += super::thread_cpu_ns().saturating_sub(cpu_before);
}
