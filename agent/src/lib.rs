//! pyagent: a sampling profiler for CPython.
//!
//! The data flows through one module per stage:
//! [`discovery`] (which processes run CPython, where their runtime is) →
//! [`offsets`] (CPython version → struct layout) →
//! [`memory`] (remote reads through a page cache) →
//! [`sampler`] (when to take a sample: BPF ring buffer or userspace timer) →
//! [`unwind`] (thread → frame chain, with the frame cache) →
//! [`symbolize`] (code object + instruction → function, file, line) →
//! [`aggregate`] (stacks → counts per profile window) →
//! [`export`] (pprof, collapsed stacks, flame graphs).
//! [`report`] reads an exported pprof file back (`pyagent spans`: where each span's time went).
//!
//! [`profiler`] is the conductor that drives them for a whole host (discovery, one backend,
//! each process's unwinder and aggregator); [`service`] runs it as a daemon and hands its
//! windows to the exporters. A sample flows forward through the stages and never comes back.

#![deny(missing_docs)]
pub mod aggregate;
pub mod config;
pub mod discovery;
pub mod dump;
pub mod export;
pub mod memory;
pub mod offsets;
pub mod profiler;
pub mod report;
pub mod sampler;
pub mod service;
pub mod symbolize;
pub mod unwind;

#[cfg(test)]
mod test_support;
