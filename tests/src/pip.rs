//! Real packages from the Python package index, pip-installed by py312 into a scratch
//! directory once per test binary, for the tests that profile them (gunicorn, numpy).

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

use crate::scratch::fresh_dir;
use crate::Interpreter;

/// The directory `package` (a requirement: `name==version`) was installed into (for
/// `sys.path`), installing it the first time.
///
/// # Panics
/// When pip fails (it needs the Python package index); pip's complaints go to the test's
/// output.
pub fn site(package: &str) -> PathBuf {
    static SITES: Mutex<Option<HashMap<String, PathBuf>>> = Mutex::new(None);
    let mut sites = SITES.lock().unwrap_or_else(|e| e.into_inner());
    let sites = sites.get_or_insert_with(HashMap::new);
    if let Some(site) = sites.get(package) {
        return site.clone();
    }
    let name = package.split("==").next().unwrap_or(package);
    let site = fresh_dir(&format!("{name}-site"));
    let status = Command::new(&Interpreter::by_name("py312").exe)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .args(["--no-warn-script-location", "--target"])
        .arg(&site)
        .arg(package)
        .env("PIP_ROOT_USER_ACTION", "ignore")
        .status()
        .expect("run pip");
    assert!(
        status.success(),
        "pip install {package} into {} failed ({status}; it needs the Python package index)",
        site.display()
    );
    sites.insert(package.to_owned(), site.clone());
    site
}
