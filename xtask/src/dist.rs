//! `cargo xtask dist`: the release artifacts a fleet installs, in `target/dist/`:
//! - `pyagent_<version>_amd64.deb` (cargo-deb, from `[package.metadata.deb]` in
//!   `agent/Cargo.toml`): the binary with its BPF object embedded, stripped of its debug info,
//!   the systemd unit, the config file and a man page (help2man, from the binary's own `--help`);
//! - `pyagent-dbgsym_<version>_amd64.ddeb`: the debug info, found by the binary's build id
//!   (`/usr/lib/debug/.build-id/`), so that a crash or a profile of the agent is still symbolized;
//! - `pyagent_<version>_oci.tar`: an OCI image archive of `localhost/pyagent:<version>` (the name
//!   `deploy/kubernetes/daemonset.yaml` uses), built by podman from `deploy/Containerfile` on the
//!   cached bookworm minbase root (`cargo xtask rootfs`): no image registry is needed.
//!
//! `--arch arm64` writes `pyagent_<version>_arm64.deb` and its `.ddeb` instead, from the binary
//! cross-built in a sid root ([`crate::cross`]); its man page comes from that binary's `--help`
//! run under qemu-user. No arm64 image yet.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::pythons::cmd::{say, Log};
use crate::pythons::host::ensure_installed;
use crate::{cross, pythons, rootfs, test};

const TAG: &str = "dist";
/// help2man writes the man page; podman builds and saves the image (and runs it in the tests,
/// with runc: crun refuses the hybrid cgroup layout of these machines).
const DIST_PACKAGES: &[&str] = &["help2man", "podman", "runc", "catatonit"];
/// What the arm64 package needs besides: debootstrap for the sid root, qemu-user to run the
/// arm64 binary for help2man, the arm64 binutils cargo-deb strips and splits the binary with.
const ARM64_PACKAGES: &[&str] = &[
    "debootstrap",
    "qemu-user-static",
    "binutils-aarch64-linux-gnu",
];
/// The cargo-deb release the `.deb` is built with, installed with `cargo install` if missing.
const CARGO_DEB_VERSION: &str = "3.8.0";
/// The agent's version: the workspace's, which xtask shares.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// What the image is called, locally and in the DaemonSet.
pub const IMAGE_NAME: &str = "localhost/pyagent";
/// Parts of the minbase root the agent never reads at run time, left out of the image.
const IMAGE_PRUNE: &[&str] = &[
    "usr/share/doc",
    "usr/share/man",
    "usr/share/info",
    "usr/share/locale",
    "var/cache/apt",
    "var/lib/apt/lists",
];

/// `cargo xtask dist` options.
#[derive(clap::Args)]
pub struct Args {
    /// The Debian architecture to build for: amd64, the host's (the .deb, its dbgsym and the
    /// image), or arm64, cross-built (the .deb and its dbgsym).
    #[arg(long, value_enum, default_value_t = Arch::Amd64)]
    arch: Arch,
}

/// An architecture the agent is packaged for, by its Debian name.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Arch {
    Amd64,
    Arm64,
}

impl Arch {
    fn debian_name(self) -> &'static str {
        match self {
            Arch::Amd64 => "amd64",
            Arch::Arm64 => "arm64",
        }
    }
}

/// The artifacts' paths.
pub struct Artifacts {
    pub deb: PathBuf,
    pub dbgsym: PathBuf,
    pub image: PathBuf,
}

/// The workspace's `target/dist`.
pub fn dist_dir() -> PathBuf {
    workspace_root().join("target").join("dist")
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_owned()
}

/// The artifacts' paths for `arch`, built or not (arm64 has no image).
pub fn artifacts(arch: Arch) -> Artifacts {
    let dist = dist_dir();
    let arch = arch.debian_name();
    Artifacts {
        deb: dist.join(format!("pyagent_{VERSION}_{arch}.deb")),
        dbgsym: dist.join(format!("pyagent-dbgsym_{VERSION}_{arch}.ddeb")),
        image: dist.join(format!("pyagent_{VERSION}_oci.tar")),
    }
}

/// `cargo xtask dist [--arch ARCH]`
pub fn run(args: &Args) -> Result<()> {
    let built = match args.arch {
        Arch::Amd64 => build()?,
        Arch::Arm64 => build_arm64()?,
    };
    for path in [&built.deb, &built.dbgsym, &built.image] {
        if args.arch == Arch::Arm64 && path == &built.image {
            continue;
        }
        let size = fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        println!("{} ({:.1} MiB)", path.display(), size as f64 / 1048576.0);
    }
    Ok(())
}

/// Builds the amd64 artifacts: the package, its dbgsym and the image.
pub fn build() -> Result<Artifacts> {
    let logs = pythons::Args::prepare().dir().join("logs");
    test::ensure_build_packages(&logs)?;
    ensure_installed(&logs, TAG, DIST_PACKAGES)?;
    let log = Log::new(TAG, &logs, TAG)?;
    let root = workspace_root();
    test::cargo(&["build", "--release", "--quiet", "-p", "pyagent"])?;
    let binary = root.join("target/release/pyagent");
    let dist = dist_dir();
    fs::create_dir_all(&dist).with_context(|| format!("cannot create {}", dist.display()))?;
    let out = artifacts(Arch::Amd64);

    man_page(&log, &binary, &dist.join("man"))?;
    package(&log, &out, None)?;

    // The image gets the same stripped binary.
    let stripped = dist.join("pyagent");
    log.run(
        Command::new("objcopy")
            .arg("--strip-debug")
            .arg(&binary)
            .arg(&stripped),
    )?;
    image(&log, &stripped, &dist, &out.image)?;
    Ok(out)
}

/// Builds the arm64 package and its dbgsym from the agent cross-built in the sid root.
fn build_arm64() -> Result<Artifacts> {
    let logs = pythons::Args::prepare().dir().join("logs");
    ensure_installed(&logs, TAG, DIST_PACKAGES)?;
    ensure_installed(&logs, TAG, ARM64_PACKAGES)?;
    let log = Log::new(TAG, &logs, "dist-arm64")?;
    let root = workspace_root();
    let binary = cross::build_agent(&root)?;
    let dist = dist_dir();
    fs::create_dir_all(&dist).with_context(|| format!("cannot create {}", dist.display()))?;
    let out = artifacts(Arch::Arm64);

    // help2man runs the program it documents: the arm64 binary, through qemu-user with the
    // root's arm64 C library. The same text as amd64's: the flags do not depend on the arch.
    let runner = dist.join("man/arm64/pyagent");
    let sysroot = cross::sysroot();
    write_runner(&runner, &binary, &sysroot)?;
    man_page(&log, &runner, &dist.join("man"))?;
    package(&log, &out, Some(&root))?;
    Ok(out)
}

/// An executable script at `path` that runs the arm64 `binary` under qemu-user over `sysroot`.
fn write_runner(path: &Path, binary: &Path, sysroot: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;

    let dir = path.parent().context("the runner has a directory")?;
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let script = format!(
        "#!/bin/sh\nexec qemu-aarch64-static -L '{}' '{}' \"$@\"\n",
        sysroot.display(),
        binary.display()
    );
    fs::write(path, script).with_context(|| format!("cannot write {}", path.display()))?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o755))
        .with_context(|| format!("cannot make {} executable", path.display()))
}

/// The `.deb` and its dbgsym of the binary cargo built, for the host or, with `cross_workspace`,
/// for [`cross::TARGET`] in the cross root.
fn package(log: &Log, out: &Artifacts, cross_workspace: Option<&Path>) -> Result<()> {
    ensure_cargo_deb(log)?;
    say(TAG, format_args!("building {}", out.deb.display()));
    let out_deb = out.deb.to_str().context("the dist path is not UTF-8")?;
    // The release profile keeps line tables (`debug = 1`) for the benches' own profiles; a
    // fleet pulls the binary onto every node, so the package ships it stripped and the debug
    // info goes to the dbgsym package, compressed.
    let args = [
        "--no-build",
        "--quiet",
        "--dbgsym",
        "--compress-debug-symbols=zlib",
        "--output",
        out_deb,
    ];
    match cross_workspace {
        None => {
            let mut all = vec!["deb", "-p", "pyagent"];
            all.extend(args);
            test::cargo(&all)?;
        }
        Some(workspace) => cross::cargo_deb(workspace, &args)?,
    }
    // cargo-deb names it after the `.deb`; Debian's name says which package it is.
    let written = out.deb.with_extension("ddeb");
    fs::rename(&written, &out.dbgsym).with_context(|| {
        format!(
            "cargo deb --dbgsym wrote no {} to move to {}",
            written.display(),
            out.dbgsym.display()
        )
    })
}

/// `man/pyagent.1.gz` from the binary's `--help` and its subcommands' `--help`.
fn man_page(log: &Log, binary: &Path, dir: &Path) -> Result<()> {
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    // help2man reads one program's --help; the subcommands' own are added as a section.
    let mut include = String::from("[COMMANDS]\n");
    for sub in ["dump", "record", "top", "spans"] {
        let help = Command::new(binary)
            .args([sub, "--help"])
            .output()
            .with_context(|| format!("cannot run {} {sub} --help", binary.display()))?;
        include.push_str(&format!(
            ".SS \"pyagent {sub}\"\n.nf\n{}\n.fi\n",
            String::from_utf8_lossy(&help.stdout).replace('\\', "\\\\")
        ));
    }
    let include_path = dir.join("commands.h2m");
    fs::write(&include_path, include)
        .with_context(|| format!("cannot write {}", include_path.display()))?;
    let page = dir.join("pyagent.1");
    log.run(
        Command::new("help2man")
            .args(["--no-info", "--section=1", "--name"])
            .arg("system-wide sampling profiler for CPython")
            .arg("--include")
            .arg(&include_path)
            .arg("--output")
            .arg(&page)
            .arg(binary),
    )?;
    log.run(Command::new("gzip").args(["-9nf"]).arg(&page))
}

/// Installs cargo-deb with cargo unless the pinned release is there.
fn ensure_cargo_deb(log: &Log) -> Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let installed = Command::new(&cargo)
        .args(["deb", "--version"])
        .output()
        .is_ok_and(|out| {
            out.status.success() && String::from_utf8_lossy(&out.stdout).contains(CARGO_DEB_VERSION)
        });
    if installed {
        return Ok(());
    }
    log.run(Command::new(&cargo).args([
        "install",
        "--locked",
        "--quiet",
        "cargo-deb",
        "--version",
        CARGO_DEB_VERSION,
    ]))
}

/// Builds `localhost/pyagent:VERSION` from `deploy/Containerfile` and saves it as an OCI archive.
fn image(log: &Log, binary: &Path, dist: &Path, archive: &Path) -> Result<()> {
    let context = dist.join("image-context");
    if context.exists() {
        fs::remove_dir_all(&context)
            .with_context(|| format!("cannot remove {}", context.display()))?;
    }
    let tree = context.join("rootfs");
    fs::create_dir_all(&tree).with_context(|| format!("cannot create {}", tree.display()))?;
    log.run(
        Command::new("tar")
            .arg("-C")
            .arg(&tree)
            .arg("-xf")
            .arg(rootfs::minbase_tarball()?),
    )?;
    for part in IMAGE_PRUNE {
        let path = tree.join(part);
        if path.exists() {
            fs::remove_dir_all(&path)
                .with_context(|| format!("cannot remove {}", path.display()))?;
        }
    }
    log.run(
        Command::new("tar")
            .arg("-C")
            .arg(&tree)
            .args(["--numeric-owner", "-cf"])
            .arg(context.join("rootfs.tar"))
            .arg("."),
    )?;
    fs::remove_dir_all(&tree).with_context(|| format!("cannot remove {}", tree.display()))?;
    let root = workspace_root();
    for (from, to) in [
        (binary.to_owned(), "pyagent"),
        (root.join("deploy/pyagent.toml"), "pyagent.toml"),
    ] {
        fs::copy(&from, context.join(to))
            .with_context(|| format!("cannot copy {} into the image context", from.display()))?;
    }
    let tag = format!("{IMAGE_NAME}:{VERSION}");
    say(TAG, format_args!("building the image {tag}"));
    log.run(
        Command::new("podman")
            .args([
                "build",
                "--quiet",
                "--network=none",
                "--tag",
                &tag,
                "--file",
            ])
            .arg(root.join("deploy/Containerfile"))
            .arg(&context),
    )?;
    if archive.exists() {
        fs::remove_file(archive).with_context(|| format!("cannot remove {}", archive.display()))?;
    }
    log.run(
        Command::new("podman")
            .args(["save", "--quiet", "--format", "oci-archive", "--output"])
            .arg(archive)
            .arg(&tag),
    )?;
    fs::remove_dir_all(&context).with_context(|| format!("cannot remove {}", context.display()))?;
    if !archive.exists() {
        bail!("podman save wrote no {}", archive.display());
    }
    Ok(())
}
