//! asyncio task-aware stacks (CPython 3.14+): `dump --async` against the task graph the target
//! was built with, `record --async` against CPython's own sampler (`profiling.sampling
//! --async-aware`, 3.15), task churn, and the one-line refusal before 3.14.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use pyagent_tests::agent::{host_wide_lock, record, record_collapsed, run_pyagent};
use pyagent_tests::consumers::go_pprof_raw;
use pyagent_tests::scratch::fresh_path;
use pyagent_tests::stacks::marker_line;
use pyagent_tests::{Interpreter, PythonProcess};
use rstest::rstest;
use rstest_reuse::apply;
use serde_json::Value;

use crate::{with_asyncio_tasks, without_asyncio_tasks};

/// `dump --async --json` of `pid`.
fn dump_tasks(pid: u32) -> Value {
    let out = run_pyagent(&["dump", "--pid", &pid.to_string(), "--async", "--json"]);
    assert!(
        out.status.success(),
        "dump --async: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("dump --async --json prints JSON")
}

/// name → (coroutine functions outermost first, the lines of its frames, names of the tasks
/// awaiting it)
type Graph = BTreeMap<String, (Vec<String>, Vec<Option<u64>>, Vec<String>)>;

fn graph(dump: &Value) -> Graph {
    let tasks = dump["tasks"].as_array().expect("a task list");
    let name_of: BTreeMap<u64, String> = tasks
        .iter()
        .map(|t| {
            (
                t["id"].as_u64().expect("id"),
                t["name"].as_str().expect("name").to_string(),
            )
        })
        .collect();
    tasks
        .iter()
        .map(|t| {
            let frames = t["coroutine"].as_array().expect("coroutine");
            let mut awaiters: Vec<String> = t["awaited_by"]
                .as_array()
                .expect("awaited_by")
                .iter()
                .map(|id| {
                    name_of
                        .get(&id.as_u64().expect("id"))
                        .cloned()
                        .unwrap_or_else(|| format!("unknown {id}"))
                })
                .collect();
            awaiters.sort();
            (
                t["name"].as_str().expect("name").to_string(),
                (
                    frames
                        .iter()
                        .map(|f| f["function"].as_str().expect("function").to_string())
                        .collect(),
                    frames.iter().map(|f| f["line"].as_u64()).collect(),
                    awaiters,
                ),
            )
        })
        .collect()
}

#[apply(with_asyncio_tasks)]
fn dump_async_names_every_task_its_coroutine_stack_and_its_awaiter(py: &str) {
    let target = PythonProcess::ready(py, "async_tasks.py", &[]);
    let g = graph(&dump_tasks(target.pid()));
    let line = |m| Some(u64::from(marker_line("async_tasks.py", m)));
    let root = vec!["Task-1".to_string()];
    assert_eq!(g.len(), 4, "{py}: {g:#?}");
    assert_eq!(
        g["Task-1"],
        (vec!["main".into()], vec![line("main-await")], vec![]),
        "{py}"
    );
    let (functions, lines, awaiters) = &g["sleeper"];
    assert_eq!(functions, &["nap", "sleep"], "{py}");
    assert_eq!(lines[0], line("nap-await"), "{py}");
    assert_eq!(awaiters, &root, "{py}");
    let (functions, lines, awaiters) = &g["consumer"];
    assert_eq!(functions, &["drain", "Queue.get"], "{py}");
    assert_eq!(lines[0], line("drain-await"), "{py}");
    assert_eq!(awaiters, &root, "{py}");
    let (functions, _, awaiters) = &g["producer"];
    assert_eq!(
        functions.first().map(String::as_str),
        Some("produce"),
        "{py}"
    );
    assert_eq!(awaiters, &root, "{py}");

    // The text is the same tree, in `python -m asyncio pstree`'s shape.
    let out = run_pyagent(&["dump", "--pid", &target.pid().to_string(), "--async"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("└── (T) Task-1 ["), "{text}");
    assert!(text.contains("    └──  main "), "{text}");
    assert!(text.contains("        ├── (T) producer ["), "{text}");
    assert!(text.contains("        └── (T) consumer ["), "{text}");
}

/// Shares of samples per task path (`main/producer`, …) of collapsed stacks whose task
/// frames are found by `task_of`; samples outside any task count under "".
fn task_shares(collapsed: &str, task_of: impl Fn(&str) -> Option<String>) -> BTreeMap<String, f64> {
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    let mut total = 0;
    for line in collapsed.lines() {
        let Some((stack, n)) = line.rsplit_once(' ') else {
            continue;
        };
        let n: u64 = n.parse().expect("a count");
        let path: Vec<String> = stack.split(';').filter_map(&task_of).collect();
        *counts.entry(path.join("/")).or_default() += n;
        total += n;
    }
    assert!(total > 0, "no samples: {collapsed}");
    counts
        .into_iter()
        .map(|(k, n)| (k, n as f64 / total as f64))
        .collect()
}

/// pyagent's `<task NAME>` frames.
fn pyagent_task(frame: &str) -> Option<String> {
    frame
        .strip_prefix("<task ")
        .and_then(|f| f.strip_suffix('>'))
        .map(str::to_string)
}

/// Tachyon's `<task>:NAME:0` frames, with the root task of the scripts, `Task-1`, as pyagent
/// shows it: a task asyncio named is shown by its coroutine, `main`.
fn tachyon_task(frame: &str) -> Option<String> {
    frame
        .strip_prefix("<task>:")
        .and_then(|f| f.rsplit_once(':'))
        .map(|(name, _)| match name {
            "Task-1" => "main".to_string(),
            name => name.to_string(),
        })
}

/// CPython's sampler on `pid` for 3 s, `--async-aware --collapsed` and `extra`, from inside the
/// chroot.
fn tachyon_collapsed(py: &Interpreter, pid: u32, extra: &[&str]) -> String {
    py.ensure_proc_mounted();
    let inside = format!("/tmp/pyagent-tachyon-{}-{pid}.txt", std::process::id());
    let root = py.root.as_ref().expect("py315 runs in the chroot");
    let out = Command::new("chroot")
        .arg(root)
        .arg(&py.exe)
        .args(["-m", "profiling.sampling", "attach", "--async-aware"])
        .args(extra)
        .args(["--collapsed", "-d", "3", "-o", &inside, &pid.to_string()])
        .output()
        .expect("run profiling.sampling");
    assert!(
        out.status.success(),
        "profiling.sampling: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let host = py.host_path(std::path::Path::new(&inside));
    let text = std::fs::read_to_string(&host).expect("Tachyon's output");
    let _ = std::fs::remove_file(host);
    text
}

/// The producer's share of samples, attributed to `main/producer`, matches CPython's own
/// sampler within sampling error, and the stacks have its shape: the task's frames above
/// `<task producer>`, `main` (the root task's await) above `<task main>`: the root task,
/// `Task-1` to asyncio, shown by its coroutine, with its name in the `task_name` label.
#[rstest]
fn record_async_attributes_samples_as_cpython_s_sampler_does(
    #[values("userspace", "ebpf")] mode: &str,
) {
    let (
        _target,
        Compared {
            ours,
            summary,
            ours_shares,
            theirs_shares,
            ..
        },
    ) = compare_with_tachyon(&["--mode", mode], &[]);
    let producer = |s: &BTreeMap<String, f64>| s.get("main/producer").copied().unwrap_or(0.0);
    assert!(
        (producer(&ours_shares) - producer(&theirs_shares)).abs() <= 0.1,
        "{mode}: ours {ours_shares:?}, CPython's {theirs_shares:?}\n{summary}"
    );
    assert!(producer(&ours_shares) >= 0.7, "{mode}: {ours_shares:?}");
    let shaped = ours.lines().any(|l| {
        l.contains(";<task main>;main (")
            && l.contains(";<task producer>;produce (")
            && l.contains(";crunch (")
    });
    assert!(
        shaped,
        "{mode}: no main → main → producer → produce → crunch stack:\n{ours}"
    );
    assert!(summary.contains(" samples in asyncio tasks"), "{summary}");
}

/// One record of `async_tasks.py` on py315 with `--async` and `ours`, one of CPython's sampler
/// with `--async-aware` and `theirs`, 3 s each, one after the other under the host-wide lock.
struct Compared {
    ours: String,
    summary: String,
    theirs: String,
    ours_shares: BTreeMap<String, f64>,
    theirs_shares: BTreeMap<String, f64>,
}

fn compare_with_tachyon(ours: &[&str], theirs: &[&str]) -> (PythonProcess, Compared) {
    let _host = host_wide_lock();
    let py = Interpreter::by_name("py315");
    let target = PythonProcess::ready("py315", "async_tasks.py", &[]);
    let file = fresh_path("async-record.txt");
    let args = [&["--async", "-r", "199", "-d", "3"][..], ours].concat();
    let (ours, summary) = record_collapsed(target.pid(), &args, &file);
    let theirs = tachyon_collapsed(py, target.pid(), theirs);
    let ours_shares = task_shares(&ours, pyagent_task);
    let theirs_shares = task_shares(&theirs, tachyon_task);
    let c = Compared {
        ours,
        summary,
        theirs,
        ours_shares,
        theirs_shares,
    };
    (target, c)
}

/// `pyagent ARGS` fails with exit status 1 and one line saying `why`.
fn assert_refused(args: &[&str], why: &str) -> String {
    let out = run_pyagent(args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
    assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
    assert!(err.contains(why), "{args:?}: {err}");
    err
}

/// The most frequent stack under each task path, as `function:line` frames from the first task
/// marker down (`main;main:47;sleeper;nap:30;sleep:725`): the shape both samplers agree on,
/// whatever each prints of files and threads.
fn top_task_stacks(
    collapsed: &str,
    frame: impl Fn(&str) -> Option<String>,
    task_of: impl Fn(&str) -> Option<String>,
) -> BTreeMap<String, String> {
    let mut counts: BTreeMap<(String, String), u64> = BTreeMap::new();
    for line in collapsed.lines() {
        let Some((stack, n)) = line.rsplit_once(' ') else {
            continue;
        };
        let frames: Vec<&str> = stack.split(';').collect();
        let Some(first) = frames.iter().position(|f| task_of(f).is_some()) else {
            continue;
        };
        let path: Vec<String> = frames.iter().filter_map(|f| task_of(f)).collect();
        let shape: Vec<String> = frames[first..]
            .iter()
            .map(|f| {
                task_of(f)
                    .or_else(|| frame(f))
                    .unwrap_or_else(|| f.to_string())
            })
            .collect();
        *counts.entry((path.join("/"), shape.join(";"))).or_default() +=
            n.parse::<u64>().expect("a count");
    }
    let mut top: BTreeMap<String, (u64, String)> = BTreeMap::new();
    for ((path, shape), n) in counts {
        let best = top.entry(path).or_insert((0, String::new()));
        if n > best.0 {
            *best = (n, shape);
        }
    }
    top.into_iter()
        .map(|(path, (_, shape))| (path, shape))
        .collect()
}

/// pyagent's `func (file:line)` as `func:line`.
fn pyagent_frame(frame: &str) -> Option<String> {
    let (function, place) = frame.rsplit_once(" (")?;
    let line = place.strip_suffix(')')?.rsplit_once(':')?.1;
    Some(format!("{function}:{line}"))
}

/// Tachyon's `file:func:line` as `func:line`.
fn tachyon_frame(frame: &str) -> Option<String> {
    let (_, rest) = frame.split_once(':')?;
    Some(rest.to_string())
}

/// `--async-mode all` samples every task at each tick: the shares of the three leaf tasks match
/// CPython's sampler in the same mode within sampling error, and each waiting task's stack (its
/// await point under `<task NAME>`, under the root task's `main`) is the one CPython's shows.
/// In eBPF mode the flag is refused in one line.
#[test]
fn record_async_mode_all_samples_waiting_tasks_as_cpython_s_sampler_does() {
    let all = ["--async-mode", "all"];
    let (target, c) = compare_with_tachyon(&all, &all);
    let Compared {
        ours,
        summary,
        theirs,
        ours_shares,
        theirs_shares,
    } = c;
    for task in ["producer", "sleeper", "consumer"] {
        let path = format!("main/{task}");
        let share = |s: &BTreeMap<String, f64>| s.get(&path).copied().unwrap_or(0.0);
        assert!(
            (share(&ours_shares) - share(&theirs_shares)).abs() <= 0.1,
            "{task}: ours {ours_shares:?}, CPython's {theirs_shares:?}\n{summary}"
        );
    }
    let ours_top = top_task_stacks(&ours, pyagent_frame, pyagent_task);
    let theirs_top = top_task_stacks(&theirs, tachyon_frame, tachyon_task);
    for task in ["sleeper", "consumer"] {
        let path = format!("main/{task}");
        assert_eq!(
            ours_top.get(&path),
            theirs_top.get(&path),
            "{task}:\nours:\n{ours}\nCPython's:\n{theirs}"
        );
    }
    assert!(summary.contains(" samples of waiting tasks"), "{summary}");

    let pid = target.pid().to_string();
    let file = fresh_path("async-all-ebpf.txt");
    let out = file.to_str().expect("utf-8");
    let ebpf = [
        "record", "--pid", &pid, "--async", "--mode", "ebpf", "-o", out,
    ];
    assert_refused(
        &[&ebpf[..], &all[..]].concat(),
        "--async-mode all needs --mode userspace",
    );
}

/// Thousands of short tasks a second: every task chain in the profile is one the program
/// builds (children under `parent`, `parent` under the root), in both modes and with waiting
/// tasks sampled too (`--async-mode all`), and `dump --async` never fails while tasks come and
/// go.
#[apply(with_asyncio_tasks)]
fn task_churn_never_shows_a_chain_that_did_not_exist(
    py: &str,
    #[values("userspace", "ebpf", "all")] mode: &str,
) {
    let _host = host_wide_lock();
    let target = PythonProcess::ready(py, "async_churn.py", &[]);
    let file = fresh_path("async-churn.txt");
    let sampler = match mode {
        "all" => ["--async-mode", "all"],
        _ => ["--mode", mode],
    };
    let args = [&["--async", "-r", "199", "-d", "2"][..], &sampler].concat();
    let (ours, summary) = record_collapsed(target.pid(), &args, &file);
    // A child created and not started yet, before `gather` (which creates them all first)
    // makes `parent` their awaiter: a waiting task with no awaiter, for as long as that takes.
    let unstarted = format!(
        "async_churn.py:{})",
        marker_line("async_churn.py", "child-def")
    );
    let mut in_tasks = 0;
    for line in ours.lines() {
        let (stack, n) = line.rsplit_once(' ').expect("count");
        let path: Vec<String> = stack.split(';').filter_map(pyagent_task).collect();
        if path.is_empty() {
            continue;
        }
        in_tasks += n.parse::<u64>().expect("count");
        let ok = match path.as_slice() {
            [only] => {
                let unstarted_child = only.starts_with("child-")
                    && stack.ends_with(&unstarted)
                    && stack
                        .split(';')
                        .filter(|f| f.starts_with("child ("))
                        .count()
                        == 1;
                only == "main" || (mode == "all" && unstarted_child)
            }
            [root, parent] => root == "main" && parent == "parent",
            [root, parent, child] => {
                root == "main" && parent == "parent" && child.starts_with("child-")
            }
            _ => false,
        };
        assert!(
            ok,
            "{py} {mode}: a chain that never existed: {path:?}\n{summary}"
        );
    }
    assert!(
        in_tasks > 0,
        "{py} {mode}: no sample in a task\n{ours}\n{summary}"
    );
    for _ in 0..10 {
        let tasks = dump_tasks(target.pid());
        assert!(tasks["tasks"].as_array().is_some_and(|t| !t.is_empty()));
    }
}

/// A running task's stack is its thread's from the task's coroutine frame down: `dump --async`
/// shows `handle_work`, then the plain functions it calls (`compute_part`, `cpu_work`), which are
/// on no coroutine's frame, as a plain `dump` shows them, not `handle_work` alone. And
/// `record --async --async-mode all` never gives a running task a waiting task's sample, its
/// coroutine's frame with nothing under it.
#[apply(with_asyncio_tasks)]
fn a_running_task_shows_the_plain_functions_it_calls(py: &str) {
    let target = PythonProcess::ready(py, "async_running.py", &[]);
    let line = |m| Some(u64::from(marker_line("async_running.py", m)));
    // A worker inside `compute_part(…)` (not in the moment of its `await`).
    let computing = (0..20).find_map(|_| {
        let dump = dump_tasks(target.pid());
        dump["tasks"]
            .as_array()
            .expect("a task list")
            .iter()
            .find(|t| {
                t["running"] == true && t["coroutine"][0]["line"].as_u64() == line("handle-work")
            })
            .cloned()
    });
    let task = computing.unwrap_or_else(|| panic!("{py}: no worker running in 20 dumps"));
    let frames = task["coroutine"].as_array().expect("coroutine");
    let functions: Vec<&str> = frames
        .iter()
        .map(|f| f["function"].as_str().expect("function"))
        .collect();
    assert_eq!(
        functions,
        ["handle_work", "compute_part", "cpu_work"],
        "{py}: {task:#}"
    );
    assert_eq!(
        frames[1]["line"].as_u64(),
        line("compute-part"),
        "{py}: {task:#}"
    );
    let cpu_line = line("cpu-work").expect("a line");
    assert!(
        frames[2]["line"]
            .as_u64()
            .is_some_and(|l| l == cpu_line || l + 1 == cpu_line),
        "{py}: {task:#}"
    );
    // The workers also wait (`asyncio.sleep`): a dump can catch every task waiting, more often
    // beside a loaded host, so the text form is asked for until it shows a running one, as the
    // JSON form was above.
    let mut text = String::new();
    for _ in 0..20 {
        let out = run_pyagent(&["dump", "--pid", &target.pid().to_string(), "--async"]);
        text = String::from_utf8_lossy(&out.stdout).into_owned();
        if text.contains("[running, thread ") {
            break;
        }
    }
    assert!(text.contains("[running, thread "), "{py}: {text}");

    let _host = host_wide_lock();
    let file = fresh_path("async-running-all.txt");
    let args = ["--async", "--async-mode", "all", "-r", "199", "-d", "2"];
    let (ours, summary) = record_collapsed(target.pid(), &args, &file);
    let call = format!(
        "async_running.py:{})",
        marker_line("async_running.py", "handle-work")
    );
    let mut computing = 0;
    for l in ours.lines() {
        let (stack, n) = l.rsplit_once(' ').expect("count");
        // The frames under the worker's marker.
        let Some((_, under)) = stack.rsplit_once(";<task worker-") else {
            continue;
        };
        let under: Vec<&str> = under.split(';').skip(1).collect();
        let cut =
            under.len() == 1 && under[0].starts_with("handle_work (") && under[0].ends_with(&call);
        assert!(
            !cut,
            "{py}: a running task cut at its coroutine frame: {l}\n{summary}"
        );
        if under.iter().any(|f| f.starts_with("cpu_work (")) {
            computing += n.parse::<u64>().expect("count");
        }
    }
    assert!(
        computing > 0,
        "{py}: no sample in cpu_work under a worker\n{ours}"
    );
}

/// Before 3.14 there is no task layout to read: one line, exit status 1, from every command,
/// which says what to do instead.
#[apply(without_asyncio_tasks)]
fn before_3_14_async_is_refused_in_one_line(py: &str) {
    let target = PythonProcess::ready(py, "async_tasks.py", &[]);
    let pid = target.pid().to_string();
    let file = fresh_path("async-old.txt");
    let out = file.to_str().expect("utf-8");
    let record = ["record", "--pid", &pid, "--async", "-d", "1", "-o", out];
    for args in [
        vec!["dump", "--pid", &pid, "--async"],
        record.to_vec(),
        [&record[..], &["--mode", "ebpf"]].concat(),
        vec!["top", "--pid", &pid, "--async", "--iterations", "1"],
    ] {
        let err = assert_refused(&args, "asyncio task stacks need CPython 3.14 or later");
        assert!(err.contains("drop --async for its thread stacks"), "{err}");
    }
}

/// One task per request, named by asyncio (`Task-N`), all running `handle`: the stacks show
/// them as one task, `<task handle>`, one tower in a flame graph, not one tower per request,
/// and the `task_name` label still tells the requests apart.
#[apply(with_asyncio_tasks)]
fn tasks_asyncio_named_are_shown_by_their_coroutine(
    py: &str,
    #[values("userspace", "ebpf")] mode: &str,
) {
    let target = PythonProcess::ready(py, "async_requests.py", &[]);
    let file = fresh_path("async-requests.pb.gz");
    let summary = record(target.pid(), &["--async", "-d", "2", "--mode", mode], &file);
    let raw = go_pprof_raw(&file);
    assert!(
        raw.contains("<task handle>"),
        "{py} {mode}: {summary}\n{raw}"
    );
    assert!(!raw.contains("<task Task-"), "{py} {mode}: {raw}");
    let requests: BTreeSet<&str> = raw
        .split("task_name:[")
        .skip(1)
        .filter_map(|rest| rest.split_once(']').map(|(name, _)| name))
        .filter(|name| name.starts_with("Task-"))
        .collect();
    assert!(
        requests.len() >= 5,
        "{py} {mode}: the requests' labels: {requests:?}\n{summary}"
    );
}

/// A real async server: uvicorn on uvloop (pip-installed wheels for the interpreter), one task
/// per request, each living a few milliseconds, which call plain functions (`compute_part`,
/// `cpu_work`). `dump --async` shows a running request task with those functions under its
/// coroutine, not `RequestResponseCycle.run_asgi` alone; `record --async` puts nearly every
/// sample in `cpu_work` under `<task RequestResponseCycle.run_asgi>`, in both samplers. In eBPF
/// mode a request's task has ended by the time its record is read (a drain every 100 ms): the
/// program copies the running task's coroutine frame at the tick, and before it did 4 of 5
/// such samples lost their task.
#[apply(with_asyncio_tasks)]
fn an_async_server_s_requests_are_their_tasks(py: &str, #[values("userspace", "ebpf")] mode: &str) {
    let interpreter = Interpreter::by_name(py);
    let site = pyagent_tests::pip::site_for(interpreter, &["uvicorn==0.55.0", "uvloop==0.23.0"]);
    let mut target = PythonProcess::spawn(
        interpreter,
        &pyagent_tests::stacks::script("uvicorn_app.py"),
        &[site.to_str().expect("utf-8 path")],
    );
    target.wait_for_line("ready", std::time::Duration::from_secs(60));
    let request = [
        "RequestResponseCycle.run_asgi",
        "ProxyHeadersMiddleware.__call__",
        "app",
        "compute_part",
        "cpu_work",
    ];
    let running = (0..50).find_map(|_| {
        let dump = dump_tasks(target.pid());
        dump["tasks"].as_array()?.iter().find_map(|t| {
            let functions: Vec<&str> = t["coroutine"]
                .as_array()?
                .iter()
                .filter_map(|f| f["function"].as_str())
                .collect();
            (t["running"] == true && functions == request).then_some(())
        })
    });
    assert!(
        running.is_some(),
        "{py}: no request task running cpu_work in 50 dumps"
    );

    let _host = host_wide_lock();
    let file = fresh_path("async-server.txt");
    let args = ["--async", "-r", "199", "-d", "3", "--mode", mode];
    let (ours, summary) = record_collapsed(target.pid(), &args, &file);
    let (mut computing, mut in_task) = (0, 0);
    for line in ours.lines() {
        let (stack, n) = line.rsplit_once(' ').expect("count");
        assert!(!stack.contains("<task Task-"), "{py} {mode}: {line}");
        if !stack.contains(";cpu_work (") {
            continue;
        }
        let n: u64 = n.parse().expect("count");
        computing += n;
        if stack.contains(";<task RequestResponseCycle.run_asgi>;RequestResponseCycle.run_asgi (") {
            in_task += n;
        }
    }
    assert!(
        computing >= 100,
        "{py} {mode}: {computing} samples in cpu_work\n{summary}"
    );
    assert!(
        in_task as f64 >= 0.85 * computing as f64,
        "{py} {mode}: {in_task} of {computing} samples in cpu_work under their task\n{summary}\n{ours}"
    );
}
