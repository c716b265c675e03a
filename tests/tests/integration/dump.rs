//! `dump` on real targets: native frames with `--native` (issue 39, item 5), and the GIL's
//! holder named under each thread waiting for it (issue 38, item 1). A dump is one instant, so
//! each test dumps again until the instant it looks for comes (the wait helpers), never after
//! a sleep.

use std::time::Duration;

use pyagent_tests::agent::{pyagent_bin, run_pyagent};
use pyagent_tests::wait::wait_for;
use pyagent_tests::{Interpreter, PythonProcess};
use rstest_reuse::apply;
use serde_json::Value;

use crate::symbol_sources::{build, Source, CHAIN, LIB};
use crate::{free_threaded, matrix, with_gil};

/// How long a test dumps again before it gives up.
const PATIENCE: Duration = Duration::from_secs(30);

/// `dump --pid PID` with `extra` arguments: its standard output, checked to be a success.
fn dump(pid: u32, extra: &[&str]) -> String {
    let pid = pid.to_string();
    let mut args = vec!["dump", "--pid", &pid];
    args.extend_from_slice(extra);
    let out = run_pyagent(&args);
    assert!(
        out.status.success(),
        "dump {extra:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The thread blocks of a text dump: each `Thread TID "name" (STATE)` line with the lines under
/// it.
fn thread_blocks(text: &str) -> Vec<Vec<&str>> {
    text.split("\nThread ")
        .skip(1)
        .map(|block| block.lines().collect())
        .collect()
}

/// `dump --native` of native_burn.py, which spends its time in C called through ctypes under
/// the Python function `burn`: the library's functions (named by its MiniDebugInfo, as
/// `record --native` names them: `fixture_leaf [libfixture.so]`) sit above `burn`, innermost
/// first, and the C of the interpreter below it. Without native stacks in `dump`, only Python
/// frames were printed.
#[apply(matrix)]
fn dump_native_shows_the_c_functions_under_python(py: &str) {
    pyagent_bin(); // built before the target starts: a slow build must not outlive it
    let fixture = build(
        Interpreter::by_name(py),
        Source::MiniDebugInfo,
        &format!("dump-{py}"),
    );
    let p = PythonProcess::ready(py, "native_burn.py", &[&fixture.lib]);
    let named = |f: &str| format!("    {f} [{LIB}]");
    let mut last = String::new();
    let found = wait_for("`burn` under the library's frames", PATIENCE, || {
        last = dump(p.pid(), &["--native"]);
        thread_blocks(&last)
            .into_iter()
            .find(|lines| {
                let at = |want: &str| lines.iter().position(|l| *l == want);
                let burn = lines
                    .iter()
                    .position(|l| l.starts_with("    burn (") && l.contains("native_burn.py:"));
                // The chain, innermost first: leaf, middle, outer, entry, then Python's `burn`.
                let chain: Option<Vec<usize>> = CHAIN.iter().rev().map(|f| at(&named(f))).collect();
                matches!((chain, burn), (Some(c), Some(b)) if c.windows(2).all(|w| w[0] < w[1])
                && c.last().is_some_and(|&e| e < b))
            })
            .map(|lines| lines.into_iter().map(str::to_owned).collect::<Vec<_>>())
    });
    // The interpreter's own C is below `burn`: native frames of other objects.
    let burn = found
        .iter()
        .position(|l| l.starts_with("    burn ("))
        .unwrap();
    assert!(
        found[burn + 1..]
            .iter()
            .any(|l| l.ends_with(']') && !l.ends_with(&format!("[{LIB}]"))),
        "{py}: no interpreter frames below burn:\n{last}"
    );
    // One dump is one instant, and between two calls of `burn` the thread runs Python only:
    // the JSON form is asked for until an instant inside the library comes.
    wait_for("fixture_entry in the JSON dump", PATIENCE, || {
        let json: Value = serde_json::from_str(&dump(p.pid(), &["--native", "--json"])).unwrap();
        json["threads"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|t| t["frames"].as_array().unwrap())
            .any(|f| {
                f["kind"] == "native_code" && f["object"] == LIB && f["function"] == "fixture_entry"
            })
            .then_some(())
    });
}

/// gil_holder.py: `hold_gil_spin` holds the GIL in a Python loop while three `wanter` threads
/// keep waiting for it. Some dump shows a thread waiting for the GIL whose holder line names
/// the thread running `hold_gil_spin`, and `--json` has the same holder as an object.
#[apply(with_gil)]
fn dump_names_the_gil_holder_under_each_thread_waiting_for_it(py: &str) {
    pyagent_bin();
    let p = PythonProcess::ready(py, "gil_holder.py", &[]);
    let mut last = String::new();
    wait_for("a waiter naming hold_gil_spin's thread", PATIENCE, || {
        last = dump(p.pid(), &[]);
        let blocks = thread_blocks(&last);
        // The spinning thread, by its top frame: `TID "holder" (…, holds the GIL)`.
        let holder = blocks.iter().find(|b| {
            b.get(1)
                .is_some_and(|l| l.starts_with("    hold_gil_spin ("))
                && b[0].contains(", holds the GIL")
        })?;
        let tid = holder[0].split_whitespace().next()?;
        let want =
            format!("    waiting for the GIL held by thread {tid} \"holder\" in hold_gil_spin (");
        blocks
            .iter()
            .any(|b| {
                b[0].contains("(waiting: gil in ")
                    && b.get(1)
                        .is_some_and(|l| l.starts_with(&want) && l.contains("gil_holder.py:"))
            })
            .then_some(())
    });
    wait_for(
        "a waiter with hold_gil_spin's thread in JSON",
        PATIENCE,
        || {
            let json: Value = serde_json::from_str(&dump(p.pid(), &["--json"])).unwrap();
            let threads = json["threads"].as_array()?.clone();
            let holder = threads.iter().find(|t| {
                t["holds_gil"] == true && t["frames"][0]["function"] == "hold_gil_spin"
            })?;
            threads
                .iter()
                .any(|t| {
                    let h = &t["gil_holder"];
                    t["state"]["wait"] == "gil"
                        && h["tid"] == holder["tid"]
                        && h["name"] == "holder"
                        && h["function"] == "hold_gil_spin"
                        && h["file"]
                            .as_str()
                            .is_some_and(|f| f.ends_with("gil_holder.py"))
                        && h["line"].as_u64().is_some()
                })
                .then_some(())
        },
    );
}

/// A free-threaded build has no GIL: nobody waits for it, and no dump names a holder.
#[apply(free_threaded)]
fn dump_names_no_gil_holder_without_a_gil(py: &str) {
    pyagent_bin();
    let p = PythonProcess::ready(py, "gil_holder.py", &[]);
    for _ in 0..5 {
        let text = dump(p.pid(), &[]);
        assert!(!text.contains("waiting for the GIL"), "{py}:\n{text}");
        assert!(text.contains("    hold_gil_spin ("), "{py}:\n{text}");
        let json = dump(p.pid(), &["--json"]);
        assert!(!json.contains("\"gil_holder\""), "{py}:\n{json}");
    }
}
