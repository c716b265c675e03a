//! Asking an installed interpreter what it is: its exact version and build flags (from the
//! interpreter itself) and where its libpython lives (from the executable's ELF dynamic
//! section, since `sysconfig`'s `Py_ENABLE_SHARED` is 1 for Debian's statically linked
//! `/usr/bin/python3.11` too).

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use roles::Libpython;
use serde::Deserialize;

use super::cmd;

/// What an interpreter reports about itself.
#[derive(Debug, Deserialize)]
pub struct Probe {
    /// `platform.python_version()`, e.g. `3.13.15`.
    pub version: String,
    /// `sysconfig.get_config_var("Py_GIL_DISABLED")` is true.
    pub free_threaded: bool,
    /// `os.path.realpath(sys.executable)`, inside the chroot for chroot interpreters.
    pub executable: PathBuf,
}

const PROBE_SCRIPT: &str = "import json, os, platform, sys, sysconfig; \
    print(json.dumps({'version': platform.python_version(), \
    'free_threaded': bool(sysconfig.get_config_var('Py_GIL_DISABLED')), \
    'executable': os.path.realpath(sys.executable)}))";

/// Runs `exe` (inside `root` if given) in isolated mode and parses what it prints.
pub fn probe(root: Option<&Path>, exe: &Path) -> Result<Probe> {
    let out = cmd::output(cmd::python(root, exe).args(["-I", "-c", PROBE_SCRIPT]))?;
    serde_json::from_str(out.trim())
        .with_context(|| format!("cannot parse the probe output {out:?}"))
}

/// Whether the executable at `host_path` links a libpython dynamically (`DT_NEEDED`
/// `libpython3.X*.so*`) or carries the runtime itself.
pub fn libpython(host_path: &Path) -> Result<Libpython> {
    let bytes =
        fs::read(host_path).with_context(|| format!("cannot read {}", host_path.display()))?;
    let elf = goblin::elf::Elf::parse(&bytes)
        .with_context(|| format!("cannot parse {} as ELF", host_path.display()))?;
    Ok(
        if elf.libraries.iter().any(|lib| lib.starts_with("libpython")) {
            Libpython::Shared
        } else {
            Libpython::Static
        },
    )
}
