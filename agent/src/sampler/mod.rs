//! Sampler stage: when samples are taken and where their raw data comes from.
//!
//! [`bpf`]: a perf-event BPF program on every CPU walks the frame chain of whatever Python
//! thread the CPU is running and hands raw frame addresses over a ring buffer.
//! [`userspace`]: a timer, woken by [`tick`], at whose ticks each tracked process is read through
//! `process_vm_readv` by the unwinder the conductor hands it (no privileges beyond ptrace rights,
//! no BPF); [`blocking`] optionally stops a process around its read, [`native_copy`] copies a
//! stopped thread's registers and stack; [`run_state`] tells it which threads are on a CPU. [`perf_event`] opens the
//! cpu-clock events both samplers use.
//! Both feed the same unwinder, symbolizer and aggregator, driven by the conductor
//! ([`crate::profiler`]). With off-CPU on, the BPF program also records a thread's stack as it
//! blocks and its wake-up (the conductor weighs the stack by the time between; [`off_cpu`]
//! classifies the wait).

pub mod blocking;
pub mod bpf;
pub mod cpu_time;
pub mod native_copy;
pub mod off_cpu;
pub mod perf_event;
pub mod run_state;
pub mod slots;
pub mod syscalls;
pub mod tick;
pub mod userspace;
