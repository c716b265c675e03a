//! The CPython test matrix in one place: [`ROLES`], the table of interpreter roles (what each
//! is, how `cargo xtask pythons` provides it), the capabilities derived from each row
//! ([`Capability`], among them the representative set a test not about one version's layout
//! runs on), and the shape of the `manifest.json` that `cargo xtask pythons` writes
//! and the tests and benchmarks read ([`Manifest`]).
//!
//! A crate of its own, depending on serde only, so that xtask (which must build with the Rust
//! toolchain alone), the test harness, and the test crate's build script (which turns the
//! capabilities into rstest templates) share it without linking each other.

mod capability;
mod layout;
mod manifest;
mod representative;
mod role;
mod table;
mod version;

pub use capability::Capability;
pub use layout::{FrameModel, GilLayout};
pub use manifest::{
    host_path, manifest_path, pythons_dir, Entry, LoadError, Manifest, NotInManifest, Peers,
    DEFAULT_DIR,
};
pub use role::{Build, Libpython, Role, SleepCall, Suite, Threading};
pub use table::{role, ROLES};
pub use version::Version;
