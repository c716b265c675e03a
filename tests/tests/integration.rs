//! pyagent's integration tests: real interpreters of the matrix (`cargo xtask pythons`), real
//! target processes, the real `pyagent` binary. One binary, a module per topic.

#[path = "integration/cli.rs"]
mod cli;
#[path = "integration/ebpf.rs"]
mod ebpf;
#[path = "integration/frame_cache.rs"]
mod frame_cache;
#[path = "integration/resolver.rs"]
mod resolver;
#[path = "integration/service.rs"]
mod service;
