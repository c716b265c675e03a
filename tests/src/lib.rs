//! Harness of pyagent's integration tests: the interpreter matrix prepared by
//! `cargo xtask pythons` ([`Interpreter`]) and Python target processes ([`PythonProcess`]).
//! The tests themselves are in `tests/tests/integration.rs`, one binary.

pub mod consumers;
pub mod process;
pub mod pythons;
pub mod stacks;

pub use process::PythonProcess;
pub use pythons::{Interpreter, Libpython, MATRIX};
