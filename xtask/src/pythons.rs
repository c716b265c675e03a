//! `cargo xtask pythons`: prepares the CPython test matrix in a cache directory outside the
//! repository (default `/var/cache/pyagent/pythons`, or `PYAGENT_PYTHONS_DIR`) and writes
//! `manifest.json` there, which the test harness (`tests/src/pythons.rs`) and the benchmarks
//! read.
//!
//! The roles are the rows of the shared table ([`roles::ROLES`]); each one's build says which
//! step provides it:
//!
//! | build | provided by |
//! |---|---|
//! | [`Build::HostApt`] (py311-debian: static libpython, non-PIE) | [`host`] |
//! | [`Build::Pyenv`] (py311, py312, py313: shared libpython) | preinstalled pyenv, checked by [`host`] |
//! | [`Build::Source`] (py313-static, py313t: Debian's 3.13.15 source, default and `--disable-gil`) | [`source`] |
//! | [`Build::Chroot`] (py39-debian in bullseye; py314, py315 in sid) | [`chroot`], run through chroot(8) |
//!
//! plus the peer profilers for benchmarks in a venv ([`peers`]). Every step checks its
//! result first and does nothing when it is already there; `--check` only verifies. The
//! slow parts (two builds, the chroot, the venv) run in parallel threads.

mod chroot;
pub(crate) mod cmd;
pub mod host;
mod mirror;
mod peers;
mod probe;
mod source;
/// The Debian archive debootstrap and the private apt configurations fetch from (here, for the
/// kernels and for the rootfs tarball): the host's own.
pub use mirror::debian_mirror;

use std::fs;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::Instant;

use anyhow::{bail, ensure, Context, Result};
use roles::{host_path, Build, Entry, Manifest, Role, Suite, ROLES};

use cmd::say;

/// Where the matrix is cached unless `PYAGENT_PYTHONS_DIR` says otherwise; the test harness
/// uses the same default.
pub use roles::DEFAULT_DIR;

/// Options of `cargo xtask pythons`.
#[derive(clap::Args)]
pub struct Args {
    /// Cache directory for interpreters, builds, the sid chroot and manifest.json.
    #[arg(long, env = "PYAGENT_PYTHONS_DIR", default_value = DEFAULT_DIR)]
    dir: PathBuf,
    /// Only verify that every interpreter, peer and the manifest are present; change nothing.
    #[arg(long)]
    check: bool,
}

/// What one role of the table must be, where it is on this machine.
struct Spec {
    role: &'static Role,
    /// The chroot to run it in; `None` for host interpreters.
    root: Option<PathBuf>,
    /// The executable, inside `root` when there is one.
    exe: PathBuf,
}

impl Spec {
    /// The executable's path as seen from the host.
    fn host_exe(&self) -> PathBuf {
        host_path(self.root.as_deref(), &self.exe)
    }

    /// Checks that the interpreter runs and is what the table says; returns its manifest
    /// entry.
    fn verify(&self) -> Result<Entry> {
        let role = self.role;
        let host_exe = self.host_exe();
        ensure!(host_exe.exists(), "{} is missing", host_exe.display());
        let probe = probe::probe(self.root.as_deref(), &self.exe)?;
        ensure!(
            role.version.admits(&probe.version),
            "{} reports Python {}, expected {}",
            self.exe.display(),
            probe.version,
            role.version
        );
        ensure!(
            probe.free_threaded == role.free_threaded(),
            "{} has Py_GIL_DISABLED={}, expected {}",
            self.exe.display(),
            probe.free_threaded,
            role.free_threaded()
        );
        let libpython = probe::libpython(&host_path(self.root.as_deref(), &probe.executable))?;
        ensure!(
            libpython == role.libpython(),
            "{} has a {} libpython, expected {}",
            probe.executable.display(),
            libpython.as_str(),
            role.libpython().as_str()
        );
        if role.tachyon() {
            cmd::output(cmd::python(self.root.as_deref(), &self.exe).args([
                "-m",
                "profiling.sampling",
                "--help",
            ]))
            .context("its `-m profiling.sampling` does not work")?;
        }
        Ok(Entry {
            name: role.name.to_owned(),
            version: probe.version,
            root: self.root.clone(),
            exe: self.exe.clone(),
            free_threaded: probe.free_threaded,
            libpython,
        })
    }
}

/// Paths inside the cache directory.
struct Layout {
    dir: PathBuf,
}

impl Layout {
    /// The tree of `suite`'s chroot.
    fn chroot(&self, suite: Suite) -> PathBuf {
        self.dir.join(suite.tree_name())
    }

    fn logs(&self) -> PathBuf {
        self.dir.join("logs")
    }

    fn manifest(&self) -> PathBuf {
        self.dir.join("manifest.json")
    }
}

/// The table's roles, in manifest order, where this machine has them.
fn matrix(layout: &Layout) -> Vec<Spec> {
    ROLES
        .iter()
        .map(|role| Spec::locate(role, layout))
        .collect()
}

impl Spec {
    /// Where `role` is: its build decides the directory, CPython's naming the file.
    fn locate(role: &'static Role, layout: &Layout) -> Spec {
        let exe_name = role.executable_name();
        let (root, exe) = match role.build {
            Build::HostApt(_) => (None, Path::new("/usr/bin").join(exe_name)),
            Build::Pyenv => (
                None,
                pyenv_versions()
                    .join(role.version.to_string())
                    .join("bin")
                    .join(exe_name),
            ),
            Build::Source => (None, layout.dir.join(role.name).join("bin").join(exe_name)),
            Build::Chroot(suite, _) => (
                Some(layout.chroot(suite)),
                Path::new("/usr/bin").join(exe_name),
            ),
        };
        Spec { role, root, exe }
    }
}

/// `$PYENV_ROOT/versions`, or `~/.pyenv/versions`.
pub(crate) fn pyenv_versions() -> PathBuf {
    let root = std::env::var_os("PYENV_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
            Path::new(&home).join(".pyenv")
        });
    root.join("versions")
}

/// Entry point of `cargo xtask pythons`.
impl Args {
    /// Prepare everything in the default cache directory (or `$PYAGENT_PYTHONS_DIR`).
    pub fn prepare() -> Args {
        let dir = std::env::var_os("PYAGENT_PYTHONS_DIR")
            .map_or_else(|| PathBuf::from(DEFAULT_DIR), PathBuf::from);
        Args { dir, check: false }
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

pub fn run(args: &Args) -> Result<()> {
    ensure!(
        args.dir.is_absolute(),
        "the cache directory must be an absolute path, not {}",
        args.dir.display()
    );
    let layout = Layout {
        dir: args.dir.clone(),
    };
    let specs = matrix(&layout);
    if args.check {
        return check(&layout, &specs);
    }
    let started = Instant::now();
    fs::create_dir_all(&layout.dir)
        .with_context(|| format!("cannot create the cache directory {}", layout.dir.display()))?;
    say(
        "pythons",
        format_args!(
            "preparing the interpreter matrix in {}",
            layout.dir.display()
        ),
    );

    host::ensure_packages(&layout, &specs)?;
    host::require_pyenv(&specs)?;

    let results = thread::scope(|s| {
        let source = s.spawn(|| source::ensure(&layout, &specs));
        let chroot = s.spawn(|| chroot::ensure(&layout, &specs));
        let peers = s.spawn(|| peers::ensure(&layout, &specs));
        [
            ("source builds", source.join()),
            ("sid chroot", chroot.join()),
            ("peers", peers.join()),
        ]
    });
    let mut failures = Vec::new();
    for (what, result) in results {
        match result {
            Ok(Ok(())) => {}
            Ok(Err(err)) => failures.push(format!("{what}: {err:#}")),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
    if !failures.is_empty() {
        bail!(
            "{} step(s) failed:\n{}",
            failures.len(),
            failures.join("\n")
        );
    }

    let mut interpreters = Vec::new();
    for spec in &specs {
        let entry = spec
            .verify()
            .with_context(|| format!("{} does not work", spec.role.name))?;
        say(
            spec.role.name,
            format_args!(
                "Python {} ({} libpython) at {}",
                entry.version,
                entry.libpython.as_str(),
                spec.host_exe().display()
            ),
        );
        interpreters.push(entry);
    }
    let manifest = Manifest {
        interpreters,
        peers: peers::verify(&layout)?,
    };
    let json = serde_json::to_string_pretty(&manifest).context("cannot serialize the manifest")?;
    cmd::write_atomic(&layout.manifest(), format!("{json}\n").as_bytes())?;
    say(
        "pythons",
        format_args!(
            "wrote {} in {}",
            layout.manifest().display(),
            cmd::elapsed(started.elapsed())
        ),
    );
    Ok(())
}

/// `--check`: verifies every entry, the peers and the manifest without changing anything;
/// fails listing what is missing.
fn check(layout: &Layout, specs: &[Spec]) -> Result<()> {
    let mut problems = Vec::new();
    let mut interpreters = Vec::new();
    for spec in specs {
        match spec.verify() {
            Ok(entry) => interpreters.push(entry),
            Err(err) => problems.push(format!("{}: {err:#}", spec.role.name)),
        }
    }
    let peers = peers::verify(layout)
        .map_err(|err| problems.push(format!("peers: {err:#}")))
        .ok();
    let path = layout.manifest();
    match fs::read(&path) {
        Err(err) => problems.push(format!("{}: {err}", path.display())),
        Ok(bytes) => match serde_json::from_slice::<Manifest>(&bytes) {
            Err(err) => problems.push(format!("{}: cannot parse: {err}", path.display())),
            Ok(found) => {
                if let (true, Some(peers)) = (interpreters.len() == specs.len(), peers) {
                    if found
                        != (Manifest {
                            interpreters,
                            peers,
                        })
                    {
                        problems.push(format!("{}: out of date", path.display()));
                    }
                }
            }
        },
    }
    if !problems.is_empty() {
        for problem in &problems {
            eprintln!("missing: {problem}");
        }
        bail!(
            "the interpreter matrix in {} is incomplete ({} problem(s)); run `cargo xtask pythons`",
            layout.dir.display(),
            problems.len()
        );
    }
    say(
        "pythons",
        format_args!("all {} interpreters and the peers are present", specs.len()),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table pins what the steps provide: a pyenv directory and a source build are one
    /// exact release each.
    #[test]
    fn built_and_pyenv_roles_pin_their_release() {
        for role in ROLES {
            match role.build {
                Build::Pyenv => assert!(role.version.patch.is_some(), "{}", role.name),
                Build::Source => {
                    assert_eq!(
                        role.version.to_string(),
                        source::UPSTREAM_VERSION,
                        "{}",
                        role.name
                    )
                }
                Build::HostApt(_) | Build::Chroot(..) => {}
            }
        }
    }

    #[test]
    fn roles_are_located_by_build() {
        let layout = Layout {
            dir: PathBuf::from("/cache"),
        };
        let specs = matrix(&layout);
        let exe = |name: &str| {
            let spec = specs.iter().find(|s| s.role.name == name).expect(name);
            (spec.root.clone(), spec.exe.clone())
        };
        assert_eq!(
            exe("py311-debian"),
            (None, PathBuf::from("/usr/bin/python3.11"))
        );
        assert_eq!(
            exe("py313t"),
            (None, PathBuf::from("/cache/py313t/bin/python3.13t"))
        );
        assert_eq!(
            exe("py315"),
            (
                Some(PathBuf::from("/cache/sid-chroot")),
                PathBuf::from("/usr/bin/python3.15")
            )
        );
        assert_eq!(
            exe("py39-debian"),
            (
                Some(PathBuf::from("/cache/bullseye-chroot")),
                PathBuf::from("/usr/bin/python3.9")
            )
        );
        assert!(exe("py312").1.ends_with("versions/3.12.1/bin/python3.12"));
    }
}
