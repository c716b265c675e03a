//! pyagent's integration tests: real interpreters of the matrix (`cargo xtask pythons`), real
//! target processes, the real `pyagent` binary. One binary, a module per topic.

/// A template per capability of the interpreter table (`tests/build.rs`): `#[apply(matrix)]`
/// runs a test on every interpreter, `#[apply(with_asyncio_tasks)]` on those with asyncio task
/// introspection, and so on (`roles::Capability`), each interpreter as its own test. Every
/// capability has one, used by a test or not yet. A test that is not about one version's
/// layout or one build kind takes `#[apply(representative)]`, one interpreter per frame model
/// and threading (`roles::Capability::Representative`), or `representative_with_gil` and the
/// like: the same rule over the interpreters with that capability.
#[allow(unused_macros)]
mod matrices {
    use rstest_reuse::template;

    include!(concat!(env!("OUT_DIR"), "/matrices.rs"));
}
use matrices::*;

#[path = "integration/asyncio_tasks.rs"]
mod asyncio_tasks;
#[path = "integration/busy_host.rs"]
mod busy_host;
#[path = "integration/cli.rs"]
mod cli;
#[path = "integration/cycles.rs"]
mod cycles;
#[path = "integration/discovery.rs"]
mod discovery;
#[path = "integration/dist.rs"]
mod dist;
#[path = "integration/dump.rs"]
mod dump;
#[path = "integration/ebpf.rs"]
mod ebpf;
#[path = "integration/export.rs"]
mod export;
#[path = "integration/frame_cache.rs"]
mod frame_cache;
#[path = "integration/gc_marker.rs"]
mod gc_marker;
#[path = "integration/greenlets.rs"]
mod greenlets;
#[path = "integration/native_stacks.rs"]
mod native_stacks;
#[path = "integration/never_mix.rs"]
mod never_mix;
#[path = "integration/off_cpu.rs"]
mod off_cpu;
#[path = "integration/otlp.rs"]
mod otlp;
#[path = "integration/resolver.rs"]
mod resolver;
#[path = "integration/service.rs"]
mod service;
#[path = "integration/spans.rs"]
mod spans;
#[path = "integration/symbol_sources.rs"]
mod symbol_sources;
#[path = "integration/torn.rs"]
mod torn;
#[path = "integration/trace_context.rs"]
mod trace_context;
