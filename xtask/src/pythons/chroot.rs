//! The [`roles::Build::Chroot`] roles: Debian's own interpreters of releases other than the
//! host's, `py39-debian` (bullseye's `python3.9`) and `py314`, `py315` (sid's `python3.14` and
//! `python3.15`, which need a newer glibc than the bookworm host has). Each release has a
//! `debootstrap --variant=minbase` tree at `DIR/<release>-chroot`, and its interpreters run as
//! `chroot DIR/<release>-chroot /usr/bin/python3.X`.
//!
//! /proc: a fresh procfs is mounted at each tree's `proc` (same PID namespace, so host
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
use roles::{Build, Suite};

use super::{Layout, Spec};

/// Written into the tree once debootstrap has finished; a tree without it is started over.
const STAMP: &str = ".pyagent-debootstrap-done";
/// apt configuration written into the chroot.
const APT_CONF: &str = "\
// Written by `cargo xtask pythons`: the mirror reached from the project's machines is a
// snapshot whose Release file may be past its Valid-Until date.
Acquire::Check-Valid-Until \"false\";
Acquire::Check-Date \"false\";
";

/// Creates each release's chroot that a role needs, mounts its /proc, and installs the
/// interpreters missing in it.
pub fn ensure(layout: &Layout, specs: &[Spec]) -> Result<()> {
    let mut suites: Vec<Suite> = Vec::new();
    for spec in specs {
        if let Build::Chroot(suite, _) = spec.role.build {
            if !suites.contains(&suite) {
                suites.push(suite);
            }
        }
    }
    for suite in suites {
        ensure_suite(layout, suite, specs)
            .with_context(|| format!("the {} chroot", suite.name()))?;
    }
    Ok(())
}

/// [`ensure`] for the roles of `suite`.
fn ensure_suite(layout: &Layout, suite: Suite, specs: &[Spec]) -> Result<()> {
    let tag = suite.tree_name();
    let root = layout.chroot(suite);
    let log = Log::new(tag, &layout.logs(), tag)?;
    let packages = |only_missing: bool| -> Vec<&str> {
        specs
            .iter()
            .filter_map(|spec| match spec.role.build {
                Build::Chroot(s, package) if s == suite => {
                    (!only_missing || spec.verify().is_err()).then_some(package)
                }
                _ => None,
            })
            .collect()
    };
    if !root.join(STAMP).exists() {
        let mirror = debian_mirror()?;
        if root.exists() {
            say(
                tag,
                format_args!("removing the unfinished chroot {}", root.display()),
            );
            remove_tree(&root)?;
        }
        say(
            tag,
            format_args!(
                "creating a minimal {} tree in {}",
                suite.name(),
                root.display()
            ),
        );
        log.run(
            Command::new("debootstrap")
                .args(["--variant=minbase", suite.name()])
                .arg(&root)
                .arg(mirror),
        )?;
        let conf = root.join("etc/apt/apt.conf.d/99pyagent");
        fs::write(&conf, APT_CONF).with_context(|| format!("cannot write {}", conf.display()))?;
        fs::write(root.join(STAMP), "")
            .with_context(|| format!("cannot write the stamp in {}", root.display()))?;
    }
    ensure_proc_mounted(&root)?;

    let missing = packages(true);
    if missing.is_empty() {
        say(
            tag,
            format_args!("installed: {}", packages(false).join(" ")),
        );
        return Ok(());
    }
    say(
        tag,
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
    say(
        "chroot",
        format_args!("mounting proc on {}", target.display()),
    );
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
