//! The [`roles::Build::SidChroot`] roles (`py314`, `py315`): Debian sid's `python3.14` and
//! `python3.15` packages, which need a newer glibc than the bookworm host has, so they live in a `debootstrap --variant=minbase
//! sid` tree at `DIR/sid-chroot` and run as `chroot DIR/sid-chroot /usr/bin/python3.X`.
//!
//! /proc: a fresh procfs is mounted at `DIR/sid-chroot/proc` (same PID namespace, so host
//! PIDs) by this step and, idempotently, by the test harness before it starts a chroot
//! interpreter, since mounts do not survive a reboot. Python starts without /proc, but
//! `python3.15 -m profiling.sampling` reads `/proc/PID/maps` of its target. The mount is left
//! in place; [`remove_tree`] unmounts before deleting anything.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, ensure, Context, Result};

use super::cmd::{self, say, Log};
use super::mirror::debian_mirror;
use roles::Build;

use super::{Layout, Spec};

const TAG: &str = "sid-chroot";
/// Written into the tree once debootstrap has finished; a tree without it is started over.
const STAMP: &str = ".pyagent-debootstrap-done";
/// apt configuration written into the chroot.
const APT_CONF: &str = "\
// Written by `cargo xtask pythons`: the sid mirror reached from the project's machines is a
// snapshot whose Release file may be past its Valid-Until date.
Acquire::Check-Valid-Until \"false\";
Acquire::Check-Date \"false\";
";

/// Creates the chroot if needed, mounts its /proc, and installs the interpreters missing in it.
pub fn ensure(layout: &Layout, specs: &[Spec]) -> Result<()> {
    let root = layout.chroot();
    let log = Log::new(TAG, &layout.logs(), TAG)?;
    if !root.join(STAMP).exists() {
        let mirror = debian_mirror()?;
        if root.exists() {
            say(
                TAG,
                format_args!("removing the unfinished chroot {}", root.display()),
            );
            remove_tree(&root)?;
        }
        say(
            TAG,
            format_args!("creating a minimal sid tree in {}", root.display()),
        );
        log.run(
            Command::new("debootstrap")
                .args(["--variant=minbase", "sid"])
                .arg(&root)
                .arg(mirror),
        )?;
        let conf = root.join("etc/apt/apt.conf.d/99pyagent");
        fs::write(&conf, APT_CONF).with_context(|| format!("cannot write {}", conf.display()))?;
        fs::write(root.join(STAMP), "")
            .with_context(|| format!("cannot write the stamp in {}", root.display()))?;
    }
    ensure_proc_mounted(&root)?;

    let missing: Vec<&str> = specs
        .iter()
        .filter_map(|spec| match spec.role.build {
            Build::SidChroot(package) if spec.verify().is_err() => Some(package),
            _ => None,
        })
        .collect();
    if missing.is_empty() {
        let packages: Vec<&str> = specs
            .iter()
            .filter_map(|spec| match spec.role.build {
                Build::SidChroot(package) => Some(package),
                _ => None,
            })
            .collect();
        say(TAG, format_args!("installed: {}", packages.join(" ")));
        return Ok(());
    }
    say(
        TAG,
        format_args!("installing {} in the chroot", missing.join(" ")),
    );
    let apt_get = || {
        let mut cmd = Command::new("chroot");
        cmd.arg(&root)
            .arg("apt-get")
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("HOME", "/root")
            .env("DEBIAN_FRONTEND", "noninteractive");
        cmd
    };
    log.run(apt_get().arg("update"))?;
    log.run(
        apt_get()
            .args(["install", "-y", "--no-install-recommends"])
            .args(&missing),
    )?;
    Ok(())
}

/// Mounts a procfs at `root/proc` unless something is mounted there already.
pub fn ensure_proc_mounted(root: &Path) -> Result<()> {
    let target = root.join("proc");
    let target = target
        .canonicalize()
        .with_context(|| format!("{} is missing", target.display()))?;
    if mount_points()?.contains(&target) {
        return Ok(());
    }
    say(TAG, format_args!("mounting proc on {}", target.display()));
    cmd::output(
        Command::new("mount")
            .args(["-t", "proc", "proc"])
            .arg(&target),
    )?;
    Ok(())
}

/// Unmounts whatever is mounted below `root` (deepest first), then deletes the tree without
/// crossing into other file systems.
fn remove_tree(root: &Path) -> Result<()> {
    let root = root
        .canonicalize()
        .with_context(|| format!("cannot resolve {}", root.display()))?;
    ensure!(
        root.components().count() > 2,
        "refusing to remove {}",
        root.display()
    );
    let mut mounts: Vec<PathBuf> = mount_points()?
        .into_iter()
        .filter(|m| m.starts_with(&root))
        .collect();
    mounts.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
    for mount in &mounts {
        cmd::output(Command::new("umount").arg(mount))?;
    }
    if let Some(left) = mount_points()?.into_iter().find(|m| m.starts_with(&root)) {
        bail!(
            "{} is still mounted; not removing {}",
            left.display(),
            root.display()
        );
    }
    cmd::output(
        Command::new("rm")
            .args(["-rf", "--one-file-system"])
            .arg(&root),
    )?;
    Ok(())
}

/// Mount points of this mount namespace. procfs keeps the kernel's octal escapes (`\\040` for a
/// space); the paths compared here are this tool's own, which have none.
fn mount_points() -> Result<Vec<PathBuf>> {
    let mounts = procfs::process::Process::myself()
        .and_then(|me| me.mountinfo())
        .context("cannot read /proc/self/mountinfo")?;
    Ok(mounts.into_iter().map(|m| m.mount_point).collect())
}
