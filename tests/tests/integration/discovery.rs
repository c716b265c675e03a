//! Host discovery ([`HostScanner`]) on real processes.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use pyagent::discovery::{HostScanner, ProcessState};
use pyagent_tests::stacks::script;
use pyagent_tests::Interpreter;

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
