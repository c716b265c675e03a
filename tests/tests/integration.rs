//! pyagent's integration tests: real interpreters of the matrix (`cargo xtask pythons`), real
//! target processes, the real `pyagent` binary. One binary, a module per topic.

#[path = "integration/asyncio_tasks.rs"]
mod asyncio_tasks;
#[path = "integration/cli.rs"]
mod cli;
#[path = "integration/cycles.rs"]
mod cycles;
#[path = "integration/discovery.rs"]
mod discovery;
#[path = "integration/dist.rs"]
mod dist;
#[path = "integration/ebpf.rs"]
mod ebpf;
#[path = "integration/export.rs"]
mod export;
#[path = "integration/frame_cache.rs"]
mod frame_cache;
use rstest_reuse::template;

/// Every interpreter of the matrix (`cargo xtask pythons`): `#[apply(matrix)]` runs a test on
/// each, as `py`.
#[template]
#[rstest::rstest]
fn matrix(
    #[values(
        "py311-debian",
        "py311",
        "py312",
        "py313",
        "py313-static",
        "py313t",
        "py314",
        "py315"
    )]
    py: &str,
) {
}

#[path = "integration/gc_marker.rs"]
mod gc_marker;
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
#[path = "integration/symbol_sources.rs"]
mod symbol_sources;
#[path = "integration/torn.rs"]
mod torn;
#[path = "integration/trace_context.rs"]
mod trace_context;
