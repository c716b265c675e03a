//! What the bench reads from `/proc`: a task's memory and context switches
//! (`/proc/PID/task/TID/status`), the BPF programs a process holds and their kernel run-time
//! statistics (`/proc/PID/fdinfo/FD` of each `anon_inode:bpf-prog` descriptor: no bpftool, and
//! only this process's programs, not another user's of the same name), and the profiles in the
//! output directory. The parsers are pure; the readers below them only open files.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// What the bench takes from a `status` file.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Status {
    /// `VmRSS`, KiB
    pub(super) rss_kib: Option<u64>,
    /// `VmHWM` (the peak resident set), KiB
    pub(super) hwm_kib: Option<u64>,
    /// `voluntary_ctxt_switches` + `nonvoluntary_ctxt_switches`
    pub(super) switches: u64,
}

/// Parses a `/proc/PID/status` (or `task/TID/status`) file.
pub(super) fn parse_status(text: &str) -> Status {
    let mut s = Status::default();
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        // "  1234 kB" or "1234"
        let number = || value.split_whitespace().next()?.parse::<u64>().ok();
        match key {
            "VmRSS" => s.rss_kib = number(),
            "VmHWM" => s.hwm_kib = number(),
            "voluntary_ctxt_switches" | "nonvoluntary_ctxt_switches" => {
                s.switches += number().unwrap_or(0);
            }
            _ => {}
        }
    }
    s
}

/// What a BPF program is to the agent, told by its type: the sampler on the cpu-clock perf
/// events, the off-CPU program on `sched_switch` (`tp_btf`), or a process notice (exec, fork,
/// exit: raw tracepoints).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Kind {
    /// `pa_sample` (BPF_PROG_TYPE_PERF_EVENT)
    Sample,
    /// `pa_switch` (BPF_PROG_TYPE_TRACING)
    Switch,
    /// the exec, fork and exit notices (BPF_PROG_TYPE_RAW_TRACEPOINT)
    Notice,
    /// anything else
    Other,
}

impl Kind {
    /// The kind of a program of type `prog_type` (`enum bpf_prog_type`).
    pub(super) fn of_type(prog_type: u32) -> Kind {
        match prog_type {
            7 => Kind::Sample,
            26 => Kind::Switch,
            17 => Kind::Notice,
            _ => Kind::Other,
        }
    }
}

/// A loaded program's identity and kernel run-time statistics, from its fdinfo.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Program {
    pub(super) id: u32,
    pub(super) kind: Kind,
    /// total run time while the statistics were on, ns
    pub(super) run_time_ns: u64,
    /// runs while the statistics were on
    pub(super) run_cnt: u64,
}

/// Parses the fdinfo of a BPF program descriptor; `None` for any other descriptor, or a kernel
/// that shows no id or run-time statistics there.
pub(super) fn parse_prog_fdinfo(text: &str) -> Option<Program> {
    let mut fields = BTreeMap::new();
    for line in text.lines() {
        if let Some((key, value)) = line.split_once(':') {
            fields.insert(key.trim(), value.trim());
        }
    }
    let number = |key: &str| fields.get(key)?.parse::<u64>().ok();
    Some(Program {
        id: u32::try_from(number("prog_id")?).ok()?,
        kind: Kind::of_type(u32::try_from(number("prog_type")?).ok()?),
        run_time_ns: number("run_time_ns")?,
        run_cnt: number("run_cnt")?,
    })
}

/// The pid in a profile's file name, `<service>-<pid>-<start unix ms>.pb.gz` (the service may
/// itself contain dashes).
pub(super) fn profile_pid(name: &str) -> Option<u32> {
    let stem = name.strip_suffix(".pb.gz")?;
    let mut parts = stem.rsplitn(3, '-');
    let _start_ms: u64 = parts.next()?.parse().ok()?;
    let pid = parts.next()?.parse().ok()?;
    parts.next()?;
    Some(pid)
}

/// The status of each live thread of `pid`, summed: its process's memory (the same in every
/// thread: that of the first) and all of its threads' context switches.
pub(super) fn process_status(pid: u32) -> Option<Status> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut total: Option<Status> = None;
    for task in tasks.flatten() {
        let Ok(text) = std::fs::read_to_string(task.path().join("status")) else {
            continue; // exited meanwhile
        };
        let s = parse_status(&text);
        match &mut total {
            None => total = Some(s),
            Some(t) => t.switches += s.switches,
        }
    }
    total
}

/// The BPF programs `pid` holds a descriptor of, by id.
pub(super) fn programs_of(pid: u32) -> BTreeMap<u32, Program> {
    let mut out = BTreeMap::new();
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return out;
    };
    for fd in fds.flatten() {
        let is_prog = std::fs::read_link(fd.path())
            .is_ok_and(|target| target.as_os_str() == "anon_inode:bpf-prog");
        if !is_prog {
            continue;
        }
        let info = Path::new("/proc")
            .join(pid.to_string())
            .join("fdinfo")
            .join(fd.file_name());
        if let Some(p) = std::fs::read_to_string(info)
            .ok()
            .and_then(|t| parse_prog_fdinfo(&t))
        {
            out.insert(p.id, p);
        }
    }
    out
}

/// The names of the profiles in `dir` (finished files only: not the sink's temporary ones).
pub(super) fn profiles_in(dir: &Path) -> BTreeSet<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return BTreeSet::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.ends_with(".pb.gz") && !n.starts_with('.'))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Name:\tpython3.12\n\
                          Umask:\t0022\n\
                          State:\tS (sleeping)\n\
                          VmPeak:\t   30000 kB\n\
                          VmHWM:\t   21504 kB\n\
                          VmRSS:\t   20480 kB\n\
                          Threads:\t1\n\
                          voluntary_ctxt_switches:\t4012\n\
                          nonvoluntary_ctxt_switches:\t37\n";

    #[test]
    fn a_status_file_gives_memory_and_switches() {
        assert_eq!(
            parse_status(STATUS),
            Status {
                rss_kib: Some(20_480),
                hwm_kib: Some(21_504),
                switches: 4_049,
            }
        );
    }

    #[test]
    fn a_kernel_thread_has_no_memory() {
        let s = parse_status("Name:\tkworker/0:1\nvoluntary_ctxt_switches:\t9\n");
        assert_eq!(s.rss_kib, None);
        assert_eq!(s.hwm_kib, None);
        assert_eq!(s.switches, 9);
        assert_eq!(parse_status(""), Status::default());
    }

    const FDINFO: &str = "pos:\t0\n\
                          flags:\t02000002\n\
                          mnt_id:\t15\n\
                          ino:\t1057\n\
                          prog_type:\t26\n\
                          prog_jited:\t1\n\
                          prog_tag:\t0123456789abcdef\n\
                          memlock:\t8192\n\
                          prog_id:\t412\n\
                          run_time_ns:\t123456789\n\
                          run_cnt:\t98765\n\
                          recursion_misses:\t0\n\
                          verified_insns:\t5000\n";

    #[test]
    fn a_program_descriptor_gives_its_id_kind_and_run_statistics() {
        assert_eq!(
            parse_prog_fdinfo(FDINFO),
            Some(Program {
                id: 412,
                kind: Kind::Switch,
                run_time_ns: 123_456_789,
                run_cnt: 98_765,
            })
        );
    }

    #[test]
    fn other_descriptors_are_not_programs() {
        // A map: no prog_id, no statistics.
        let map = "pos:\t0\nflags:\t02000002\nmap_type:\t2\nmap_id:\t7\n";
        assert_eq!(parse_prog_fdinfo(map), None);
        // A kernel too old for run-time statistics.
        let old = "prog_type:\t7\nprog_id:\t3\n";
        assert_eq!(parse_prog_fdinfo(old), None);
    }

    #[test]
    fn program_kinds_by_type() {
        assert_eq!(Kind::of_type(7), Kind::Sample);
        assert_eq!(Kind::of_type(26), Kind::Switch);
        assert_eq!(Kind::of_type(17), Kind::Notice);
        assert_eq!(Kind::of_type(1), Kind::Other);
    }

    #[test]
    fn the_pid_of_a_profile_file() {
        assert_eq!(
            profile_pid("python3.12-4321-1700000000000.pb.gz"),
            Some(4321)
        );
        assert_eq!(profile_pid("my-web-app-77-1700000000000.pb.gz"), Some(77));
        assert_eq!(profile_pid("4321-1700000000000.pb.gz"), None);
        assert_eq!(profile_pid("python-x-1700000000000.pb.gz"), None);
        assert_eq!(profile_pid("python-1-2.pprof"), None);
    }

    #[test]
    fn this_process_is_read_from_proc() {
        let me = process_status(std::process::id()).expect("our own status");
        assert!(me.rss_kib.is_some_and(|k| k > 0));
        assert!(me.hwm_kib >= me.rss_kib);
        assert!(process_status(4_194_305).is_none());
        // The test process holds no BPF program.
        assert!(programs_of(std::process::id()).is_empty());
    }
}
