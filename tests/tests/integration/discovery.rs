//! Host discovery ([`HostScanner`]) on real processes.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use procfs::process::MMapPath;
use pyagent::discovery::{HostScanner, ProcessState};
use pyagent::offsets::{debug_offsets_len, parse_debug_offsets, DEBUG_OFFSETS_COOKIE};
use pyagent_tests::agent::{pyagent_bin, record_collapsed, run_pyagent};
use pyagent_tests::scratch::fresh_dir;
use pyagent_tests::stacks::script;
use pyagent_tests::{Interpreter, PythonProcess};
use rstest_reuse::apply;

use crate::shared_libpython;

/// A shell classified as not Python that then execs Python (a container entrypoint's
/// `exec python app.py`) keeps its pid and start time: the scanner must look at it again.
#[test]
fn process_that_execs_into_python_is_found_after_the_exec() {
    let py = Interpreter::by_name("py311-debian");
    let mut child = Command::new("sh")
        .args(["-c", "read go; exec \"$0\" \"$@\""])
        .arg(&py.exe)
        .arg(script("busy.py"))
        .arg("60")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start sh");
    let pid = child.id();
    let mut scanner = HostScanner::new(Some(&[pid]));
    let before = scanner.scan();
    assert!(before.ready.is_empty(), "sh is not Python");
    assert_eq!(scanner.state(pid), Some(&ProcessState::NotPython));

    writeln!(child.stdin.take().expect("stdin is piped")).expect("let sh exec");
    let mut first = String::new();
    BufReader::new(child.stdout.take().expect("stdout is piped"))
        .read_line(&mut first)
        .expect("read the Python process's first line");
    assert_eq!(first.trim(), "ready", "busy.py started");

    let after = scanner.scan();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(
        after.ready.iter().map(|t| t.pid).collect::<Vec<_>>(),
        vec![pid],
        "found after the exec: {:?}",
        scanner.state(pid)
    );
    assert_eq!(scanner.state(pid), Some(&ProcessState::Ready));
}

/// First bytes of the interpreter's own `_PyRuntime` (cookie and offsets table on 3.13+) and its
/// `sys.hexversion`, read by the interpreter itself through ctypes; zeros on 3.6, which has no
/// `_PyRuntime`.
fn runtime_head(py: &Interpreter, len: usize) -> (Vec<u8>, u64) {
    let code = format!(
        "import ctypes, sys\n\
         try:\n    \
             rt = ctypes.addressof(ctypes.c_char.in_dll(ctypes.pythonapi, '_PyRuntime'))\n    \
             head = ctypes.string_at(rt, {len})\n\
         except ValueError:\n    \
             head = bytes({len})\n\
         print(sys.hexversion, head.hex())"
    );
    let out = Command::new(&py.exe)
        .args(["-c", &code])
        .output()
        .expect("run the interpreter");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let (hexversion, bytes) = text.trim().split_once(' ').expect("two fields");
    let bytes = (0..bytes.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&bytes[i..i + 2], 16).expect("hex"))
        .collect();
    (bytes, hexversion.parse().expect("hexversion"))
}

/// Builds `dir/libpythonfuzz.so`: named like libpython, with `_PyRuntime`, `PyCode_Type` and
/// `Py_Version` symbols, a runtime that passes the cookie, version and offsets checks of `py`,
/// and an interpreter list head of garbage (nonzero, pointing nowhere).
fn crafted_libpython(py: &Interpreter, dir: &std::path::Path) -> std::path::PathBuf {
    const LEN: usize = 4096;
    let (head, hexversion) = runtime_head(py, LEN);
    let mut runtime = vec![0x41u8; LEN];
    if head.starts_with(DEBUG_OFFSETS_COOKIE) {
        // Keep the real table (so it parses), garble only the interpreter list head.
        let offsets = parse_debug_offsets(&head).expect("the interpreter's own table parses");
        let table_len = debug_offsets_len(&head).expect("known layout");
        runtime[..table_len].copy_from_slice(&head[..table_len]);
        let at = offsets.runtime_state.interpreters_head as usize;
        runtime[at..at + 8].copy_from_slice(&0x4141_4141_4141_4141u64.to_le_bytes());
    }
    let array: Vec<String> = runtime.iter().map(|b| b.to_string()).collect();
    let source = format!(
        "unsigned char _PyRuntime[{LEN}] __attribute__((aligned(64))) = {{{}}};\n\
         unsigned char PyCode_Type[256];\n\
         unsigned long Py_Version = {hexversion}UL;\n",
        array.join(",")
    );
    let c = dir.join("libpythonfuzz.c");
    let so = dir.join("libpythonfuzz.so");
    std::fs::write(&c, source).expect("write the C source");
    let status = Command::new("gcc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&so)
        .arg(&c)
        .status()
        .expect("run gcc");
    assert!(status.success(), "gcc failed");
    so
}

/// Whether `libpythonfuzz.so` is mapped below the real `libpython3.*` in process `pid`.
fn crafted_is_mapped_first(pid: u32) -> bool {
    let maps = procfs::process::Process::new(i32::try_from(pid).expect("a pid"))
        .and_then(|p| p.maps())
        .expect("maps");
    let start_of = |name: &str| {
        maps.iter()
            .find(
                |m| matches!(&m.pathname, MMapPath::Path(p) if p.to_string_lossy().contains(name)),
            )
            .map(|m| m.address.0)
    };
    match (start_of("libpythonfuzz.so"), start_of("/libpython3.")) {
        (Some(crafted), Some(real)) => crafted < real,
        _ => false,
    }
}

/// Reliability defect 8: a mapping named like libpython whose `_PyRuntime` looks right (cookie,
/// version, sane offsets) but whose interpreter list is garbage was taken as the runtime, and
/// `dump` failed. It must be skipped and the real runtime found.
#[apply(shared_libpython)]
fn defect_8_crafted_libpython_is_skipped(py: &str) {
    let interpreter = Interpreter::by_name(py);
    let dir = fresh_dir(&format!("defect8-{py}"));
    let lib = crafted_libpython(interpreter, &dir);
    pyagent_bin(); // built before the target starts: a slow build must not outlive it
                   // Discovery tries objects in address order, and where the loader puts the small crafted
                   // object relative to the 2 MiB-aligned libpython depends on ASLR: start the target until
                   // the crafted one comes first, which is the case that failed.
    let p = (0..20)
        .map(|_| {
            let mut p = PythonProcess::spawn(
                interpreter,
                &script("with_ctypes.py"),
                &[lib.to_str().expect("utf-8 path")],
            );
            p.wait_for_line("ready", Duration::from_secs(30));
            p
        })
        .find(|p| crafted_is_mapped_first(p.pid()))
        .unwrap_or_else(|| panic!("{py}: the crafted object never mapped below libpython"));
    for attempt in 0..5 {
        let out = run_pyagent(&["dump", "--pid", &p.pid().to_string()]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{py}: dump {attempt} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.contains("parked") && stdout.contains("with_ctypes.py"),
            "{py}: dump {attempt} shows the stack: {stdout}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `dump` of `pid`, which must succeed.
fn dump_of(pid: u32) -> String {
    let out = run_pyagent(&["dump", "--pid", &pid.to_string()]);
    assert!(
        out.status.success(),
        "dump failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Issue 47: 3.6 keeps no `_PyRuntime`. A build stripped of `.symtab`, as distributions ship it
/// (RHEL 8's platform-python), is still found through the exported `PyInterpreterState_Head`,
/// whose first instructions load `interp_head`. Its GIL statics have no names there: its
/// samples say nothing of the GIL rather than something wrong, by either sampler.
#[test]
fn a_stripped_3_6_is_found_through_its_exported_accessor() {
    pyagent_bin();
    let py = Interpreter::by_name("py36");
    let dir = fresh_dir("stripped-py36");
    let lib_name = "libpython3.6m.so.1.0";
    let original = py
        .exe
        .parent()
        .and_then(|bin| bin.parent())
        .expect("pyenv's bin directory")
        .join("lib")
        .join(lib_name);
    let stripped = dir.join(lib_name);
    std::fs::copy(&original, &stripped).expect("copy libpython");
    let status = Command::new("strip")
        .arg("--strip-all")
        .arg(&stripped)
        .status()
        .expect("run strip");
    assert!(status.success(), "strip failed");
    let sections = Command::new("readelf")
        .arg("-S")
        .arg(&stripped)
        .output()
        .expect("run readelf");
    let sections = String::from_utf8_lossy(&sections.stdout);
    assert!(
        !sections.contains(".symtab"),
        "strip left a .symtab: {sections}"
    );
    let dir_str = dir.to_str().expect("utf-8 path");
    let mut p = PythonProcess::spawn_with_env(
        py,
        &script("gil_holder.py"),
        &[],
        &[("LD_LIBRARY_PATH", dir_str)],
    );
    p.wait_for_line("ready", Duration::from_secs(30));
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", p.pid())).expect("maps");
    assert!(maps.contains(stripped.to_str().expect("utf-8")), "{maps}");
    let dump = dump_of(p.pid());
    assert!(
        dump.contains("hold_gil_spin") && dump.contains("wanter"),
        "{dump}"
    );
    assert!(
        !dump.contains("GIL"),
        "no GIL state without its statics: {dump}"
    );
    for mode in ["ebpf", "userspace"] {
        let file = dir.join(format!("{mode}.txt"));
        let (stacks, err) =
            record_collapsed(p.pid(), &["--mode", mode, "-d", "1", "-r", "199"], &file);
        assert!(stacks.contains("hold_gil_spin"), "{mode}: {stacks}\n{err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// 3.6 creates its GIL when a second thread starts (`locked` is -1 until then): a 3.6 with one
/// thread says nothing of a GIL, and one with threads says who holds it and who waits for it.
#[test]
fn a_3_6_gil_is_known_once_a_thread_creates_it() {
    pyagent_bin();
    let one = PythonProcess::ready("py36", "busy.py", &["60"]);
    let dump = dump_of(one.pid());
    assert!(dump.contains("hot"), "{dump}");
    assert!(!dump.contains("GIL"), "one thread, no GIL yet: {dump}");
    let threads = PythonProcess::ready("py36", "gil_holder.py", &[]);
    pyagent_tests::wait::wait_for(
        "a dump naming the GIL's holder and a waiter",
        Duration::from_secs(30),
        || {
            let dump = dump_of(threads.pid());
            (dump.contains("holds the GIL") && dump.contains("waiting: gil")).then_some(())
        },
    );
}
