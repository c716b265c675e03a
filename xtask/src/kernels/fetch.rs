//! Debian's generic amd64 kernels and virtme-ng, fetched once into the cache directory.
//!
//! Each suite has an apt configuration of its own under `DIR/SUITE/` (sources.list, lists/,
//! cache/), so the host's sources and package state are never touched. The `linux-image-amd64`
//! metapackage names the suite's current kernel package; it is downloaded next to them and
//! unpacked into `DIR/SUITE/root` (through `root.tmp` and a rename, so that a `root` that exists
//! is whole: it is what marks the suite as fetched, and a second run needs no network).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, ensure, Context, Result};

use crate::pythons::cmd::{self, say, Log};
use crate::pythons::debian_mirror;

const TAG: &str = "kernels";

/// The Debian releases whose kernels are tested, oldest first, with the major version each
/// ships (what `--kernel` also takes).
pub const SUITES: &[(&str, &str)] = &[
    ("bullseye", "5.10"),
    ("bookworm", "6.1"),
    ("trixie", "6.12"),
];

/// The keyring of the kernels' sources.list lines; their archive is the host's own mirror.
const KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";
/// The metapackage that depends on the suite's current generic amd64 kernel. The cloud flavour
/// would not do: it has no 9p modules, which the guest mounts the host's root with.
const METAPACKAGE: &str = "linux-image-amd64";

/// A kernel unpacked in the cache.
pub struct Kernel {
    pub suite: &'static str,
    /// `uname -r` of the kernel, e.g. `6.1.0-50-amd64`.
    pub version: String,
    /// The unpacked package (`boot/`, `lib/modules/` or `usr/lib/modules/`).
    pub root: PathBuf,
}

impl Kernel {
    /// The image virtme-ng boots.
    pub fn vmlinuz(&self) -> PathBuf {
        self.root
            .join("boot")
            .join(format!("vmlinuz-{}", self.version))
    }

    /// The kernel's modules in its unpacked package: trixie ships them under /usr only.
    fn modules(&self) -> Result<PathBuf> {
        ["lib/modules", "usr/lib/modules"]
            .iter()
            .map(|dir| self.root.join(dir).join(&self.version))
            .find(|dir| dir.is_dir())
            .with_context(|| {
                format!(
                    "no modules for {} under {}/{{lib,usr/lib}}/modules",
                    self.version,
                    self.root.display()
                )
            })
    }
}

/// Fetches and unpacks `suite`'s kernel unless `dir/suite/root` holds it, and installs its
/// modules into /lib/modules.
pub fn ensure_kernel(dir: &Path, suite: &'static str, logs: &Path) -> Result<Kernel> {
    let suite_dir = dir.join(suite);
    let root = suite_dir.join("root");
    if !root.is_dir() {
        let log = Log::new(TAG, logs, &format!("fetch-{suite}"))?;
        say(TAG, format_args!("fetching {suite}'s kernel"));
        let apt = Apt::new(&suite_dir, suite)?;
        apt.update(&log)?;
        let package = apt.kernel_package()?;
        let deb = apt.download(&log, &package)?;
        unpack(&log, &deb, &root)?;
    }
    let kernel = Kernel {
        suite,
        version: unpacked_version(&root)?,
        root,
    };
    install_modules(&kernel, logs)?;
    Ok(kernel)
}

/// The version of the one `vmlinuz-VERSION` in `root/boot`.
fn unpacked_version(root: &Path) -> Result<String> {
    let boot = root.join("boot");
    let mut versions: Vec<String> = fs::read_dir(&boot)
        .with_context(|| format!("cannot list {}", boot.display()))?
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().into_string().ok()?;
            name.strip_prefix("vmlinuz-").map(str::to_owned)
        })
        .collect();
    match versions.len() {
        1 => Ok(versions.remove(0)),
        0 => bail!("no vmlinuz-* in {}", boot.display()),
        _ => bail!(
            "several kernels in {}: {}; remove the directory {} to fetch again",
            boot.display(),
            versions.join(", "),
            root.display()
        ),
    }
}

/// apt-get and apt-cache with a suite's private configuration.
struct Apt {
    dir: PathBuf,
}

impl Apt {
    /// Writes `dir/sources.list` for `suite` on the host's mirror and creates the state and
    /// cache directories.
    fn new(dir: &Path, suite: &str) -> Result<Apt> {
        let mirror = debian_mirror()?;
        for sub in ["lists/partial", "cache/archives/partial"] {
            let path = dir.join(sub);
            fs::create_dir_all(&path)
                .with_context(|| format!("cannot create {}", path.display()))?;
        }
        let list = dir.join("sources.list");
        let line = format!("deb [signed-by={KEYRING}] {mirror} {suite} main\n");
        fs::write(&list, line).with_context(|| format!("cannot write {}", list.display()))?;
        Ok(Apt {
            dir: dir.to_owned(),
        })
    }

    /// `program` with the private configuration's options.
    fn command(&self, program: &str) -> Command {
        let dir = self.dir.display();
        let mut cmd = Command::new(program);
        for option in [
            format!("Dir::Etc::SourceList={dir}/sources.list"),
            "Dir::Etc::SourceParts=/dev/null".to_owned(),
            format!("Dir::State::Lists={dir}/lists"),
            format!("Dir::Cache={dir}/cache"),
            // The mirror these machines reach may serve a Release file past its Valid-Until.
            "Acquire::Check-Valid-Until=false".to_owned(),
        ] {
            cmd.arg("-o").arg(option);
        }
        cmd.current_dir(&self.dir)
            .env("DEBIAN_FRONTEND", "noninteractive");
        cmd
    }

    fn update(&self, log: &Log) -> Result<()> {
        log.run(self.command("apt-get").arg("update"))
    }

    /// The kernel package the metapackage depends on, e.g. `linux-image-6.1.0-50-amd64`.
    fn kernel_package(&self) -> Result<String> {
        let show = cmd::output(self.command("apt-cache").args([
            "show",
            "--no-all-versions",
            METAPACKAGE,
        ]))?;
        kernel_dependency(&show)
            .with_context(|| format!("{METAPACKAGE} depends on no linux-image package: {show}"))
    }

    /// Downloads `package` into the suite's directory unless a .deb of it is there already.
    fn download(&self, log: &Log, package: &str) -> Result<PathBuf> {
        if let Some(deb) = self.downloaded(package)? {
            return Ok(deb);
        }
        log.run(self.command("apt-get").args(["download", package]))?;
        self.downloaded(package)?.with_context(|| {
            format!(
                "apt-get download left no {package}_*.deb in {}",
                self.dir.display()
            )
        })
    }

    fn downloaded(&self, package: &str) -> Result<Option<PathBuf>> {
        let prefix = format!("{package}_");
        let found = fs::read_dir(&self.dir)
            .with_context(|| format!("cannot list {}", self.dir.display()))?
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .find(|path| {
                path.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".deb"))
            });
        Ok(found)
    }
}

/// The `linux-image-*` package in the `Depends:` field of an `apt-cache show` record.
fn kernel_dependency(show: &str) -> Option<String> {
    let depends = show
        .lines()
        .find_map(|line| line.strip_prefix("Depends:"))?;
    depends
        .split([',', '|'])
        .filter_map(|dep| dep.split_whitespace().next())
        .find(|name| name.starts_with("linux-image-"))
        .map(str::to_owned)
}

/// `dpkg-deb -x DEB ROOT`, through `ROOT.tmp`.
fn unpack(log: &Log, deb: &Path, root: &Path) -> Result<()> {
    let tmp = root.with_extension("tmp");
    remove_if_present(&tmp)?;
    log.run(Command::new("dpkg-deb").arg("-x").arg(deb).arg(&tmp))?;
    fs::rename(&tmp, root)
        .with_context(|| format!("cannot rename {} to {}", tmp.display(), root.display()))
}

/// Copies the kernel's modules to /lib/modules/VERSION and indexes them (depmod), unless that
/// was done: virtme-ng builds the guest's initramfs (9p, virtio) from the installed modules.
fn install_modules(kernel: &Kernel, logs: &Path) -> Result<()> {
    let installed = Path::new("/lib/modules").join(&kernel.version);
    if installed.join("modules.dep").exists() {
        return Ok(());
    }
    let log = Log::new(TAG, logs, &format!("modules-{}", kernel.suite))?;
    if !installed.exists() {
        let parent = Path::new("/lib/modules");
        fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
        let tmp = parent.join(format!(".{}.pyagent-tmp", kernel.version));
        remove_if_present(&tmp)?;
        log.run(
            Command::new("cp")
                .arg("-a")
                .arg(kernel.modules()?)
                .arg(&tmp),
        )?;
        fs::rename(&tmp, &installed).with_context(|| {
            format!("cannot rename {} to {}", tmp.display(), installed.display())
        })?;
    }
    log.run(Command::new("depmod").arg(&kernel.version))
}

/// The venv's `vng`, installed from the Python package index unless it is there.
pub fn ensure_vng(dir: &Path, logs: &Path) -> Result<PathBuf> {
    let venv = dir.join("venv");
    let vng = venv.join("bin/vng");
    if vng.exists() {
        return Ok(vng);
    }
    let log = Log::new(TAG, logs, "venv")?;
    say(
        TAG,
        format_args!("installing virtme-ng into {}", venv.display()),
    );
    log.run(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
    log.run(Command::new(venv.join("bin/pip")).args(["install", "virtme-ng"]))?;
    ensure!(
        vng.exists(),
        "pip installed virtme-ng but {} is missing",
        vng.display()
    );
    Ok(vng)
}

fn remove_if_present(path: &Path) -> Result<()> {
    if path.exists() {
        fs::remove_dir_all(path).with_context(|| format!("cannot remove {}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_dependency_is_the_linux_image_package() {
        let show = "Package: linux-image-amd64\nSource: linux-signed-amd64 (6.1.176+1)\n\
                    Version: 6.1.176-1\nDepends: linux-image-6.1.0-50-amd64 (= 6.1.176-1)\n\
                    Description-en: Linux for 64-bit PCs (meta-package)\n";
        assert_eq!(
            kernel_dependency(show).as_deref(),
            Some("linux-image-6.1.0-50-amd64")
        );
        let trixie = "Depends: linux-image-6.12.117+deb13-amd64 (= 6.12.117-1), foo\n";
        assert_eq!(
            kernel_dependency(trixie).as_deref(),
            Some("linux-image-6.12.117+deb13-amd64")
        );
        assert_eq!(kernel_dependency("Depends: initramfs-tools\n"), None);
    }
}
