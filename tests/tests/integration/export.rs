//! The export side under faults, with real files and file systems: `--duration`'s files on a full
//! disk, the service's output directory going away.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use pyagent_tests::agent::{host_wide_lock, pyagent_bin};
use pyagent_tests::scratch::fresh_path;
use pyagent_tests::stacks::script;
use pyagent_tests::wait::wait_for;
use pyagent_tests::{Interpreter, PythonProcess};

/// A small tmpfs mounted on a fresh directory, unmounted (and the directory removed) on drop.
struct SmallTmpfs(PathBuf);

impl SmallTmpfs {
    fn mount(tag: &str, size: &str) -> SmallTmpfs {
        let dir = std::env::temp_dir().join(format!("pyagent-{tag}-{}", std::process::id()));
        let _ = Command::new("umount").arg(&dir).status();
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("mount point");
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .status()
            .expect("run mount");
        assert!(
            status.success(),
            "mount a {size} tmpfs on {}",
            dir.display()
        );
        SmallTmpfs(dir)
    }

    /// Fills the file system until writing fails (ENOSPC).
    fn fill(&self) {
        use std::io::Write;
        let mut filler = std::fs::File::create(self.0.join("filler")).expect("filler");
        let chunk = [0u8; 4096];
        while filler.write_all(&chunk).is_ok() {}
        // Whatever is left is smaller than a page: the next file's first page fails.
    }
}

impl Drop for SmallTmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn entries(dir: &Path) -> Vec<(String, u64)> {
    let mut all: Vec<(String, u64)> = std::fs::read_dir(dir)
        .expect("read dir")
        .filter_map(|e| e.ok())
        .map(|e| {
            let len = e.metadata().map(|m| m.len()).unwrap_or(0);
            (e.file_name().to_string_lossy().into_owned(), len)
        })
        .collect();
    all.sort();
    all
}

/// Reliability issue, defect 6: `--duration` created each file under its final name and wrote into it,
/// so a full disk left a 0-byte `.pb.gz` and the run stopped at the first failure. Files are written
/// atomically, and every profile is attempted and each failure reported.
#[test]
fn duration_on_a_full_disk_leaves_no_empty_profile_and_reports_every_failure() {
    pyagent_bin();
    let _serial = host_wide_lock();
    let py = Interpreter::by_name("py312");
    let mut first = PythonProcess::spawn(py, &script("busy.py"), &["60"]);
    let mut second = PythonProcess::spawn(py, &script("busy.py"), &["60"]);
    first.wait_for_line("ready", Duration::from_secs(30));
    second.wait_for_line("ready", Duration::from_secs(30));
    let disk = SmallTmpfs::mount("full-disk", "64k");
    disk.fill();

    let out = Command::new(pyagent_bin())
        .args(["--all-python", "-d", "2", "-o"])
        .arg(&disk.0)
        .output()
        .expect("run pyagent");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "a failed write is an error: {stderr}"
    );
    for pid in [first.pid(), second.pid()] {
        let name = format!("busy-{pid}.pb.gz");
        assert!(
            stderr.contains(&format!("cannot write {}", disk.0.join(&name).display())),
            "the failure of {name} is reported (the run went on past the first): {stderr}"
        );
    }
    // Nothing half-written under a final name, no temporary left behind.
    let left = entries(&disk.0);
    assert_eq!(
        left.iter()
            .map(|(name, _)| name.as_str())
            .collect::<Vec<_>>(),
        ["filler"],
        "{left:?}"
    );
    assert!(
        stderr
            .lines()
            .last()
            .is_some_and(|l| l.contains("could not be written")),
        "{stderr}"
    );
}

/// Defect: `--duration` held every process's window until the end, so memory grew with every
/// process that came and went. A process that exits during the run is written while the run goes
/// on (and its window let go).
#[test]
fn duration_under_churn_writes_exited_processes_before_the_run_ends() {
    use pyagent_tests::consumers::go_pprof_raw;

    let _serial = host_wide_lock();
    let dir = fresh_path("churn");
    let mut agent = Command::new(pyagent_bin())
        .args(["--all-python", "--duration", "120", "--output"])
        .arg(&dir)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start pyagent");
    // A target that lives 3 s: it ends long before the run does.
    let target = PythonProcess::ready("py312", "busy.py", &["3"]);
    let file = dir.join(format!("busy-{}.pb.gz", target.pid()));
    wait_for(
        "the exited process's profile while the run goes on",
        Duration::from_secs(60),
        || {
            assert!(
                agent.try_wait().expect("agent status").is_none(),
                "the agent exited before writing {}",
                file.display()
            );
            file.exists().then_some(())
        },
    );
    assert!(
        agent.try_wait().expect("agent status").is_none(),
        "written during the run, not at its end"
    );
    // SIGINT ends the run early; the exited process is not written a second time.
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(agent.id() as i32, libc::SIGINT) };
    let out = agent.wait_with_output().expect("agent output");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let raw = go_pprof_raw(&file);
    assert!(raw.contains(" hot ") && raw.contains("busy.py"), "{raw}");
    // Issue 17, item 2: labelled as the service labels its profiles.
    for label in ["service_name:[busy]", "hostname:[", "python_version:[3.12"] {
        assert!(raw.contains(label), "{label} missing:\n{raw}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A process in which no thread ran Python code on a CPU gets no profile file; the run says so
/// with its pid, rather than writing fewer profiles than processes without a word.
#[test]
fn duration_names_the_processes_that_had_no_sample() {
    let _serial = host_wide_lock();
    let idle = PythonProcess::ready("py312", "recursion.py", &["3"]);
    let busy = PythonProcess::ready("py312", "busy.py", &[]);
    let dir = fresh_path("idle-named");
    let out = Command::new(pyagent_bin())
        .args(["--all-python", "--duration", "3", "--output"])
        .arg(&dir)
        .output()
        .expect("run pyagent");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.contains(" had no sample "))
        .unwrap_or_else(|| panic!("no line about idle processes: {stderr}"));
    // The first few pids are listed: other tests' parked interpreters may come before ours.
    let pids: Vec<&str> = line
        .rsplit_once("(pid ")
        .expect("a pid list")
        .1
        .trim_end_matches(')')
        .split(", ")
        .collect();
    assert!(
        pids.contains(&idle.pid().to_string().as_str()) || pids.last() == Some(&"…"),
        "{line}"
    );
    let files: Vec<String> = std::fs::read_dir(&dir)
        .expect("the output directory")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let named = |pid: u32| files.iter().any(|f| f.ends_with(&format!("-{pid}.pb.gz")));
    assert!(named(busy.pid()) && !named(idle.pid()), "{files:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
