//! The CPython test matrix that `cargo xtask pythons` prepares outside the repository: read
//! from its `manifest.json` (in `PYAGENT_PYTHONS_DIR`, default `/var/cache/pyagent/pythons`).
//! A missing manifest or interpreter is a test failure that names `cargo xtask pythons`,
//! never a skip.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use serde::Deserialize;

/// Where the matrix lives unless `PYAGENT_PYTHONS_DIR` says otherwise (as in `xtask`).
pub const DEFAULT_DIR: &str = "/var/cache/pyagent/pythons";

/// Names of every interpreter of the matrix, in manifest order.
pub const MATRIX: &[&str] = &[
    "py311-debian",
    "py311",
    "py312",
    "py313",
    "py313-static",
    "py313t",
    "py314",
    "py315",
];

/// Where an interpreter's `_PyRuntime` lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Libpython {
    /// In the executable itself (Debian's and the 3.13.15 builds).
    Static,
    /// In a `libpython3.X.so` the executable links (pyenv's).
    Shared,
}

/// One interpreter of the matrix, as recorded in `manifest.json`.
#[derive(Clone, Debug, Deserialize)]
pub struct Interpreter {
    /// Matrix name, such as `py313t`.
    pub name: String,
    /// Exact `platform.python_version()`, such as `3.15.2`.
    pub version: String,
    /// The chroot the interpreter runs in (the sid tree for py314 and py315); `None` on the
    /// host.
    pub root: Option<PathBuf>,
    /// The executable, as a path inside `root` when there is one.
    pub exe: PathBuf,
    /// Built with `--disable-gil`.
    pub free_threaded: bool,
    /// Whether the runtime is in the executable or in a shared libpython.
    pub libpython: Libpython,
}

#[derive(Deserialize)]
struct Manifest {
    interpreters: Vec<Interpreter>,
}

/// The advice every failure to find the matrix ends with.
const HINT: &str = "run `cargo xtask pythons` to prepare the test interpreters";

impl Interpreter {
    /// Every interpreter of the matrix, in manifest order.
    ///
    /// # Panics
    /// When the manifest cannot be read, or an interpreter of [`MATRIX`] is not in it or not on
    /// disk; the message names `cargo xtask pythons`.
    pub fn all() -> &'static [Interpreter] {
        let all = manifest();
        for name in MATRIX {
            Self::by_name(name);
        }
        all
    }

    /// The interpreter called `name` (one of [`MATRIX`]).
    ///
    /// # Panics
    /// As [`Interpreter::all`], for this one interpreter.
    pub fn by_name(name: &str) -> &'static Interpreter {
        let path = manifest_path();
        let found = manifest()
            .iter()
            .find(|py| py.name == name)
            .unwrap_or_else(|| panic!("interpreter {name} is not in {}; {HINT}", path.display()));
        let exe = found.host_path();
        assert!(exe.exists(), "{name}: {} is missing; {HINT}", exe.display());
        found
    }

    /// `(major, minor)` from [`Interpreter::version`], e.g. `(3, 13)`.
    pub fn minor(&self) -> (u32, u32) {
        let mut parts = self.version.split('.').map(|part| part.parse::<u32>());
        match (parts.next(), parts.next()) {
            (Some(Ok(major)), Some(Ok(minor))) => (major, minor),
            _ => panic!(
                "{}: malformed version {:?} in the manifest",
                self.name, self.version
            ),
        }
    }

    /// The executable as seen from the host (`root` + `exe`), for reading the file; the
    /// chroot's symlinks are not resolved.
    pub fn host_path(&self) -> PathBuf {
        self.host_path_of(&self.exe)
    }

    /// `path` (absolute, as the interpreter sees it) as seen from the host.
    pub fn host_path_of(&self, path: &Path) -> PathBuf {
        match &self.root {
            Some(root) => root.join(path.strip_prefix("/").unwrap_or(path)),
            None => path.to_owned(),
        }
    }

    /// Makes sure a chroot interpreter's tree has /proc mounted (a fresh procfs, same PID
    /// namespace), which `profiling.sampling` and anything reading `/proc/PID/*` from inside
    /// needs; mounts do not survive a reboot, `cargo xtask pythons` having run or not. Does
    /// nothing for host interpreters and when something is mounted there already.
    ///
    /// # Panics
    /// When `mount` fails (it needs root, as the integration tests do anyway).
    pub fn ensure_proc_mounted(&self) {
        let Some(root) = &self.root else { return };
        // Serializes test threads, which would otherwise stack several mounts.
        static MOUNTING: Mutex<()> = Mutex::new(());
        let _guard = MOUNTING
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let target = root.join("proc");
        let target = target.canonicalize().unwrap_or_else(|err| {
            panic!(
                "{}: cannot resolve {}: {err}; {HINT}",
                self.name,
                target.display()
            )
        });
        if pyagent::discovery::mount_points()
            .unwrap_or_else(|err| panic!("cannot read /proc/self/mountinfo: {err}"))
            .contains(&target)
        {
            return;
        }
        let out = Command::new("mount")
            .args(["-t", "proc", "proc"])
            .arg(&target)
            .output()
            .unwrap_or_else(|err| panic!("cannot run mount: {err}"));
        assert!(
            out.status.success(),
            "{}: `mount -t proc proc {}` failed ({}): {}",
            self.name,
            target.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim_end()
        );
    }
}

/// `$PYAGENT_PYTHONS_DIR/manifest.json`, or the default directory's.
pub fn manifest_path() -> PathBuf {
    let dir = std::env::var_os("PYAGENT_PYTHONS_DIR")
        .map_or_else(|| PathBuf::from(DEFAULT_DIR), PathBuf::from);
    dir.join("manifest.json")
}

/// The manifest's interpreters, read once per test binary.
fn manifest() -> &'static [Interpreter] {
    static MANIFEST: OnceLock<Vec<Interpreter>> = OnceLock::new();
    MANIFEST.get_or_init(|| {
        let path = manifest_path();
        let bytes = fs::read(&path)
            .unwrap_or_else(|err| panic!("cannot read {}: {err}; {HINT}", path.display()));
        let manifest: Manifest = serde_json::from_slice(&bytes)
            .unwrap_or_else(|err| panic!("cannot parse {}: {err}; {HINT}", path.display()));
        manifest.interpreters
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_covers_the_matrix() {
        let all = Interpreter::all();
        let names: Vec<&str> = all.iter().map(|py| py.name.as_str()).collect();
        assert_eq!(names, MATRIX);
        for py in all {
            assert_eq!(py.minor().0, 3, "{}", py.name);
            assert_eq!(py.free_threaded, py.name == "py313t", "{}", py.name);
        }
        assert_eq!(Interpreter::by_name("py315").minor(), (3, 15));
        assert_eq!(Interpreter::by_name("py311").libpython, Libpython::Shared);
        assert_eq!(
            Interpreter::by_name("py311-debian").libpython,
            Libpython::Static
        );
    }

    #[test]
    #[should_panic(expected = "cargo xtask pythons")]
    fn unknown_interpreter_names_the_fix() {
        Interpreter::by_name("py27");
    }
}
