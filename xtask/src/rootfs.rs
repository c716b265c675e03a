//! `cargo xtask rootfs`: a minimal Debian bookworm root file system (`debootstrap
//! --variant=minbase`), made once and cached as a tarball outside the repository. It is what a
//! fresh machine of the project's kind has of Debian, with nothing of ours installed: the root
//! the CI check runs the README's first command in, the root the `.deb` is installed into in the
//! tests, and the base of the OCI image. Prints the tarball's path.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use crate::pythons::cmd::{say, Log};
use crate::pythons::debian_mirror;
use crate::pythons::host::ensure_installed;

const TAG: &str = "rootfs";
/// Where the tarball is cached unless `PYAGENT_ROOTFS_DIR` says otherwise.
const DEFAULT_DIR: &str = "/var/cache/pyagent/rootfs";
const TARBALL: &str = "bookworm-minbase.tar";

/// `cargo xtask rootfs`
pub fn run() -> Result<()> {
    println!("{}", minbase_tarball()?.display());
    Ok(())
}

/// The cached tarball of a bookworm minbase root, made first if missing.
pub fn minbase_tarball() -> Result<PathBuf> {
    let dir = std::env::var_os("PYAGENT_ROOTFS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_DIR));
    let tarball = dir.join(TARBALL);
    if tarball.exists() {
        return Ok(tarball);
    }
    let mirror = debian_mirror()?;
    let logs = dir.join("logs");
    ensure_installed(&logs, TAG, &["debootstrap", "debian-archive-keyring"])?;
    let tree = dir.join("bookworm-minbase.tree");
    if tree.exists() {
        say(
            TAG,
            format_args!("removing the unfinished {}", tree.display()),
        );
        fs::remove_dir_all(&tree).with_context(|| format!("cannot remove {}", tree.display()))?;
    }
    say(
        TAG,
        format_args!("creating a minimal bookworm tree in {}", tree.display()),
    );
    let log = Log::new(TAG, &logs, "debootstrap")?;
    log.run(
        Command::new("debootstrap")
            .args(["--variant=minbase", "bookworm"])
            .arg(&tree)
            .arg(mirror),
    )?;
    pack(&log, &tree, &tarball)?;
    fs::remove_dir_all(&tree).with_context(|| format!("cannot remove {}", tree.display()))?;
    Ok(tarball)
}

/// Packs `tree` into `tarball` (numeric owners, so that it unpacks the same anywhere), through a
/// temporary name so that an interrupted run leaves no tarball that looks finished.
fn pack(log: &Log, tree: &Path, tarball: &Path) -> Result<()> {
    let partial = tarball.with_extension("tar.partial");
    log.run(
        Command::new("tar")
            .arg("-C")
            .arg(tree)
            .args(["--numeric-owner", "-cf"])
            .arg(&partial)
            .arg("."),
    )?;
    fs::rename(&partial, tarball).with_context(|| {
        format!(
            "cannot rename {} to {}",
            partial.display(),
            tarball.display()
        )
    })
}
