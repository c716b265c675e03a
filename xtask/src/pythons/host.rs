//! The host's part of the matrix: Debian packages the other steps need (and `py311-debian`
//! itself), and the preinstalled pyenv interpreters, which cannot be installed here because
//! pyenv downloads from python.org.

use std::path::Path;
use std::process::Command;
use std::thread;
use std::time::Duration;

use anyhow::{bail, Result};

use super::cmd::{self, say, Log};
use roles::Build;

use super::{Layout, Spec};

const TAG: &str = "host";

/// Host packages needed by the steps, besides those providing interpreters.
const TOOLS: &[&str] = &[
    // apt-get source (the 3.13.15 tarball) and debootstrap check sid's signatures with it.
    "debian-archive-keyring",
    "debootstrap",
    // The 3.13.15 builds: a compiler, and headers for zlib and ctypes; nothing else is needed
    // by the tests.
    "build-essential",
    "pkg-config",
    "xz-utils",
    "zlib1g-dev",
    "libffi-dev",
];

/// How often an apt command that found the dpkg or lists lock taken is tried in all, and the
/// pause between tries; other engineers' apt runs take minutes at most.
const APT_LOCK_TRIES: u32 = 20;
const APT_LOCK_PAUSE: Duration = Duration::from_secs(15);

/// Installs, with apt, those of the needed host packages that are not installed.
pub(super) fn ensure_packages(layout: &Layout, specs: &[Spec]) -> Result<()> {
    let mut wanted: Vec<&str> = TOOLS.to_vec();
    wanted.extend(specs.iter().filter_map(|spec| match spec.role.build {
        Build::HostApt(package) => Some(package),
        _ => None,
    }));
    ensure_installed(&layout.logs(), TAG, &wanted)
}

/// Installs, with apt, those of `packages` that are not installed (logging to `logs_dir`).
pub fn ensure_installed(logs_dir: &Path, tag: &'static str, packages: &[&str]) -> Result<()> {
    let missing: Vec<&str> = packages
        .iter()
        .copied()
        .filter(|package| !installed(package))
        .collect();
    if missing.is_empty() {
        say(tag, "needed Debian packages are installed");
        return Ok(());
    }
    say(tag, format_args!("installing {}", missing.join(" ")));
    let log = Log::new(tag, logs_dir, "host-apt")?;
    apt_get(&log, &["update"])?;
    let mut install = vec!["install", "-y", "--no-install-recommends"];
    install.extend(&missing);
    apt_get(&log, &install)
}

/// Fails, naming them, unless every pyenv interpreter of the matrix is installed.
pub(super) fn require_pyenv(specs: &[Spec]) -> Result<()> {
    let missing: Vec<String> = specs
        .iter()
        .filter(|spec| spec.role.build == Build::Pyenv && !spec.exe.exists())
        .map(|spec| format!("{} ({})", spec.role.name, spec.exe.display()))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let versions: Vec<String> = specs
        .iter()
        .filter(|spec| spec.role.build == Build::Pyenv && !spec.exe.exists())
        .map(|spec| spec.role.version.to_string())
        .collect();
    bail!(
        "pyenv interpreters missing: {}. They come preinstalled (in /root/.pyenv) on the project's \
         machines; `pyenv install {}` needs python.org, which this network does not reach, so \
         install them where it does (or set PYENV_ROOT to where they are)",
        missing.join(", "),
        versions.join(" ")
    )
}

/// Whether dpkg has `package` installed.
fn installed(package: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${db:Status-Abbrev}", package])
        .output()
        .is_ok_and(|out| out.status.success() && out.stdout.starts_with(b"ii"))
}

/// Runs `apt-get ARGS` on the host, waiting (bounded) while another apt holds its locks.
fn apt_get(log: &Log, args: &[&str]) -> Result<()> {
    let mut tries = 0;
    loop {
        tries += 1;
        let result = log.run(
            Command::new("apt-get")
                .args(["-o", "DPkg::Lock::Timeout=300"])
                .args(args)
                .env("DEBIAN_FRONTEND", "noninteractive"),
        );
        match result {
            Err(err) if tries < APT_LOCK_TRIES && is_lock_error(&format!("{err:#}")) => {
                say(
                    log.tag(),
                    format_args!(
                        "apt is busy; trying again in {}",
                        cmd::elapsed(APT_LOCK_PAUSE)
                    ),
                );
                thread::sleep(APT_LOCK_PAUSE);
            }
            result => return result,
        }
    }
}

fn is_lock_error(message: &str) -> bool {
    message.contains("Could not get lock") || message.contains("Unable to lock")
}
