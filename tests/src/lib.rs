//! Harness of pyagent's integration tests: the interpreter matrix prepared by
//! `cargo xtask pythons` ([`Interpreter`], one per role of the shared table [`ROLES`]), Python
//! target processes ([`PythonProcess`]), the `pyagent` binary ([`agent`]), the real consumers
//! of its output ([`consumers`]), its HTTP server's client ([`http`]), scratch directories
//! ([`scratch`]) and waiting on a condition ([`wait`]). The tests themselves are in `tests/tests/integration.rs`, one binary.

pub mod agent;
pub mod cgroup;
pub mod consumers;
pub mod http;
pub mod pip;
pub mod process;
pub mod pythons;
pub mod scratch;
pub mod stacks;
pub mod wait;

pub use process::PythonProcess;
pub use pythons::{Capability, Interpreter, Libpython, ROLES};

/// Whether the tests run under CPU emulation (`cargo xtask kernels` boots other kernels under
/// QEMU's TCG and sets `PYAGENT_TEST_EMULATED=1`): the agent starts many times slower there,
/// so a check of time counted from the start of a recording allows for a late start.
pub fn emulated() -> bool {
    std::env::var("PYAGENT_TEST_EMULATED").is_ok_and(|v| v == "1")
}
