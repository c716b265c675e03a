//! Peer profilers for the benchmarks, pip-installed into a venv at `DIR/peers` made with the
//! pyenv 3.11.7 interpreter (`py311`): py-spy, and austin from its `austin-dist` wheel.
//! Versions are pinned so that benchmark baselines stay comparable.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{ensure, Context, Result};

use super::cmd::{self, say, Log};
use roles::Peers;

use super::{Layout, Spec};

const TAG: &str = "peers";
const PY_SPY_VERSION: &str = "0.4.3";
const AUSTIN_VERSION: &str = "3.7.0";
/// The matrix entry whose interpreter makes the venv.
const VENV_PYTHON: &str = "py311";

fn venv(layout: &Layout) -> PathBuf {
    layout.dir.join("peers")
}

/// Creates the venv and installs the peers unless [`verify`] passes already.
pub fn ensure(layout: &Layout, specs: &[Spec]) -> Result<()> {
    if verify(layout).is_ok() {
        say(
            TAG,
            format_args!("py-spy {PY_SPY_VERSION} and austin {AUSTIN_VERSION} are installed"),
        );
        return Ok(());
    }
    let venv = venv(layout);
    let log = Log::new(TAG, &layout.logs(), TAG)?;
    let base = specs
        .iter()
        .find(|spec| spec.role.name == VENV_PYTHON)
        .context("the matrix has no py311 entry")?;
    // `--clear` also repairs a venv left half-made (say, without pip) by an interrupted run.
    log.run(
        Command::new(&base.exe)
            .args(["-m", "venv", "--clear"])
            .arg(&venv),
    )?;
    let python = venv.join("bin/python");
    log.run(
        Command::new(&python)
            .args(["-m", "pip", "install", "--disable-pip-version-check"])
            .arg(format!("py-spy=={PY_SPY_VERSION}"))
            .arg(format!("austin-dist=={AUSTIN_VERSION}")),
    )?;
    verify(layout).map(drop)
}

/// Checks that both peers run and have the pinned versions; returns their paths.
pub fn verify(layout: &Layout) -> Result<Peers> {
    let bin = venv(layout).join("bin");
    let peers = Peers {
        py_spy: bin.join("py-spy"),
        austin: bin.join("austin"),
    };
    check_version(&peers.py_spy, PY_SPY_VERSION)?;
    check_version(&peers.austin, AUSTIN_VERSION)?;
    Ok(peers)
}

/// Fails unless `exe --version` runs and mentions `version`.
fn check_version(exe: &Path, version: &str) -> Result<()> {
    ensure!(exe.exists(), "{} is missing", exe.display());
    let out = cmd::output(Command::new(exe).arg("--version"))?;
    ensure!(
        out.contains(version),
        "{} --version says {:?}, expected version {version}",
        exe.display(),
        out.trim()
    );
    Ok(())
}
