//! Mixed stacks in eBPF mode (`record --mode ebpf --native`): the program copies each tick's
//! user registers and stack, the agent unwinds them with the objects' CFI and puts every
//! eval-loop frame's Python frames in its place. native_mix.py spends its time in zlib under
//! `compress_loop` (Python → C), and in zlib under `slow_key`, which `list.sort` calls back
//! (Python → C → Python → C).

use pyagent_tests::agent::{host_wide_lock, number_before, pyagent_bin, record_collapsed};
use pyagent_tests::scratch::fresh_dir;
use pyagent_tests::{Interpreter, PythonProcess};
use rstest::rstest;
use rstest_reuse::apply;

use crate::{matrix, representative};

/// The frames of one collapsed line (root first, the thread label dropped) and its count.
fn stack(line: &str) -> (Vec<&str>, u64) {
    let (frames, n) = line.rsplit_once(' ').expect("a count");
    let frames = frames.split(';').skip(1).collect();
    (frames, n.parse().expect("numeric count"))
}

fn position(frames: &[&str], pred: impl Fn(&str) -> bool) -> Option<usize> {
    frames.iter().position(|f| pred(f))
}

/// The Python function `name` of the test script `script`.
fn in_script<'a>(script: &'a str, name: &'a str) -> impl Fn(&str) -> bool + 'a {
    move |f: &str| f.starts_with(&format!("{name} (")) && f.contains(&format!("{script}:"))
}

fn python(name: &str) -> impl Fn(&str) -> bool + '_ {
    in_script("native_mix.py", name)
}

/// `record --native -d 3` in `mode` of `py` running `script`: its collapsed stacks and
/// pyagent's summary, checked to hold more than 100 samples.
fn record_native(py: &str, script: &str, mode: &str) -> (String, String) {
    pyagent_bin(); // built before the target starts: a slow build must not outlive it
    let _serial = host_wide_lock();
    let p = PythonProcess::ready(py, script, &[]);
    let tag = script.trim_end_matches(".py");
    let dir = fresh_dir(&format!("native-{tag}-{py}-{mode}"));
    let (text, err) = record_collapsed(
        p.pid(),
        &["--mode", mode, "--native", "-d", "3"],
        &dir.join("stacks.txt"),
    );
    let samples = number_before(&err, " samples,");
    assert!(samples > 100, "{py}: too few samples: {err}");
    (text, err)
}

/// A native frame of a loaded object (`name [object]`).
fn native(f: &str) -> bool {
    f.ends_with(']') && !f.ends_with(" [kernel]")
}

/// Whether the interpreter names its static functions: Debian's packages are stripped of
/// `.symtab` (their `list_sort` and built-in zlib module are `python3.15+0x…`), and their eval
/// loop's body is found from the exported entry's jumps (`symbolize/eval_loop.rs`).
fn names_static_functions(py: &str) -> bool {
    Interpreter::by_name(py).role().has_symtab()
}

/// In both modes: the program's copy (`ebpf`), or the agent's own, taken with each thread
/// stopped by ptrace (`userspace`, which has no kernel frames).
#[apply(matrix)]
fn native_frames_sit_between_and_above_the_python_ones(
    py: &str,
    #[values("ebpf", "userspace")] mode: &str,
) {
    let named = names_static_functions(py);
    let (text, err) = record_native(py, "native_mix.py", mode);
    if mode == "userspace" {
        assert!(
            !text.contains(" [kernel]"),
            "{py}: kernel frames in userspace mode"
        );
    }
    let samples = number_before(&err, " samples,");
    let mismatched = number_before(&err, " mismatched");
    assert!(mismatched * 10 <= samples, "{py}: merges failed: {err}");

    let (mut compress, mut compress_in_libz, mut key, mut key_in_libz) = (0, 0, 0, 0);
    for line in text.lines() {
        let (frames, n) = stack(line);
        // Every eval-loop frame was replaced by its Python frames.
        assert!(
            !frames
                .iter()
                .any(|f| f.starts_with("_PyEval_EvalFrameDefault")),
            "{py}: an eval-loop frame left in: {line}"
        );
        // A sample whose two stacks did not match (caught as an evaluation began or ended;
        // counted in `mismatched` above) keeps its Python frames alone.
        if !frames.iter().any(|f| native(f)) {
            continue;
        }
        let (Some(module), Some(main)) = (
            position(&frames, python("<module>")),
            position(&frames, python("main")),
        ) else {
            continue;
        };
        // Python below the first evaluation's C frames: the interpreter's entry point is
        // below `<module>`, `main` above it.
        assert!(
            module < main && frames[..module].iter().any(|f| native(f)),
            "{py}: `<module>` not above the interpreter's C frames: {line}"
        );
        if let Some(c) = position(&frames, python("compress_loop")) {
            compress += n;
            let above = &frames[c + 1..];
            // Python → the zlib module's C function → libz, and no Python above.
            assert!(
                above.iter().all(|f| native(f) || f.ends_with(" [kernel]")),
                "{py}: Python above compress_loop's C call: {line}"
            );
            let module_fn = if named {
                position(above, |f| f.starts_with("zlib_compress ["))
            } else {
                position(above, native)
            };
            let libz = position(above, |f| f.contains("[libz.so"));
            if matches!((module_fn, libz), (Some(m), Some(z)) if m < z) {
                compress_in_libz += n;
            }
        }
        if let Some(k) = position(&frames, python("slow_key")) {
            key += n;
            // sort_loop → sorted/list.sort (C) → slow_key (Python) → zlib.crc32 (C, libz).
            let s = position(&frames, python("sort_loop")).expect("slow_key under sort_loop");
            if named {
                // `listsort` before 3.7's Argument Clinic renamed it.
                let sort = position(&frames, |f| {
                    f.starts_with("list_sort") || f.starts_with("listsort ")
                })
                .unwrap_or_else(|| panic!("{py}: no list_sort between: {line}"));
                assert!(s < sort && sort < k, "{py}: out of order: {line}");
            } else {
                assert!(
                    s + 1 < k,
                    "{py}: no C between sort_loop and slow_key: {line}"
                );
            }
            assert!(
                frames[s + 1..k].iter().all(|f| native(f)),
                "{py}: only C between sort_loop and slow_key: {line}"
            );
            if frames[k + 1..]
                .iter()
                .any(|f| !named || f.starts_with("zlib_crc32 ["))
                && frames[k + 1..].iter().any(|f| f.contains("[libz.so"))
            {
                key_in_libz += n;
            }
        }
    }
    // Most of the time goes to libz under both (the rest: the buffer's allocation, the calls).
    assert!(
        compress > 20 && compress_in_libz * 2 >= compress,
        "{py}: {compress_in_libz} of {compress} compress_loop samples in libz:\n{text}"
    );
    assert!(
        key > 20 && key_in_libz * 2 >= key,
        "{py}: {key_in_libz} of {key} slow_key samples in libz's crc32:\n{text}"
    );
}

/// Without `--native` the program copies no stack and the profile has Python frames only,
/// as before native stacks existed.
#[test]
fn without_native_the_stacks_are_python_only() {
    pyagent_bin();
    let _serial = host_wide_lock();
    let p = PythonProcess::ready("py312", "native_mix.py", &[]);
    let dir = fresh_dir("native-off");
    let (text, err) = record_collapsed(
        p.pid(),
        &["--mode", "ebpf", "-d", "2"],
        &dir.join("python.txt"),
    );
    assert!(!err.contains("native stacks"), "{err}");
    assert!(text.contains("compress_loop ("), "{text}");
    for line in text.lines() {
        let (frames, _) = stack(line);
        assert!(
            frames
                .iter()
                .all(|f| f.ends_with(')') || (f.starts_with('<') && f.ends_with('>'))),
            "a frame that is not Python: {line}"
        );
    }
}

/// A library unloaded and loaded again while it is sampled (`dlclose_loop.py`: libbz2 through
/// ctypes, `dlclose`d after each use): the agent goes on, its frames in libbz2 are named from
/// libbz2 (`BZ2_*`, or `libbz2.so…+0x…` for its stripped static functions), never from another
/// object, and what falls outside every mapped object is counted and printed (`[unknown]`).
#[rstest]
fn a_library_unloaded_while_sampled_is_named_right_or_counted_unknown(
    #[values("ebpf", "userspace")] mode: &str,
) {
    let (text, err) = record_native("py312", "dlclose_loop.py", mode);
    // The count is printed, whatever it is (the loader usually maps the library at the same
    // address again, where the names stay right).
    let unknown = number_before(&err, " frames outside every mapped object");
    let mut in_libbz2 = 0;
    let mut unknown_seen = 0;
    for line in text.lines() {
        let (frames, n) = stack(line);
        unknown_seen += frames.iter().filter(|f| f.starts_with("[unknown]")).count() as u64 * n;
        let Some(c) = position(&frames, in_script("dlclose_loop.py", "compress_loop")) else {
            continue;
        };
        let bz2: Vec<&&str> = frames[c + 1..]
            .iter()
            .filter(|f| f.contains("[libbz2"))
            .collect();
        for f in &bz2 {
            assert!(
                f.starts_with("BZ2_") || f.starts_with("libbz2.so"),
                "a libbz2 frame named from elsewhere: {f} in {line}"
            );
        }
        if !bz2.is_empty() {
            in_libbz2 += n;
        }
    }
    assert!(
        in_libbz2 > 20,
        "{in_libbz2} samples in libbz2:\n{text}\n{err}"
    );
    assert!(
        unknown_seen <= unknown,
        "{unknown_seen} `[unknown]` frames in the profile, {unknown} counted: {err}"
    );
}

/// libc's `qsort` called through ctypes with a Python comparison function (`qsort_loop.py`):
/// `sort_loop` (Python) → ctypes and libffi → qsort (libc) → the callback → `comparator`
/// (Python), in that order, with only C between the two Python functions.
#[apply(representative)]
fn qsort_through_ctypes_calls_the_python_comparator_between_libc_frames(
    py: &str,
    #[values("ebpf", "userspace")] mode: &str,
) {
    let (text, err) = record_native(py, "qsort_loop.py", mode);
    let script_fn = |name| in_script("qsort_loop.py", name);
    let mut ordered = 0;
    for line in text.lines() {
        let (frames, n) = stack(line);
        let (Some(s), Some(k)) = (
            position(&frames, script_fn("sort_loop")),
            position(&frames, script_fn("comparator")),
        ) else {
            continue;
        };
        assert!(s < k, "{py}: comparator under sort_loop: {line}");
        assert!(
            frames[s + 1..k].iter().all(|f| native(f)),
            "{py}: only C between sort_loop and comparator: {line}"
        );
        let q = position(&frames[s + 1..k], |f| {
            f.contains("qsort") && f.contains("[libc.so")
        });
        if q.is_some() {
            ordered += n;
        }
    }
    assert!(
        ordered > 20,
        "{py}: {ordered} samples with sort_loop → qsort (libc) → comparator:\n{text}\n{err}"
    );
}

/// Builds big_frame.c where `py` can load it (inside its root for a chroot interpreter); the
/// path as the interpreter sees it.
fn build_big_frame(py: &str) -> String {
    let inside = std::path::PathBuf::from(format!(
        "/tmp/pyagent-big-frame-{}-{py}.so",
        std::process::id()
    ));
    let host = Interpreter::by_name(py).host_path(&inside);
    let out = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&host)
        .arg(pyagent_tests::stacks::script("big_frame.c"))
        .output()
        .expect("run cc");
    assert!(
        out.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    inside.to_str().expect("utf-8 path").to_string()
}

/// A C frame larger than the 16 KiB of stack a native sample copies cuts the unwind inside it:
/// such a stack keeps its Python frames below a single `[truncated native]` frame and ends with
/// the frames its thread's whole stacks have below their bottom evaluation, so that both grow
/// from one root (one tower in a flame graph, not a second one at `<module>`).
#[rstest]
fn a_stack_cut_at_the_copy_window_joins_the_whole_ones(#[values("ebpf", "userspace")] mode: &str) {
    pyagent_bin(); // built before the target starts: a slow build must not outlive it
    let _serial = host_wide_lock();
    let py = "py312";
    let lib = build_big_frame(py);
    let p = PythonProcess::ready(py, "big_frame.py", &[&lib]);
    let dir = fresh_dir(&format!("native-big-frame-{mode}"));
    let (text, err) = record_collapsed(
        p.pid(),
        &["--mode", mode, "--native", "-d", "3", "-r", "199"],
        &dir.join("stacks.txt"),
    );
    let stacks: Vec<(Vec<&str>, u64)> = text.lines().map(stack).collect();
    let through = |entry: &str| -> Vec<&(Vec<&str>, u64)> {
        stacks
            .iter()
            .filter(|(f, _)| f.iter().any(|x| x.starts_with(&format!("{entry} ["))))
            .collect()
    };
    let (big, small) = (through("big_frame_entry"), through("small_frame_entry"));
    assert!(!big.is_empty() && !small.is_empty(), "{err}\n{text}");
    let root = small[0].0[0];
    assert!(
        small.iter().all(|(f, _)| f[0] == root),
        "whole stacks share their root {root}:\n{text}"
    );
    let samples = |v: &[&(Vec<&str>, u64)]| v.iter().map(|(_, n)| n).sum::<u64>();
    let joined: Vec<_> = big
        .iter()
        .copied()
        .filter(|(f, _)| {
            f[0] == root
                && position(f, |x| x == "[truncated native]")
                    .is_some_and(|at| f[at + 1].starts_with("big_frame_entry ["))
                && position(f, in_script("big_frame.py", "burn_big")).is_some()
        })
        .collect();
    // Until the thread's first whole stack, its root is unknown: a few may stand alone.
    assert!(
        samples(&joined) * 10 >= samples(&big) * 9,
        "{} of {} samples in big_frame_entry joined the tower at {root}:\n{text}",
        samples(&joined),
        samples(&big)
    );
}

/// The numpy the tests install (its OpenBLAS's kernels are what the test needs).
const NUMPY: &str = "numpy==2.5.5";

/// Issue 39: OpenBLAS's dgemm kernel has a symbol but no unwind entry, and uses `rbp` as a
/// register, so its caller can only be guessed, and the frame-pointer guess lands anywhere.
/// The stack must end in the kernel under the Python frame that called numpy, with a
/// `[truncated native]` frame where the unproven part was, not lose every native frame as a
/// mismatch (before: 374 of 394 samples kept their Python frames alone). Real numpy, from the
/// package index.
#[rstest]
fn a_blas_kernel_without_unwind_entries_ends_the_stack_under_its_python_caller(
    #[values("ebpf", "userspace")] mode: &str,
) {
    pyagent_bin(); // built before the target starts: a slow build must not outlive it
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").expect("read /proc/cpuinfo");
    assert!(
        cpuinfo.split_whitespace().any(|f| f == "avx2"),
        "this test needs a CPU with AVX2, for OpenBLAS's Haswell kernel"
    );
    let site = pyagent_tests::pip::site(NUMPY);
    let _serial = host_wide_lock();
    let env = [
        ("OPENBLAS_NUM_THREADS", "1"),
        ("OPENBLAS_CORETYPE", "Haswell"),
    ];
    let p =
        PythonProcess::ready_with_env("py312", "matmul.py", &[site.to_str().expect("utf-8")], &env);
    let dir = fresh_dir(&format!("native-matmul-{mode}"));
    let (text, err) = record_collapsed(
        p.pid(),
        &["--mode", mode, "--native", "-d", "3"],
        &dir.join("stacks.txt"),
    );
    let stacks: Vec<(Vec<&str>, u64)> = text.lines().map(stack).collect();
    let total: u64 = stacks.iter().map(|(_, n)| n).sum();
    let in_blas = |f: &str| f.contains(" [libscipy_openblas");
    let kernel: u64 = stacks
        .iter()
        .filter(|(f, _)| {
            f.last().is_some_and(|leaf| in_blas(leaf))
                && position(f, in_script("matmul.py", "matmul")).is_some_and(|at| {
                    f[at + 1..]
                        .iter()
                        .all(|x| native(x) || *x == "[truncated native]")
                })
        })
        .map(|(_, n)| n)
        .sum();
    assert!(total > 100, "too few samples: {err}");
    assert!(
        kernel * 10 >= total * 9,
        "{kernel} of {total} samples end in OpenBLAS under matmul:\n{err}\n{text}"
    );
    let at_kernel: u64 = stacks
        .iter()
        .filter(|(f, _)| match f.as_slice() {
            [.., cut, leaf] => {
                *cut == "[truncated native]" && leaf.starts_with("dgemm_kernel_HASWELL [")
            }
            _ => false,
        })
        .map(|(_, n)| n)
        .sum();
    assert!(
        at_kernel > 0,
        "no stack stops at the kernel with [truncated native] under it:\n{text}"
    );
    let stops = err
        .split(" at code without unwind entries")
        .next()
        .and_then(|head| head.rsplit('(').next())
        .and_then(|n| n.trim().parse::<u64>().ok())
        .unwrap_or(0);
    assert!(stops > 0, "the summary counts the stops: {err}");
}
