//! `py313-static` and `py313t`: CPython 3.13.15 built from the upstream tarball of Debian's
//! `python3.13 3.13.15-1` source package (no Debian patches), with plain `configure`
//! (static libpython, the default) and `configure --disable-gil`.
//!
//! The tarball comes from sid through a private apt configuration under the cache directory
//! (its own sources.list, lists and cache), so the host's apt sources stay as they are. Sid's
//! index also lists newer 3.13 releases whose files the mirror does not serve, hence the pin.
//! Each build is out of tree, installs into `DIR/<name>`, and leaves a stamp there once its
//! result has been verified; a prefix without a matching stamp is built again from scratch.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result};

use super::cmd::{self, say, Log};
use super::mirror::debian_mirror;
use roles::Build;

use super::{Layout, Spec};

/// Debian source package and version the tarball is taken from.
const DEB_SOURCE: &str = "python3.13";
const DEB_VERSION: &str = "3.13.15-1";
/// The CPython release in it.
pub const UPSTREAM_VERSION: &str = "3.13.15";

/// Sid's sources on `mirror`, checked with the bookworm keyring (which holds sid's signing
/// keys).
fn sources_list(mirror: &str) -> String {
    format!(
        "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] {mirror} sid main\n"
    )
}

/// File in an install prefix recording how it was built, written after verification.
const STAMP: &str = ".pyagent-build";

/// Builds every [`Build::Source`] role whose prefix is missing or stale.
pub fn ensure(layout: &Layout, specs: &[Spec]) -> Result<()> {
    for spec in specs {
        if spec.role.build == Build::Source {
            ensure_build(layout, spec, spec.role.configure_args())
                .with_context(|| format!("{}: build failed", spec.role.name))?;
        }
    }
    Ok(())
}

fn ensure_build(layout: &Layout, spec: &Spec, configure: &[&str]) -> Result<()> {
    let tag = spec.role.name;
    let prefix = layout.dir.join(spec.role.name);
    let mut configure_args = vec![format!("--prefix={}", prefix.display())];
    configure_args.extend(configure.iter().map(|arg| arg.to_string()));
    let stamp_text = format!(
        "{DEB_SOURCE} {DEB_VERSION}: configure {}\n",
        configure_args.join(" ")
    );
    let stamp = prefix.join(STAMP);
    if fs::read_to_string(&stamp).is_ok_and(|text| text == stamp_text) && spec.verify().is_ok() {
        say(tag, format_args!("up to date: {}", spec.exe.display()));
        return Ok(());
    }

    let source = ensure_source(layout)?;
    let started = Instant::now();
    let build = layout.dir.join("build").join(spec.role.name);
    for dir in [&build, &prefix] {
        remove_dir(dir)?;
    }
    fs::create_dir_all(&build).with_context(|| format!("cannot create {}", build.display()))?;
    let log = Log::new(tag, &layout.logs(), &format!("{}-build", spec.role.name))?;
    let jobs = std::thread::available_parallelism().map_or(2, |n| n.get());
    say(
        tag,
        format_args!(
            "building CPython {UPSTREAM_VERSION} into {} (about 6 minutes on 2 cores)",
            prefix.display()
        ),
    );
    log.run(
        Command::new(source.join("configure"))
            .args(&configure_args)
            .current_dir(&build),
    )?;
    log.run(
        Command::new("make")
            .arg(format!("-j{jobs}"))
            .current_dir(&build),
    )?;
    log.run(Command::new("make").arg("install").current_dir(&build))?;
    let entry = spec
        .verify()
        .context("the freshly built interpreter does not work")?;
    fs::write(&stamp, stamp_text).with_context(|| format!("cannot write {}", stamp.display()))?;
    remove_dir(&build)?;
    say(
        tag,
        format_args!(
            "built Python {} in {}",
            entry.version,
            cmd::elapsed(started.elapsed())
        ),
    );
    Ok(())
}

/// Downloads (once) and extracts (once) the source tree; returns its directory.
fn ensure_source(layout: &Layout) -> Result<PathBuf> {
    let src = layout.dir.join("src");
    let tree = src.join(format!("Python-{UPSTREAM_VERSION}"));
    let stamp = src.join(format!("Python-{UPSTREAM_VERSION}.extracted"));
    if stamp.exists() && tree.join("configure").exists() {
        return Ok(tree);
    }
    let tag = "source";
    fs::create_dir_all(&src).with_context(|| format!("cannot create {}", src.display()))?;
    let log = Log::new(tag, &layout.logs(), "source-download")?;
    let tarball = src.join(format!("{DEB_SOURCE}_{UPSTREAM_VERSION}.orig.tar.xz"));
    if !tarball.exists() {
        download(layout, &log, &tarball)?;
    }
    remove_dir(&tree)?;
    say(tag, format_args!("extracting {}", tarball.display()));
    log.run(
        Command::new("tar")
            .arg("-xJf")
            .arg(&tarball)
            .arg("-C")
            .arg(&src),
    )?;
    fs::write(&stamp, "").with_context(|| format!("cannot write {}", stamp.display()))?;
    Ok(tree)
}

/// Fetches the upstream tarball of `DEB_SOURCE=DEB_VERSION` from sid into `tarball`, with apt
/// configured to use only files under `DIR/apt`.
fn download(layout: &Layout, log: &Log, tarball: &Path) -> Result<()> {
    let mirror = debian_mirror()?;
    let apt = layout.dir.join("apt");
    for dir in ["lists/partial", "cache/archives/partial"] {
        let dir = apt.join(dir);
        fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let sources = apt.join("sources.list");
    fs::write(&sources, sources_list(&mirror))
        .with_context(|| format!("cannot write {}", sources.display()))?;
    let apt_get = || {
        let mut cmd = Command::new("apt-get");
        for (key, value) in [
            ("Dir::Etc::SourceList", sources.as_os_str()),
            ("Dir::Etc::SourceParts", "/dev/null".as_ref()),
            ("Dir::State::Lists", apt.join("lists").as_os_str()),
            ("Dir::Cache", apt.join("cache").as_os_str()),
            // The sid mirror reached here is a snapshot that may be past its Valid-Until.
            ("Acquire::Check-Valid-Until", "false".as_ref()),
            // Downloads land in directories the sandbox user `_apt` cannot write.
            ("APT::Sandbox::User", "root".as_ref()),
        ] {
            let mut option = std::ffi::OsString::from(format!("{key}="));
            option.push(value);
            cmd.arg("-o").arg(option);
        }
        cmd
    };
    let tmp = tarball.with_file_name("download.tmp");
    remove_dir(&tmp)?;
    fs::create_dir_all(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    say(
        log.tag(),
        format_args!("downloading {DEB_SOURCE}={DEB_VERSION} from sid"),
    );
    log.run(apt_get().arg("update"))?;
    log.run(
        apt_get()
            .args(["source", "--download-only"])
            .arg(format!("{DEB_SOURCE}={DEB_VERSION}"))
            .current_dir(&tmp),
    )?;
    let name = tarball
        .file_name()
        .context("the tarball path has no file name")?;
    fs::rename(tmp.join(name), tarball).with_context(|| {
        format!(
            "apt-get source did not leave {} in {}",
            name.to_string_lossy(),
            tmp.display()
        )
    })?;
    remove_dir(&tmp)
}

/// Removes the directory tree at `dir` if it exists.
fn remove_dir(dir: &Path) -> Result<()> {
    match fs::remove_dir_all(dir) {
        Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
            Err(err).with_context(|| format!("cannot remove {}", dir.display()))
        }
        _ => Ok(()),
    }
}
