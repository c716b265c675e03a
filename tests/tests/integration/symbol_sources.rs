//! Where native names come from when an object is stripped (`record --native`): a C library
//! built here (native_burn.c: `fixture_entry`, exported, calls the static `fixture_outer` →
//! `fixture_middle` → `fixture_leaf`, which burns the CPU) is stripped of its `.symtab` and
//! given its names back the ways distributions do: MiniDebugInfo (`.gnu_debugdata`), a debug
//! file under `<debug-dir>/.build-id/`, a debug file named by `.gnu_debuglink` under
//! `<debug-dir>/<the object's directory>/`. native_burn.py calls it through ctypes under the
//! Python function `burn`. Stripped with none of them, or with a `.gnu_debugdata` of garbage,
//! the static functions must read `libfixture.so+0x…`, never a wrong name.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use pyagent_tests::agent::{host_wide_lock, number_before, pyagent_bin, record_collapsed};
use pyagent_tests::http::get as http_get;
use pyagent_tests::scratch::fresh_dir;
use pyagent_tests::stacks::script;
use pyagent_tests::wait::wait_for;
use pyagent_tests::{Interpreter, PythonProcess};
use rstest::rstest;

use crate::service::{series_value, Service};

/// How the test library's static functions are named once it is stripped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// `.gnu_debugdata`: an xz'd ELF with the `.symtab` entries `.dynsym` lacks
    MiniDebugInfo,
    /// a debug file at `<debug-dir>/.build-id/ab/cdef….debug`
    BuildId,
    /// a debug file named by `.gnu_debuglink`, at `<debug-dir>/<object's dir>/NAME`
    DebugLink,
    /// nothing: stripped only
    Stripped,
    /// stripped, with a `.gnu_debugdata` of garbage behind a valid xz header: as `Stripped`,
    /// the section counted as unreadable
    CorruptMiniDebugInfo,
}

/// The C functions of the chain, caller first; only `fixture_entry` is exported.
pub(crate) const CHAIN: [&str; 4] = [
    "fixture_entry",
    "fixture_outer",
    "fixture_middle",
    "fixture_leaf",
];
pub(crate) const LIB: &str = "libfixture.so";

/// The library and debug directory built for one run, as paths the interpreter sees; removed
/// on drop.
pub(crate) struct Fixture {
    pub(crate) lib: String,
    debug_dir: String,
    /// what a frame of each static function must read without a symbol table:
    /// `libfixture.so+0x…` at its address (from the unstripped build's `.symtab`)
    unnamed: Vec<String>,
    /// the directory holding it all, as the host sees it
    host_dir: PathBuf,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.host_dir);
    }
}

fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The symbols `nm` lists for `object` (`-D`: the dynamic ones), defined, of the given types
/// (all if none): name → address.
fn nm(object: &Path, dynamic: bool, types: &[&str]) -> BTreeMap<String, u64> {
    let mut cmd = Command::new("nm");
    cmd.args(["--format=posix", "--defined-only"]);
    if dynamic {
        cmd.arg("-D");
    }
    run(cmd.arg(object))
        .lines()
        .filter_map(|l| {
            let mut parts = l.split_whitespace();
            let (name, kind, value) = (parts.next()?, parts.next()?, parts.next()?);
            let value = u64::from_str_radix(value, 16).ok()?;
            (types.is_empty() || types.contains(&kind)).then(|| (name.to_owned(), value))
        })
        .collect()
}

/// The GNU build ID of `object`, lowercase hex.
fn build_id(object: &Path) -> String {
    run(Command::new("readelf").arg("-n").arg(object))
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: ").map(str::to_owned))
        .expect("the library has a build ID")
}

/// Builds the library stripped, with its names where `source` puts them, somewhere `py` can
/// load it (inside its root for a chroot interpreter).
pub(crate) fn build(py: &Interpreter, source: Source, tag: &str) -> Fixture {
    let inside = PathBuf::from(format!("/tmp/pyagent-symbols-{}-{tag}", std::process::id()));
    let host = |p: &Path| py.host_path(p);
    let host_dir = host(&inside);
    let (lib_dir, debug_dir) = (inside.join("lib"), inside.join("debug"));
    let work = host(&inside.join("work"));
    let _ = std::fs::remove_dir_all(&host_dir);
    for d in [host(&lib_dir), host(&debug_dir), work.clone()] {
        std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
    }
    let full = work.join("full.so");
    let lib = lib_dir.join(LIB);
    let lib_host = host(&lib);
    run(Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-g", "-Wl,--build-id", "-o"])
        .arg(&full)
        .arg(script("native_burn.c")));
    let functions = nm(&full, false, &["T", "t"]);
    let unnamed = CHAIN[1..]
        .iter()
        .map(|f| format!("{LIB}+{:#x}", functions[*f]))
        .collect();
    run(Command::new("strip")
        .args(["--strip-all", "-R", ".comment", "-o"])
        .arg(&lib_host)
        .arg(&full));
    let only_debug = |out: &Path| {
        run(Command::new("objcopy")
            .arg("--only-keep-debug")
            .arg(&full)
            .arg(out));
    };
    match source {
        Source::Stripped => {}
        Source::CorruptMiniDebugInfo => {
            let mut garbage = b"\xfd7zXZ\0\0\x01\x69\x22\xde\x36".to_vec();
            garbage.extend((0..4096u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8));
            let file = work.join("garbage");
            std::fs::write(&file, garbage).unwrap();
            run(Command::new("objcopy")
                .arg(format!("--add-section=.gnu_debugdata={}", file.display()))
                .arg(&lib_host));
        }
        Source::MiniDebugInfo => {
            // As gdb's manual and Fedora's find-debuginfo make it: the debug file's function
            // symbols that `.dynsym` does not have, without the debug sections, xz'd.
            let exported = nm(&full, true, &[]);
            let keep: Vec<&str> = functions
                .keys()
                .filter(|f| !exported.contains_key(*f))
                .map(String::as_str)
                .collect();
            let keep_file = work.join("keep_symbols");
            std::fs::write(&keep_file, keep.join("\n") + "\n").unwrap();
            let debug = work.join("debug");
            only_debug(&debug);
            let mini = work.join("mini_debuginfo");
            run(Command::new("objcopy")
                .args(["-S", "--remove-section", ".gdb_index"])
                .args(["--remove-section", ".comment"])
                .arg(format!("--keep-symbols={}", keep_file.display()))
                .arg(&debug)
                .arg(&mini));
            run(Command::new("xz").arg("--keep").arg(&mini));
            run(Command::new("objcopy")
                .arg(format!(
                    "--add-section=.gnu_debugdata={}.xz",
                    mini.display()
                ))
                .arg(&lib_host));
        }
        Source::BuildId => {
            let id = build_id(&full);
            let dir = host(&debug_dir).join(".build-id").join(&id[..2]);
            std::fs::create_dir_all(&dir).unwrap();
            only_debug(&dir.join(format!("{}.debug", &id[2..])));
        }
        Source::DebugLink => {
            let name = format!("{LIB}.debug");
            let debug = work.join(&name);
            only_debug(&debug);
            // The link holds the file's name and CRC-32; the file then goes where only the
            // debug directory leads: `<debug-dir>/<the object's directory>/`.
            run(Command::new("objcopy")
                .arg(format!("--add-gnu-debuglink={}", debug.display()))
                .arg(&lib_host));
            let place = host(&debug_dir).join(lib_dir.strip_prefix("/").unwrap());
            std::fs::create_dir_all(&place).unwrap();
            std::fs::rename(&debug, place.join(&name)).unwrap();
        }
    }
    // The object under test has no `.symtab` of its own.
    assert!(
        nm(&lib_host, false, &[]).is_empty(),
        "{LIB} still has a .symtab"
    );
    Fixture {
        lib: lib.display().to_string(),
        debug_dir: debug_dir.display().to_string(),
        unnamed,
        host_dir,
    }
}

/// The frames of one collapsed line (root first, the thread label dropped) and its count.
fn stack(line: &str) -> (Vec<&str>, u64) {
    let (frames, n) = line.rsplit_once(' ').expect("a count");
    (
        frames.split(';').skip(1).collect(),
        n.parse().expect("numeric count"),
    )
}

/// The function of a frame of the test library (`fixture_leaf [libfixture.so]` → `fixture_leaf`).
fn in_lib(frame: &str) -> Option<&str> {
    frame.strip_suffix(&format!(" [{LIB}]"))
}

/// Records `py` running the library built for `source`, in `mode`, and checks the names.
fn check(py: &str, mode: &str, source: Source) {
    pyagent_bin(); // built before the target starts: a slow build must not outlive it
    let interpreter = Interpreter::by_name(py);
    let tag = format!("{py}-{mode}-{source:?}");
    let fixture = build(interpreter, source, &tag);
    let _serial = host_wide_lock();
    let p = PythonProcess::ready(py, "native_burn.py", &[&fixture.lib]);
    let dir = fresh_dir(&format!("symbols-{tag}"));
    let (text, err) = record_collapsed(
        p.pid(),
        &[
            "--mode",
            mode,
            "--native",
            "--debug-dir",
            &fixture.debug_dir,
            "-d",
            "2",
        ],
        &dir.join("stacks.txt"),
    );
    let summary = err
        .lines()
        .find(|l| l.starts_with("pyagent: native symbols: "))
        .unwrap_or_else(|| panic!("no symbol summary: {err}"));
    let count = |label: &str| number_after(summary, label);
    match source {
        Source::MiniDebugInfo => assert!(count("by MiniDebugInfo ") >= 1, "{summary}"),
        Source::BuildId | Source::DebugLink => {
            assert!(count("by a separate debug file ") >= 1, "{summary}")
        }
        Source::Stripped | Source::CorruptMiniDebugInfo => {
            assert!(count("by .dynsym alone ") >= 1, "{summary}")
        }
    }
    let unreadable = number_before(summary, " MiniDebugInfo sections unreadable");
    assert_eq!(
        unreadable,
        u64::from(source == Source::CorruptMiniDebugInfo),
        "{summary}"
    );

    let (mut burn, mut chained) = (0, 0);
    for line in text.lines() {
        let (frames, n) = stack(line);
        let Some(b) = frames
            .iter()
            .position(|f| f.starts_with("burn (") && f.contains("native_burn.py:"))
        else {
            continue;
        };
        burn += n;
        // The library's frames above `burn`, caller first.
        let ours: Vec<&str> = frames[b + 1..].iter().filter_map(|f| in_lib(f)).collect();
        // Named: the chain's names. Stripped: the exported entry is named by `.dynsym`, and the
        // static functions by where their code starts, never by a name (let alone a wrong one).
        let expected: Vec<String> = match source {
            Source::Stripped | Source::CorruptMiniDebugInfo => std::iter::once(CHAIN[0].to_owned())
                .chain(fixture.unnamed.iter().cloned())
                .collect(),
            _ => CHAIN.map(str::to_owned).to_vec(),
        };
        for name in &ours {
            assert!(
                expected.iter().any(|e| e == name),
                "{py} {mode} {source:?}: {name} is none of {expected:?}: {line}"
            );
        }
        let whole = ours == expected;
        if whole {
            chained += n;
        } else if ours.len() == expected.len() {
            panic!("{py} {mode} {source:?}: out of order: {line}");
        }
    }
    // Most of the time is in the leaf, under the whole chain (the rest: the ctypes call, the
    // loop's Python code, a sample on the way in or out).
    assert!(
        burn > 50 && chained * 10 >= burn * 7,
        "{py} {mode} {source:?}: {chained} of {burn} samples of `burn` under the whole chain:\n{text}\n{err}"
    );
}

/// The number right after `label` in `text`.
fn number_after(text: &str, label: &str) -> u64 {
    let rest = &text[text
        .find(label)
        .unwrap_or_else(|| panic!("no `{label}` in: {text}"))
        + label.len()..];
    rest.split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number after `{label}` in: {text}"))
}

#[rstest]
fn stripped_functions_are_named_from_their_symbol_source(
    #[values(
        Source::MiniDebugInfo,
        Source::BuildId,
        Source::DebugLink,
        Source::Stripped,
        Source::CorruptMiniDebugInfo
    )]
    source: Source,
    #[values("ebpf", "userspace")] mode: &str,
) {
    check("py312", mode, source);
}

/// A chroot interpreter (a container's view): the debug directory exists only under the
/// process's root, where it is looked for first.
#[rstest]
fn debug_files_are_found_under_the_process_root(
    #[values(Source::BuildId, Source::DebugLink)] source: Source,
) {
    check("py315", "ebpf", source);
}

/// The service says where native names came from: `pyagent_native_objects_total{source}`
/// counts the objects each source named, `pyagent_native_symbol_files_refused_total{kind}` the
/// symbol sources it refused (here a library whose `.gnu_debugdata` is garbage).
#[test]
fn the_service_counts_where_native_names_came_from() {
    pyagent_bin();
    let py = Interpreter::by_name("py312");
    let named = build(py, Source::MiniDebugInfo, "service-named");
    let refused = build(py, Source::CorruptMiniDebugInfo, "service-refused");
    let _serial = host_wide_lock();
    let _targets =
        [&named, &refused].map(|f| PythonProcess::ready("py312", "native_burn.py", &[&f.lib]));
    let svc = Service::start_with(
        "native-symbols",
        "5s",
        &["--mode", "ebpf", "--native", "--log", "warn"],
    );
    let metrics = || http_get(svc.port, "/metrics").expect("metrics").1;
    let m = wait_for(
        "native objects named by MiniDebugInfo and one refused",
        Duration::from_secs(60),
        || {
            let m = metrics();
            let named = series_value(
                &m,
                "pyagent_native_objects_total{source=\"mini_debug_info\"}",
            );
            let refused = series_value(
                &m,
                "pyagent_native_symbol_files_refused_total{kind=\"mini_debug_info\"}",
            );
            (named >= 1.0 && refused >= 1.0).then_some(m)
        },
    );
    // Every other object of the two processes (the interpreter, libc, ...) is counted too.
    assert!(
        series_value(&m, "pyagent_native_objects_total{source=\"own_symtab\"}")
            + series_value(&m, "pyagent_native_objects_total{source=\"dynsym_only\"}")
            >= 2.0,
        "{m}"
    );
    svc.stop();
}
