//! The CPython test matrix that `cargo xtask pythons` prepares outside the repository: the
//! roles of the shared table ([`roles::ROLES`]), found through the `manifest.json` it writes
//! (in `PYAGENT_PYTHONS_DIR`, default `/var/cache/pyagent/pythons`). A missing manifest or
//! interpreter is a test failure that names `cargo xtask pythons`, never a skip.

use std::ops::Deref;
use std::process::Command;
use std::sync::{Mutex, OnceLock};

pub use roles::{manifest_path, Capability, Libpython, Role, ROLES};

/// The advice every failure to find the matrix ends with.
const HINT: &str = "run `cargo xtask pythons` to prepare the test interpreters";

/// One interpreter of the matrix: its row of the table ([`Interpreter::role`], for what it
/// can do) and its manifest entry (the fields, through `Deref`: where it is, what it reported).
#[derive(Debug)]
pub struct Interpreter {
    role: &'static Role,
    entry: roles::Entry,
}

impl Deref for Interpreter {
    type Target = roles::Entry;

    fn deref(&self) -> &roles::Entry {
        &self.entry
    }
}

impl Interpreter {
    /// Every interpreter of the matrix, in table order.
    ///
    /// # Panics
    /// When the manifest cannot be read, or a role of the table is not in it or not on disk;
    /// the message names `cargo xtask pythons`.
    pub fn all() -> &'static [Interpreter] {
        for role in ROLES {
            Self::by_name(role.name);
        }
        manifest()
    }

    /// The interpreter called `name` (a role of the table).
    ///
    /// # Panics
    /// As [`Interpreter::all`], for this one interpreter.
    pub fn by_name(name: &str) -> &'static Interpreter {
        assert!(
            roles::role(name).is_some(),
            "interpreter {name} is not a role of the table (xtask/roles/src/table.rs)"
        );
        let found = manifest()
            .iter()
            .find(|py| py.name == name)
            .unwrap_or_else(|| {
                panic!(
                    "interpreter {name} is not in {}; {HINT}",
                    manifest_path().display()
                )
            });
        found.check_on_disk();
        found
    }

    /// Its row of the table: what it can do.
    pub fn role(&self) -> &'static Role {
        self.role
    }

    fn check_on_disk(&self) {
        let exe = self.host_exe();
        assert!(
            exe.exists(),
            "{}: {} is missing; {HINT}",
            self.name,
            exe.display()
        );
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

/// The manifest's entries of the table's roles, in table order, read once per test binary. A
/// role the manifest does not have yet fails only the tests that use it.
///
/// # Panics
/// When the manifest cannot be read.
fn manifest() -> &'static [Interpreter] {
    static MANIFEST: OnceLock<Vec<Interpreter>> = OnceLock::new();
    MANIFEST.get_or_init(|| {
        let manifest = roles::Manifest::load().unwrap_or_else(|err| panic!("{err}"));
        ROLES
            .iter()
            .filter_map(|role| {
                let entry = manifest.interpreter(role.name).ok()?.clone();
                Some(Interpreter { role, entry })
            })
            .collect()
    })
}

/// The executable of a preinstalled pyenv release outside the matrix (`2.7.18`, `python2.7`):
/// every machine of this kind has 2.7 and 3.6 under `$PYENV_ROOT/versions` (`~/.pyenv`), which
/// the tests of releases pyagent refuses run.
pub fn pyenv_executable(version: &str, name: &str) -> std::path::PathBuf {
    let root = std::env::var_os("PYENV_ROOT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
            std::path::Path::new(&home).join(".pyenv")
        });
    root.join("versions").join(version).join("bin").join(name)
}

/// Starts `exe` idling, and returns once it has started its program (it printed `ready`).
pub fn spawn_idle(exe: &std::path::Path) -> std::process::Child {
    use std::io::BufRead;
    let mut child = Command::new(exe)
        .args([
            "-c",
            "import sys, time; print('ready'); sys.stdout.flush(); time.sleep(1000)",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", exe.display()));
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read");
    assert_eq!(line.trim(), "ready", "{} did not start", exe.display());
    child
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_covers_the_table() {
        let all = Interpreter::all();
        let names: Vec<&str> = all.iter().map(|py| py.name.as_str()).collect();
        let table: Vec<&str> = ROLES.iter().map(|role| role.name).collect();
        assert_eq!(names, table);
        for py in all {
            let role = py.role();
            assert!(role.version.admits(&py.version), "{}", py.name);
            assert_eq!(py.minor(), role.minor(), "{}", py.name);
            assert_eq!(py.free_threaded, role.free_threaded(), "{}", py.name);
            assert_eq!(py.libpython, role.libpython(), "{}", py.name);
        }
        assert_eq!(Interpreter::by_name("py315").minor(), (3, 15));
        assert_eq!(Interpreter::by_name("py311").libpython, Libpython::Shared);
        assert_eq!(
            Interpreter::by_name("py311-debian").libpython,
            Libpython::Static
        );
    }

    #[test]
    #[should_panic(expected = "not a role of the table")]
    fn unknown_interpreter_names_the_table() {
        Interpreter::by_name("py27");
    }
}
