//! The Debian sid root the agent is cross-built for arm64 in (`cargo xtask dist --arch arm64`).
//!
//! Why a sid root: the host's Rust toolchain (rustup's) has the x86_64 standard library only and
//! cannot fetch another target's, while sid packages `rustc` and `cargo` with the matching
//! `libstd-rust-dev:arm64`, and the cross C compiler the linker and the crates' C parts need.
//! The binary links against sid's arm64 glibc but asks for no symbol newer than bookworm's.
//!
//! The root lives in `DIR/sid` (`/var/cache/pyagent/cross`, or `PYAGENT_CROSS_DIR`), made once
//! with debootstrap from the host's own mirror. Each build runs in a mount namespace of its own
//! (`unshare --mount`): the workspace is bind-mounted at its own path inside the root, so the
//! paths cargo prints are the host's, and nothing stays mounted after. The output goes to
//! [`target_dir`], apart from the host's `target/release`. Crates are fetched into the root's
//! `/root/.cargo`, with the host's resolver and CA bundle copied in: cargo trusts the proxies
//! the host trusts.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use crate::pythons::cmd::{say, Log};
use crate::pythons::debian_mirror;

const TAG: &str = "cross";
/// Where the root and its logs are kept unless `PYAGENT_CROSS_DIR` says otherwise.
const DEFAULT_DIR: &str = "/var/cache/pyagent/cross";
/// The Rust target the agent is built for.
pub const TARGET: &str = "aarch64-unknown-linux-gnu";
/// What the build and the package need in the root: sid's Rust with arm64's standard library,
/// the cross compiler and C library (the linker, `ring`'s C and assembly), the BPF toolchain
/// build.rs runs (the BPF object is built for arm64 by `-D__TARGET_ARCH_arm64`, whatever the
/// host).
const PACKAGES: &[&str] = &[
    "rustc",
    "cargo",
    "libstd-rust-dev:arm64",
    "gcc-aarch64-linux-gnu",
    "libc6-dev-arm64-cross",
    "clang-19",
    "llvm-19",
    "libbpf-dev",
    "ca-certificates",
    // cargo-deb's `$auto` dependencies: dpkg-shlibdeps and the libraries' arm64 packages.
    "dpkg-dev",
    "libc6:arm64",
    "libgcc-s1:arm64",
];
/// Written into the root once debootstrap has finished; a root without it is started over.
const STAMP: &str = ".pyagent-debootstrap-done";
/// The root's apt configuration: the sid mirror reached from the project's machines is a
/// snapshot whose Release file may be past its Valid-Until date.
const APT_CONF: &str = "\
Acquire::Check-Valid-Until \"false\";
Acquire::Check-Date \"false\";
";
/// The host's certificate bundle, and where the root keeps a copy for cargo.
const HOST_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
const HOST_CA_IN_ROOT: &str = "/etc/pyagent/host-ca-certificates.crt";
/// Runs cargo in the root, in a mount namespace of its own: `$1` the root, `$2` the workspace,
/// `$3` the target directory, `$4` the certificates cargo trusts; the arguments after them go to
/// cargo.
const CARGO_SCRIPT: &str = r#"
root=$1 ws=$2 target_dir=$3 ca=$4
shift 4
mkdir -p "$root$ws"
mount --bind "$ws" "$root$ws"
mount -t proc proc "$root/proc"
exec chroot "$root" env -i PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
    CARGO_TARGET_DIR="$target_dir" CARGO_HTTP_CAINFO="$ca" \
    CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
    CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc \
    sh -c 'cd "$1" && shift && exec cargo "$@"' sh "$ws" "$@"
"#;

/// The cache directory.
fn dir() -> PathBuf {
    std::env::var_os("PYAGENT_CROSS_DIR").map_or_else(|| PathBuf::from(DEFAULT_DIR), PathBuf::from)
}

/// The root's arm64 C library (`libc6-arm64-cross`), which qemu-user runs the binary over.
pub fn sysroot() -> PathBuf {
    dir().join("sid/usr/aarch64-linux-gnu")
}

/// The cargo target directory of the cross build, inside the workspace's `target/`.
pub fn target_dir(workspace: &Path) -> PathBuf {
    workspace.join("target").join("aarch64-cross")
}

/// Builds the release agent for arm64 in the sid root (made first if needed) and returns the
/// binary's path.
pub fn build_agent(workspace: &Path) -> Result<PathBuf> {
    let (root, log) = prepare("build")?;
    say(
        TAG,
        format_args!("building pyagent for {TARGET} in {}", root.display()),
    );
    cargo(&log, &root, workspace, &["build", "--release", "--quiet"])?;
    Ok(target_dir(workspace)
        .join(TARGET)
        .join("release")
        .join("pyagent"))
}

/// Runs `cargo deb --target TARGET ARGS` on the binary [`build_agent`] built, in the root:
/// `$auto` dependencies come from dpkg-shlibdeps, which needs the arm64 libraries' packages
/// installed, as they are there (not on the host); `cargo-deb` is the host's, copied in.
pub fn cargo_deb(workspace: &Path, args: &[&str]) -> Result<()> {
    let (root, log) = prepare("deb")?;
    let host_cargo_deb = which("cargo-deb")?;
    let to = root.join("usr/local/bin/cargo-deb");
    fs::copy(&host_cargo_deb, &to).with_context(|| {
        format!(
            "cannot copy {} to {}",
            host_cargo_deb.display(),
            to.display()
        )
    })?;
    let mut all = vec!["deb"];
    all.extend(args);
    cargo(&log, &root, workspace, &all)
}

/// The root, ready, and a fresh log `name` for the steps.
fn prepare(name: &str) -> Result<(PathBuf, Log)> {
    let dir = dir();
    let log = Log::new(TAG, &dir.join("logs"), name)?;
    let root = ensure_root(&dir, &log)?;
    Ok((root, log))
}

/// `cargo ARGS --target TARGET -p pyagent` in `root` with `workspace` mounted at its own path.
fn cargo(log: &Log, root: &Path, workspace: &Path, args: &[&str]) -> Result<()> {
    log.run(
        Command::new("unshare")
            .args(["--mount", "--propagation", "private", "--", "sh", "-ec"])
            .arg(CARGO_SCRIPT)
            .arg("sh")
            .arg(root)
            .arg(workspace)
            .arg(target_dir(workspace))
            .arg(HOST_CA_IN_ROOT)
            .args(args)
            .args(["--target", TARGET, "-p", "pyagent"]),
    )
}

/// The path of `program` on the host's PATH.
fn which(program: &str) -> Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
        .with_context(|| format!("{program} is not on PATH"))
}

/// The sid root with [`PACKAGES`] installed, made with debootstrap if it is missing.
fn ensure_root(dir: &Path, log: &Log) -> Result<PathBuf> {
    let root = dir.join("sid");
    if !root.join(STAMP).exists() {
        let mirror = debian_mirror()?;
        if root.exists() {
            // Not past another file system: a debootstrap that failed may have left its /proc
            // mounted, which rm then refuses to remove.
            say(
                TAG,
                format_args!("removing the unfinished root {}", root.display()),
            );
            log.run(
                Command::new("rm")
                    .args(["-rf", "--one-file-system"])
                    .arg(&root),
            )?;
        }
        say(
            TAG,
            format_args!("creating a minimal sid root in {}", root.display()),
        );
        log.run(
            Command::new("debootstrap")
                .args(["--variant=minbase", "sid"])
                .arg(&root)
                .arg(mirror),
        )?;
        write(
            &root.join("etc/apt/apt.conf.d/99pyagent"),
            APT_CONF.as_bytes(),
        )?;
        write(&root.join(STAMP), b"")?;
    }
    // The host's resolver and trusted certificates, again each time: they may have changed.
    // The certificates go to a file of their own, which cargo is pointed at: the root's
    // ca-certificates would rebuild its own bundle without the host's additions.
    for (from, to) in [
        ("/etc/resolv.conf", "etc/resolv.conf"),
        (HOST_CA_BUNDLE, HOST_CA_IN_ROOT.trim_start_matches('/')),
    ] {
        let to = root.join(to);
        if to.is_symlink() {
            fs::remove_file(&to).with_context(|| format!("cannot remove {}", to.display()))?;
        }
        if let Some(dir) = to.parent() {
            fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        }
        fs::copy(from, &to).with_context(|| format!("cannot copy {from} to {}", to.display()))?;
    }
    let missing: Vec<&str> = PACKAGES
        .iter()
        .copied()
        .filter(|package| !installed(&root, package))
        .collect();
    if !missing.is_empty() {
        say(
            TAG,
            format_args!("installing {} in the root", missing.join(" ")),
        );
        log.run(chroot(&root).args(["dpkg", "--add-architecture", "arm64"]))?;
        log.run(chroot(&root).args(["apt-get", "update"]))?;
        log.run(
            chroot(&root)
                .args(["apt-get", "install", "-y", "--no-install-recommends"])
                .args(&missing),
        )?;
    }
    Ok(root)
}

/// A command run in `root` with a clean environment.
fn chroot(root: &Path) -> Command {
    let mut cmd = Command::new("chroot");
    cmd.arg(root)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("HOME", "/root")
        .env("DEBIAN_FRONTEND", "noninteractive");
    cmd
}

/// Whether `package` (`name` or `name:arch`) is installed in `root`.
fn installed(root: &Path, package: &str) -> bool {
    chroot(root)
        .args(["dpkg-query", "-W", "-f", "${db:Status-Status}", package])
        .output()
        .is_ok_and(|out| out.status.success() && out.stdout == b"installed")
}

fn write(path: &Path, contents: &[u8]) -> Result<()> {
    fs::write(path, contents).with_context(|| format!("cannot write {}", path.display()))
}
