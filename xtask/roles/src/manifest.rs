//! `manifest.json`: what `cargo xtask pythons` found for each role (where it is, what it
//! reported) and the peer profilers, for the tests and benchmarks to read.

use std::ffi::OsStr;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

use crate::{Libpython, Role};

/// Where the matrix is cached unless `PYAGENT_PYTHONS_DIR` says otherwise.
pub const DEFAULT_DIR: &str = "/var/cache/pyagent/pythons";

/// The advice every failure to read the manifest ends with.
const HINT: &str = "run `cargo xtask pythons` to prepare the test interpreters";

/// `$PYAGENT_PYTHONS_DIR`, or [`DEFAULT_DIR`].
pub fn pythons_dir() -> PathBuf {
    std::env::var_os("PYAGENT_PYTHONS_DIR")
        .map_or_else(|| PathBuf::from(DEFAULT_DIR), PathBuf::from)
}

/// The manifest in [`pythons_dir`].
pub fn manifest_path() -> PathBuf {
    pythons_dir().join("manifest.json")
}

/// The whole manifest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// One entry per role, in table order.
    pub interpreters: Vec<Entry>,
    pub peers: Peers,
}

/// One role as found: what `cargo xtask pythons` verified it to be.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The role's name.
    pub name: String,
    /// `platform.python_version()` as the interpreter reports it, such as `3.15.2`.
    pub version: String,
    /// The chroot it runs in; `None` on the host.
    pub root: Option<PathBuf>,
    /// The executable, as a path inside `root` when there is one.
    pub exe: PathBuf,
    /// `Py_GIL_DISABLED`, as the interpreter reports it.
    pub free_threaded: bool,
    pub libpython: Libpython,
}

/// Other profilers, for benchmarks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Peers {
    #[serde(rename = "py-spy")]
    pub py_spy: PathBuf,
    pub austin: PathBuf,
}

/// Why the manifest could not be read.
#[derive(Debug)]
pub enum LoadError {
    Read(PathBuf, std::io::Error),
    Parse(PathBuf, serde_json::Error),
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::Read(path, err) => {
                write!(f, "cannot read {}: {err}; {HINT}", path.display())
            }
            LoadError::Parse(path, err) => {
                write!(f, "cannot parse {}: {err}; {HINT}", path.display())
            }
        }
    }
}

impl std::error::Error for LoadError {}

/// A name the manifest does not have.
#[derive(Debug)]
pub struct NotInManifest(pub String);

impl fmt::Display for NotInManifest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "no interpreter {} in {}; {HINT}",
            self.0,
            manifest_path().display()
        )
    }
}

impl std::error::Error for NotInManifest {}

impl Manifest {
    /// Reads [`manifest_path`].
    pub fn load() -> Result<Manifest, LoadError> {
        Manifest::read(&manifest_path())
    }

    /// Reads the manifest at `path`.
    pub fn read(path: &Path) -> Result<Manifest, LoadError> {
        let bytes = std::fs::read(path).map_err(|err| LoadError::Read(path.to_owned(), err))?;
        serde_json::from_slice(&bytes).map_err(|err| LoadError::Parse(path.to_owned(), err))
    }

    /// The entry called `name`.
    pub fn interpreter(&self, name: &str) -> Result<&Entry, NotInManifest> {
        self.interpreters
            .iter()
            .find(|entry| entry.name == name)
            .ok_or_else(|| NotInManifest(name.to_owned()))
    }
}

impl Peers {
    /// The peer called `name` (`py-spy`, `austin`), as the benchmarks name profilers.
    pub fn get(&self, name: &str) -> Option<&Path> {
        match name {
            "py-spy" => Some(&self.py_spy),
            "austin" => Some(&self.austin),
            _ => None,
        }
    }
}

impl Entry {
    /// The row of the table this entry is for; `None` for a name the table no longer has.
    pub fn role(&self) -> Option<&'static Role> {
        crate::role(&self.name)
    }

    /// `(major, minor)` of the reported version, such as `(3, 13)`.
    ///
    /// # Panics
    /// On a version that is not `major.minor…`, which `cargo xtask pythons` never writes.
    pub fn minor(&self) -> (u32, u32) {
        crate::version::major_minor(&self.version).unwrap_or_else(|| {
            panic!(
                "{}: malformed version {:?} in the manifest",
                self.name, self.version
            )
        })
    }

    /// The executable as seen from the host (`root` + `exe`); the chroot's symlinks are not
    /// resolved.
    pub fn host_exe(&self) -> PathBuf {
        self.host_path(&self.exe)
    }

    /// `path` (absolute, as the interpreter sees it) as seen from the host.
    pub fn host_path(&self, path: &Path) -> PathBuf {
        host_path(self.root.as_deref(), path)
    }

    /// A command running the interpreter with `args`, through chroot(8) when it has a root.
    pub fn command<S: AsRef<OsStr>>(&self, args: impl IntoIterator<Item = S>) -> Command {
        let mut cmd = match &self.root {
            Some(root) => {
                let mut cmd = Command::new("chroot");
                cmd.arg(root).arg(&self.exe);
                cmd
            }
            None => Command::new(&self.exe),
        };
        cmd.args(args);
        cmd
    }
}

/// `path` (absolute, inside `root` if given) as seen from the host.
pub fn host_path(root: Option<&Path>, path: &Path) -> PathBuf {
    match root {
        Some(root) => root.join(path.strip_prefix("/").unwrap_or(path)),
        None => path.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const JSON: &str = r#"{
      "interpreters": [
        {"name": "py314", "version": "3.14.10", "root": "/c", "exe": "/usr/bin/python3.14",
         "free_threaded": false, "libpython": "static"}
      ],
      "peers": {"py-spy": "/p/py-spy", "austin": "/p/austin"}
    }"#;

    #[test]
    fn reads_what_xtask_writes() {
        let manifest: Manifest = serde_json::from_str(JSON).unwrap();
        let py = manifest.interpreter("py314").unwrap();
        assert_eq!(py.minor(), (3, 14));
        assert_eq!(py.host_exe(), Path::new("/c/usr/bin/python3.14"));
        assert_eq!(py.role().map(|role| role.name), Some("py314"));
        assert_eq!(manifest.peers.get("austin"), Some(Path::new("/p/austin")));
        assert!(manifest.interpreter("py27").is_err());
        let again: Manifest =
            serde_json::from_str(&serde_json::to_string(&manifest).unwrap()).unwrap();
        assert_eq!(again, manifest);
    }
}
