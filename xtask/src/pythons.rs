//! `cargo xtask pythons`: prepares the CPython test matrix in a cache directory outside the
//! repository (default `/var/cache/pyagent/pythons`, or `PYAGENT_PYTHONS_DIR`) and writes
//! `manifest.json` there, which the test harness (`tests/src/pythons.rs`) reads.
//!
//! | name | what | provided by |
//! |---|---|---|
//! | py311-debian | Debian bookworm `/usr/bin/python3.11`, static libpython, non-PIE | host apt |
//! | py311, py312, py313 | pyenv 3.11.7, 3.12.1, 3.13.0, shared libpython | preinstalled pyenv |
//! | py313-static, py313t | 3.13.15 from Debian's `python3.13 3.13.15-1` source package, default and `--disable-gil` | [`source`] |
//! | py314, py315 | Debian sid's `python3.14`, `python3.15`, run through chroot(8) | [`chroot`] |
//!
//! plus the peer profilers for benchmarks in a venv ([`peers`]). Every step checks its
//! result first and does nothing when it is already there; `--check` only verifies. The
//! slow parts (two builds, the chroot, the venv) run in parallel threads.

mod chroot;
/// The Debian archive debootstrap fetches from (here and for the rootfs tarball).
pub use chroot::MIRROR;
pub(crate) mod cmd;
pub mod host;
mod peers;
mod probe;
mod source;

use std::fs;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::Instant;

use anyhow::{bail, ensure, Context, Result};
use serde::{Deserialize, Serialize};

use cmd::say;

/// Where the matrix is cached unless `PYAGENT_PYTHONS_DIR` says otherwise; the test harness
/// uses the same default.
pub const DEFAULT_DIR: &str = "/var/cache/pyagent/pythons";

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

/// `manifest.json`; the test harness deserializes the same shape.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Manifest {
    interpreters: Vec<Entry>,
    peers: Peers,
}

/// One interpreter of the matrix, as recorded in the manifest.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Entry {
    name: String,
    /// `platform.python_version()` as the interpreter reports it.
    version: String,
    /// The chroot to run it in; `None` for host interpreters.
    root: Option<PathBuf>,
    /// The executable, inside `root` when there is one.
    exe: PathBuf,
    free_threaded: bool,
    libpython: Libpython,
}

/// Where `_PyRuntime` lives: in the executable, or in a `libpython*.so` it links.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Libpython {
    Static,
    Shared,
}

impl Libpython {
    fn as_str(self) -> &'static str {
        match self {
            Libpython::Static => "static",
            Libpython::Shared => "shared",
        }
    }
}

/// Other profilers, for benchmarks.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Peers {
    #[serde(rename = "py-spy")]
    py_spy: PathBuf,
    austin: PathBuf,
}

/// Which step provides an interpreter.
#[derive(Clone, Copy)]
enum Provider {
    /// A package of the host (Debian bookworm).
    HostApt(&'static str),
    /// A pyenv version directory, preinstalled.
    Pyenv(&'static str),
    /// Built by [`source`] with these extra `configure` arguments.
    Source(&'static [&'static str]),
    /// A package installed in the sid chroot by [`chroot`].
    SidChroot(&'static str),
}

/// What one matrix entry must be.
struct Spec {
    name: &'static str,
    provider: Provider,
    root: Option<PathBuf>,
    exe: PathBuf,
    /// The exact version, or a prefix such as `3.14.` where the distribution picks the patch
    /// release.
    version: &'static str,
    free_threaded: bool,
    libpython: Libpython,
    /// Ships CPython's own sampler, `python -m profiling.sampling` (3.15+).
    tachyon: bool,
}

impl Spec {
    /// The executable's path as seen from the host.
    fn host_exe(&self) -> PathBuf {
        host_path(self.root.as_deref(), &self.exe)
    }

    /// Checks that the interpreter runs and is what the matrix says; returns its manifest
    /// entry.
    fn verify(&self) -> Result<Entry> {
        let host_exe = self.host_exe();
        ensure!(host_exe.exists(), "{} is missing", host_exe.display());
        let probe = probe::probe(self.root.as_deref(), &self.exe)?;
        let version_ok = match self.version.strip_suffix('.') {
            Some(_) => probe.version.starts_with(self.version),
            None => probe.version == self.version,
        };
        ensure!(
            version_ok,
            "{} reports Python {}, expected {}",
            self.exe.display(),
            probe.version,
            self.version
        );
        ensure!(
            probe.free_threaded == self.free_threaded,
            "{} has Py_GIL_DISABLED={}, expected {}",
            self.exe.display(),
            probe.free_threaded,
            self.free_threaded
        );
        let libpython = probe::libpython(&host_path(self.root.as_deref(), &probe.executable))?;
        ensure!(
            libpython == self.libpython,
            "{} has a {} libpython, expected {}",
            probe.executable.display(),
            libpython.as_str(),
            self.libpython.as_str()
        );
        if self.tachyon {
            cmd::output(cmd::python(self.root.as_deref(), &self.exe).args([
                "-m",
                "profiling.sampling",
                "--help",
            ]))
            .context("its `-m profiling.sampling` does not work")?;
        }
        Ok(Entry {
            name: self.name.to_owned(),
            version: probe.version,
            root: self.root.clone(),
            exe: self.exe.clone(),
            free_threaded: probe.free_threaded,
            libpython,
        })
    }
}

/// `path` (absolute, inside `root` if given) as seen from the host.
fn host_path(root: Option<&Path>, path: &Path) -> PathBuf {
    match root {
        Some(root) => root.join(path.strip_prefix("/").unwrap_or(path)),
        None => path.to_owned(),
    }
}

/// Paths inside the cache directory.
struct Layout {
    dir: PathBuf,
}

impl Layout {
    fn chroot(&self) -> PathBuf {
        self.dir.join("sid-chroot")
    }

    fn logs(&self) -> PathBuf {
        self.dir.join("logs")
    }

    fn manifest(&self) -> PathBuf {
        self.dir.join("manifest.json")
    }
}

/// The matrix, in manifest order.
fn matrix(layout: &Layout) -> Vec<Spec> {
    let pyenv = pyenv_versions();
    let host = |name, provider, exe: PathBuf, version, libpython| Spec {
        name,
        provider,
        root: None,
        exe,
        version,
        free_threaded: false,
        libpython,
        tachyon: false,
    };
    let built = |name: &'static str, configure, exe: &str, free_threaded| Spec {
        name,
        provider: Provider::Source(configure),
        root: None,
        exe: layout.dir.join(name).join("bin").join(exe),
        version: source::UPSTREAM_VERSION,
        free_threaded,
        libpython: Libpython::Static,
        tachyon: false,
    };
    let sid = |name, package: &'static str, version, tachyon| Spec {
        name,
        provider: Provider::SidChroot(package),
        root: Some(layout.chroot()),
        exe: Path::new("/usr/bin").join(package),
        version,
        free_threaded: false,
        libpython: Libpython::Static,
        tachyon,
    };
    vec![
        host(
            "py311-debian",
            Provider::HostApt("python3.11"),
            PathBuf::from("/usr/bin/python3.11"),
            "3.11.",
            Libpython::Static,
        ),
        host(
            "py311",
            Provider::Pyenv("3.11.7"),
            pyenv.join("3.11.7/bin/python3.11"),
            "3.11.7",
            Libpython::Shared,
        ),
        host(
            "py312",
            Provider::Pyenv("3.12.1"),
            pyenv.join("3.12.1/bin/python3.12"),
            "3.12.1",
            Libpython::Shared,
        ),
        host(
            "py313",
            Provider::Pyenv("3.13.0"),
            pyenv.join("3.13.0/bin/python3.13"),
            "3.13.0",
            Libpython::Shared,
        ),
        built("py313-static", &[], "python3.13", false),
        built("py313t", &["--disable-gil"], "python3.13t", true),
        sid("py314", "python3.14", "3.14.", false),
        sid("py315", "python3.15", "3.15.", true),
    ]
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
            .with_context(|| format!("{} does not work", spec.name))?;
        say(
            spec.name,
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
            Err(err) => problems.push(format!("{}: {err:#}", spec.name)),
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
