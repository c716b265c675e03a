//! `inside.sh`: what runs on the kernel under test, in the guest (or directly on the host for
//! the host's own kernel). It writes only under its output directory, the guest's one
//! writable host directory: a log of its own, one log per check, a `results` line per check
//! as it finishes (so that a guest killed halfway still tells how far it got), the mounts the
//! tests could want, the probe's stderr, and `done` at the end.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::plan::{Binary, Check};

/// How long one check may run; `timeout` ends it with status 124 (137 if it had to kill).
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(5 * 60);
/// How long the probe's `pyagent record -d 3` may take, its start-up under TCG included.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3 * 60);

/// The probe's target: a thread that sleeps in short naps (off-CPU waits) beside a main thread
/// that burns CPU in Python. It prints its PID once both run.
pub const PROBE_PY: &str = "\
import os
import threading
import time


def nap():
    while True:
        time.sleep(0.05)


def burn():
    total = 0
    for i in range(100000):
        total += i * i
    return total


threading.Thread(target=nap, daemon=True).start()
print(os.getpid(), flush=True)
while True:
    burn()
";

/// Everything the script needs to know, as the kernel under test sees the paths (the host's
/// root, read-only in a guest, plus the output directory).
pub struct Inputs<'a> {
    /// The output directory.
    pub out: &'a Path,
    pub workspace: &'a Path,
    /// The test executables, by binary.
    pub bpf_exe: &'a Path,
    pub integration_exe: &'a Path,
    pub pyagent: &'a Path,
    /// `cargo xtask pythons`' directory and its sid chroot.
    pub pythons_dir: &'a Path,
    pub sid_chroot: &'a Path,
    /// The interpreter the probe runs.
    pub probe_python: &'a Path,
    /// PATH for the tests (they run `go tool pprof`, `chroot`, `setpriv`).
    pub path: &'a str,
    /// Marks every process a check starts (`PYAGENT_KERNELS_TEST=TOKEN-N`), to kill what it
    /// left behind.
    pub token: &'a str,
    /// Host directories a guest gets with `--rodir`, mounted again with a page cache.
    pub cached_dirs: &'a [PathBuf],
    /// Whether this runs in a guest, which the script may change at will.
    pub guest: bool,
    pub checks: &'a [Check],
}

impl Inputs<'_> {
    fn exe(&self, binary: Binary) -> &Path {
        match binary {
            Binary::Bpf => self.bpf_exe,
            Binary::Integration => self.integration_exe,
        }
    }
}

/// The output directory's file names the host reads back.
pub const RESULTS: &str = "results";
pub const DONE: &str = "done";
pub const FACILITIES: &str = "facilities";
pub const PROBE_STDERR: &str = "probe.stderr";
pub const PROBE_STATUS: &str = "probe.status";
pub const PROBE_SCRIPT: &str = "probe.py";
pub const TESTS_DIR: &str = "tests";

/// The text of `inside.sh`.
pub fn render(inputs: &Inputs) -> String {
    let mut s = String::new();
    s.push_str(HEADER);
    let vars = [
        ("OUT", inputs.out.to_path_buf()),
        ("CHROOT", inputs.sid_chroot.to_path_buf()),
        ("PYAGENT", inputs.pyagent.to_path_buf()),
        ("PROBE_PY", inputs.probe_python.to_path_buf()),
    ];
    for (name, value) in vars {
        let _ = writeln!(s, "{name}={}", quote(&value.to_string_lossy()));
    }
    let _ = writeln!(s, "TOKEN={}", quote(inputs.token));
    let _ = writeln!(s, "CHECK_TIMEOUT={}", CHECK_TIMEOUT.as_secs());
    let _ = writeln!(s, "PROBE_TIMEOUT={}", PROBE_TIMEOUT.as_secs());
    let _ = writeln!(s, "GUEST={}", u8::from(inputs.guest));
    let cached: Vec<String> = inputs
        .cached_dirs
        .iter()
        .map(|dir| quote(&dir.to_string_lossy()))
        .collect();
    let _ = writeln!(s, "CACHED=({})", cached.join(" "));
    s.push_str(BODY);
    let env = [
        ("PATH", inputs.path.to_owned()),
        (
            "PYAGENT_PYTHONS_DIR",
            inputs.pythons_dir.to_string_lossy().into_owned(),
        ),
        // A backtrace reads the debug test executable's DWARF, which under TCG takes longer
        // than most tests; the panic's message and place are in the log without it.
        ("RUST_BACKTRACE", "0".to_owned()),
        // The tests build `pyagent` with `$CARGO build` before using it, next to their own
        // executable: here both were built and copied before the run, the copy is what must
        // run, and a guest could not write target/ anyway.
        ("CARGO", "/bin/true".to_owned()),
        // Under emulation the agent registers a target's threads a few hundred ms into a
        // recording; tests that time whole-recording waits allow for it.
        ("PYAGENT_TEST_EMULATED", u8::from(inputs.guest).to_string()),
    ];
    for (name, value) in env {
        let _ = writeln!(s, "export {name}={}", quote(&value));
    }
    s.push_str("setup\n");
    for (index, check) in inputs.checks.iter().enumerate() {
        let dir: PathBuf = inputs.workspace.join(check.binary.package_dir());
        let _ = writeln!(
            s,
            "check {index} {} {} {} {}",
            quote(&dir.to_string_lossy()),
            quote(&inputs.exe(check.binary).to_string_lossy()),
            quote(check.name),
            quote(&check.log_name(index)),
        );
    }
    s.push_str("probe\nfinish\n");
    s
}

const HEADER: &str = "\
#!/bin/bash
# Written by `cargo xtask kernels` (xtask/src/kernels/script.rs) for one kernel.
set -u
";

const BODY: &str = r#"
exec >"$OUT/inside.log" 2>&1 </dev/null
mkdir -p "$OUT/tests"

# Mounts and files the tests or pyagent may want, as this kernel and virtme-ng provide them.
facilities() {
    local fs
    for fs in bpf debugfs tracefs cgroup2; do
        if awk -v fs="$fs" '$3 == fs { found = 1 } END { exit !found }' /proc/mounts; then
            echo "$fs mounted"
        else
            echo "$fs not mounted"
        fi
    done
    if [ -e /sys/kernel/btf/vmlinux ]; then echo "BTF present"; else echo "BTF missing"; fi
}

# Mounts again with a page cache a directory virtme-ng shares over 9p without one, where each
# start of an interpreter or executable would read every page it touches across 9p again.
# Nothing on the host changes under it while the checks run. Elsewhere (the host) a no-op.
cache_mount() {
    local tag
    tag=$(awk -v dir="$1" '$2 == dir && $3 == "9p" { print $1 }' /proc/mounts)
    [ -n "$tag" ] || return 0
    umount "$1" &&
        mount -t 9p -o trans=virtio,version=9p2000.L,access=any,msize=512000,cache=loose,ro \
            "$tag" "$1"
}

setup() {
    local dir
    echo "kernel $(uname -r)"
    facilities >"$OUT/facilities"
    cat "$OUT/facilities"
    for dir in "${CACHED[@]}"; do
        cache_mount "$dir" || echo "cannot mount $dir again with a cache"
    done
    # py314 and py315 run in the sid chroot: it needs its own /proc, and the tests copy their
    # scripts into its /tmp, which a guest sees read-only.
    mountpoint -q "$CHROOT/proc" || mount -t proc proc "$CHROOT/proc"
    if touch "$CHROOT/tmp/.pyagent-kernels" 2>/dev/null; then
        rm -f "$CHROOT/tmp/.pyagent-kernels"
    else
        mount -t tmpfs tmpfs "$CHROOT/tmp"
    fi
}

# Kills what a check left running: the tests start their Python targets in process groups of
# their own, which `timeout` does not reach.
reap() {
    local pids
    pids=$(grep -lzx "PYAGENT_KERNELS_TEST=$1" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3)
    if [ -n "$pids" ]; then
        echo "killing what $1 left running: $pids"
        kill -9 $pids 2>/dev/null
    fi
}

# check INDEX PACKAGE_DIR EXECUTABLE TEST_NAME LOG: one test, as cargo test would run it.
check() {
    local start=$SECONDS status
    echo "check $1: $4"
    (
        cd "$2" &&
            PYAGENT_KERNELS_TEST="$TOKEN-$1" CARGO_MANIFEST_DIR="$2" \
                timeout -k 10 "$CHECK_TIMEOUT" "$3" --exact "$4" --test-threads=1
    ) >"$OUT/tests/$5" 2>&1
    status=$?
    reap "$TOKEN-$1"
    echo "check $1: status $status in $((SECONDS - start)) s"
    echo "$1 $status $((SECONDS - start))" >>"$OUT/results"
}

# pyagent's own account of this kernel: `record` with every eBPF facility asked for.
probe() {
    local pid
    echo "probe"
    exec 3< <(PYAGENT_KERNELS_TEST="$TOKEN-probe" exec "$PROBE_PY" "$OUT/probe.py")
    if ! read -r pid <&3; then
        echo "the probe's Python did not start" >"$OUT/probe.stderr"
        echo 1 >"$OUT/probe.status"
        return
    fi
    timeout -k 10 "$PROBE_TIMEOUT" "$PYAGENT" record --pid "$pid" --mode ebpf -d 3 \
        --off-cpu --native -o "$OUT/probe.txt" >/dev/null 2>"$OUT/probe.stderr"
    echo $? >"$OUT/probe.status"
    reap "$TOKEN-probe"
    exec 3<&-
}

finish() {
    if [ "$GUEST" = 1 ]; then
        dmesg >"$OUT/dmesg.log" 2>&1
    fi
    echo "finished in $SECONDS s"
    touch "$OUT/done"
}
"#;

/// `text` as one shell word.
fn quote(text: &str) -> String {
    if !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+:=,@".contains(c))
    {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::plan::CHECKS;

    #[test]
    fn quote_keeps_plain_words_and_quotes_the_rest() {
        assert_eq!(quote("/a/b-1.2+x"), "/a/b-1.2+x");
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote(""), "''");
    }

    #[test]
    fn script_runs_each_check_with_its_log_then_the_probe() {
        let checks = &CHECKS[..2];
        let text = render(&Inputs {
            out: Path::new("/out"),
            workspace: Path::new("/ws"),
            bpf_exe: Path::new("/b/deps/bpf-1"),
            integration_exe: Path::new("/b/deps/integration-2"),
            pyagent: Path::new("/b/pyagent"),
            pythons_dir: Path::new("/p"),
            sid_chroot: Path::new("/p/sid-chroot"),
            probe_python: Path::new("/usr/bin/python3"),
            path: "/usr/bin:/bin",
            cached_dirs: &[PathBuf::from("/p"), PathBuf::from("/a b")],
            token: "7-x",
            guest: true,
            checks,
        });
        assert!(text.starts_with("#!/bin/bash\n"));
        assert!(text.contains(&format!(
            "check 0 /ws/agent /b/deps/bpf-1 {} 00-load.log\n",
            checks[0].name
        )));
        assert!(text.contains(&format!(
            "check 1 /ws/tests /b/deps/integration-2 {} 01-cpu-clock-py36.log\n",
            checks[1].name
        )));
        assert!(text.contains("export CARGO=/bin/true\n"));
        assert!(text.contains("\nCACHED=(/p '/a b')\n"));
        assert!(text.ends_with("probe\nfinish\n"));
    }

    #[test]
    fn script_writes_the_files_the_host_reads() {
        for name in [
            RESULTS,
            DONE,
            FACILITIES,
            PROBE_STDERR,
            PROBE_STATUS,
            PROBE_SCRIPT,
        ] {
            assert!(BODY.contains(&format!("\"$OUT/{name}\"")), "{name}");
        }
        assert!(BODY.contains(&format!("\"$OUT/{TESTS_DIR}/$5\"")));
    }
}
