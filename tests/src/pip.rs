//! Real packages from the Python package index, pip-installed by py312 into a scratch
//! directory once per test binary, for the tests that profile them (gunicorn, numpy, uvicorn
//! and uvloop, gevent).

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

use crate::scratch::fresh_dir;
use crate::Interpreter;

/// The platforms of the wheels [`site_for`] takes: the manylinux tags the packages publish.
const PLATFORMS: [&str; 3] = [
    "manylinux2014_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux_2_28_x86_64",
];

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
    install(&site, &[package], &[]);
    sites.insert(package.to_owned(), site.clone());
    site
}

/// [`site`] for the interpreter `py` and several `packages`, compiled ones included: py312's
/// pip takes the wheels built for `py`'s version (binary wheels only, so nothing is built
/// here). Returns the directory as `py` sees it: inside its chroot when it runs in one.
///
/// # Panics
/// As [`site`].
pub fn site_for(py: &Interpreter, packages: &[&str]) -> PathBuf {
    static SITES: Mutex<Option<HashMap<String, PathBuf>>> = Mutex::new(None);
    let key = format!("{} {}", py.name, packages.join(" "));
    let mut sites = SITES.lock().unwrap_or_else(|e| e.into_inner());
    let sites = sites.get_or_insert_with(HashMap::new);
    if let Some(site) = sites.get(&key) {
        return site.clone();
    }
    let (major_minor, abi) = {
        let mut parts = py.version.split('.');
        let major = parts.next().unwrap_or("3");
        let minor = parts.next().unwrap_or("0");
        let t = if py.free_threaded { "t" } else { "" };
        (format!("{major}.{minor}"), format!("cp{major}{minor}{t}"))
    };
    let inside = PathBuf::from(format!(
        "/tmp/pyagent-sites/{}-{}",
        std::process::id(),
        sites.len()
    ));
    let host = match &py.root {
        Some(root) => root.join(inside.strip_prefix("/").expect("absolute")),
        None => fresh_dir(&format!("{}-site", py.name)),
    };
    let _ = std::fs::remove_dir_all(&host);
    std::fs::create_dir_all(&host)
        .unwrap_or_else(|err| panic!("cannot create {}: {err}", host.display()));
    let mut wheels = vec![
        "--only-binary=:all:".to_string(),
        "--implementation".into(),
        "cp".into(),
        "--python-version".into(),
        major_minor,
        "--abi".into(),
        abi,
    ];
    for platform in PLATFORMS {
        wheels.extend(["--platform".to_string(), platform.to_string()]);
    }
    let wheels: Vec<&str> = wheels.iter().map(String::as_str).collect();
    install(&host, packages, &wheels);
    let seen = if py.root.is_some() { inside } else { host };
    sites.insert(key, seen.clone());
    seen
}

/// `pip install --target site packages` by py312, with `extra` arguments.
fn install(site: &std::path::Path, packages: &[&str], extra: &[&str]) {
    let status = Command::new(&Interpreter::by_name("py312").exe)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .args(["--no-warn-script-location", "--target"])
        .arg(site)
        .args(extra)
        .args(packages)
        .env("PIP_ROOT_USER_ACTION", "ignore")
        .status()
        .expect("run pip");
    assert!(
        status.success(),
        "pip install {packages:?} into {} failed ({status}; it needs the Python package index)",
        site.display()
    );
}
