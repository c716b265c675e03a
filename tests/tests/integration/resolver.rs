//! The resolver on every interpreter of the matrix: exact qualified names and lines.

use std::time::{Duration, Instant};

use pyagent::unwind::UnwindOptions;
use pyagent_tests::stacks::{at, sample_until, simple, unwinder, SimpleFrame};
use pyagent_tests::{Interpreter, PythonProcess};
use rstest_reuse::apply;

use crate::{matrix, with_c_boundaries};

const PARK: Duration = Duration::from_secs(10);

/// Samples until the thread whose top frame is `top` shows up; returns its frames.
fn parked_stack(p: &PythonProcess, options: UnwindOptions, top: &SimpleFrame) -> Vec<SimpleFrame> {
    let mut u = unwinder(p.pid(), options);
    let samples = sample_until(&mut u, PARK, |s| {
        s.iter().any(|t| simple(t).first() == Some(top))
    });
    let t = samples
        .iter()
        .find(|t| simple(t).first() == Some(top))
        .expect("found above");
    simple(t)
}

#[apply(matrix)]
fn nested_functions_and_methods(py: &str) {
    let p = PythonProcess::ready(py, "nested.py", &[]);
    let role = Interpreter::by_name(py).role();
    let expected = vec![
        at(role.function_name("Shop.checkout"), "nested.py", "checkout"),
        at(
            role.function_name("outer.<locals>.inner"),
            "nested.py",
            "inner",
        ),
        at("outer", "nested.py", "outer"),
        at("<module>", "nested.py", "module"),
    ];
    assert_eq!(
        parked_stack(&p, UnwindOptions::default(), &expected[0]),
        expected
    );
}

#[apply(matrix)]
fn deep_recursion_is_complete(py: &str) {
    let p = PythonProcess::ready(py, "recursion.py", &["1000"]);
    let top = at("recurse", "recursion.py", "sleep");
    for options in [
        UnwindOptions::default(),
        UnwindOptions {
            frame_cache: false,
            ..Default::default()
        },
    ] {
        let frames = parked_stack(&p, options, &top);
        let mut expected = vec![top.clone()];
        expected.extend(std::iter::repeat_n(
            at("recurse", "recursion.py", "recurse"),
            1000,
        ));
        expected.push(at("<module>", "recursion.py", "module"));
        assert_eq!(
            frames.len(),
            1002,
            "{py}: 1000 recursive frames + parked frame + <module>"
        );
        assert_eq!(frames, expected);
    }
}

#[apply(matrix)]
fn eight_threads_distinct_stacks(py: &str) {
    let p = PythonProcess::ready(py, "threads.py", &[]);
    let mut u = unwinder(p.pid(), UnwindOptions::default());
    let sleep = at("level", "threads.py", "sleep");
    let main = at("<module>", "threads.py", "main_sleep");
    let samples = sample_until(&mut u, PARK, |s| {
        s.iter()
            .filter(|t| simple(t).first() == Some(&sleep))
            .count()
            == 8
            && s.iter().any(|t| simple(t) == vec![main.clone()])
    });
    assert_eq!(samples.len(), 9, "main thread + 8 workers");
    let mut depths: Vec<usize> = Vec::new();
    for t in samples.iter().filter(|t| simple(t).first() == Some(&sleep)) {
        let frames = simple(t);
        // level ×(i+1) above worker, then threading's run/_bootstrap_inner/_bootstrap.
        let levels = frames.iter().take_while(|f| f.0 == "level").count();
        assert_eq!(
            frames[1..levels],
            vec![at("level", "threads.py", "level"); levels - 1][..]
        );
        assert_eq!(frames[levels], at("worker", "threads.py", "worker"));
        let rest: Vec<&str> = frames[levels + 1..].iter().map(|f| f.0.as_str()).collect();
        let role = Interpreter::by_name(py).role();
        let threading = ["Thread.run", "Thread._bootstrap_inner", "Thread._bootstrap"];
        assert_eq!(rest, threading.map(|f| role.function_name(f)), "{py}");
        assert!(frames[levels + 1..].iter().all(|f| f.1 == "threading.py"));
        depths.push(levels);
        // The `threading` name, on every version (worker i runs at depth i + 1), in full: the
        // OS name is `python3.x` before 3.14, and cut to 15 characters from 3.14 on.
        let name = match levels - 1 {
            3 => "CustomThreadName-3".to_string(),
            i => format!("worker-{i}"),
        };
        assert_eq!(t.thread.thread_name.as_deref(), Some(name.as_str()), "{py}");
        assert_ne!(
            t.thread.ns_tid(),
            p.pid(),
            "workers have their own thread ids"
        );
    }
    depths.sort_unstable();
    assert_eq!(
        depths,
        (1..=8).collect::<Vec<_>>(),
        "each worker at its own depth"
    );
    let main_thread = samples
        .iter()
        .find(|t| simple(t) == vec![main.clone()])
        .expect("waited for above");
    assert_eq!(
        main_thread.thread.thread_name.as_deref(),
        Some("MainThread"),
        "{py}"
    );
    // Names are cached: read again once they are a second old, not per sample.
    let (reads, start) = (u.thread_name_reads(), Instant::now());
    for _ in 0..20 {
        u.sample().expect("sample");
    }
    let elapsed_s = start.elapsed().as_secs();
    assert!(
        u.thread_name_reads() - reads <= elapsed_s + 1,
        "{py}: {} reads of the names in 20 samples over {elapsed_s} s",
        u.thread_name_reads() - reads
    );
}

#[apply(matrix)]
fn running_generator(py: &str) {
    let p = PythonProcess::ready(py, "generators.py", &["generator"]);
    let expected = vec![
        at("consume", "generators.py", "consume"),
        at("produce", "generators.py", "yield"),
        at("drive", "generators.py", "drive"),
        at("<module>", "generators.py", "module_gen"),
    ];
    assert_eq!(
        parked_stack(&p, UnwindOptions::default(), &expected[0]),
        expected
    );
}

#[apply(matrix)]
fn running_coroutines(py: &str) {
    let p = PythonProcess::ready(py, "generators.py", &["coroutine"]);
    let top = at("leaf", "generators.py", "leaf");
    let frames = parked_stack(&p, UnwindOptions::default(), &top);
    assert_eq!(
        frames[..3],
        [
            top,
            at("middle", "generators.py", "middle"),
            at("top", "generators.py", "top")
        ],
        "{py}: {frames:#?}"
    );
    assert_eq!(
        frames.last(),
        Some(&at("<module>", "generators.py", "module_coro"))
    );
    // Between the coroutines and <module>: asyncio's event loop, all in the standard library.
    assert!(
        frames[3..frames.len() - 1]
            .iter()
            .all(|f| f.1 != "generators.py"),
        "{frames:#?}"
    );
}

/// A second libpython of the same minor that the target can dlopen, as a path in its root.
fn second_libpython(py: &str) -> Option<String> {
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let path = match py {
        "py311-debian" | "py311" => "/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0".to_string(),
        "py313-static" => format!("{home}/.pyenv/versions/3.13.0/lib/libpython3.13.so.1.0"),
        "py314" => "/usr/lib/x86_64-linux-gnu/libpython3.14.so.1.0".to_string(),
        "py315" => "/usr/lib/x86_64-linux-gnu/libpython3.15.so.1.0".to_string(),
        _ => return None,
    };
    let interp = Interpreter::by_name(py);
    let on_host = interp.host_path(std::path::Path::new(&path));
    on_host.exists().then_some(path)
}

#[apply(matrix)]
fn imported_ctypes_and_second_libpython(py: &str) {
    let lib = second_libpython(py);
    let args: Vec<&str> = lib.iter().map(|s| s.as_str()).collect();
    let p = PythonProcess::ready(py, "with_ctypes.py", &args);
    if let Some(lib) = &lib {
        let maps = std::fs::read_to_string(format!("/proc/{}/maps", p.pid())).expect("maps");
        let name = lib.rsplit('/').next().expect("file name");
        assert!(
            maps.contains(name),
            "{py}: the second libpython {lib} is mapped"
        );
    }
    let expected = vec![
        at("parked", "with_ctypes.py", "parked"),
        at("<module>", "with_ctypes.py", "module"),
    ];
    assert_eq!(
        parked_stack(&p, UnwindOptions::default(), &expected[0]),
        expected
    );
}

#[apply(with_c_boundaries)]
fn native_pseudo_frame(py: &str) {
    let p = PythonProcess::ready(py, "pseudo.py", &["native"]);
    let options = UnwindOptions {
        native: true,
        ..Default::default()
    };
    let expected = vec![
        at("park", "pseudo.py", "park"),
        at("from_c.<locals>.<lambda>", "pseudo.py", "sorted"),
        ("<native>".to_string(), "~".to_string(), None),
        at("from_c", "pseudo.py", "sorted"),
        at("<module>", "pseudo.py", "module_native"),
    ];
    assert_eq!(parked_stack(&p, options, &expected[0]), expected);
    // Off by default.
    let without: Vec<_> = expected
        .iter()
        .filter(|f| f.0 != "<native>")
        .cloned()
        .collect();
    assert_eq!(
        parked_stack(&p, UnwindOptions::default(), &expected[0]),
        without
    );
}

/// 3.15 says which frame started a collection (`gc.frame`): `<GC>` sits right above it.
#[test]
fn gc_pseudo_frame_on_3_15() {
    let p = PythonProcess::ready("py315", "pseudo.py", &["gc"]);
    let expected = vec![
        at("park", "pseudo.py", "park"),
        at("Finalized.__del__", "pseudo.py", "del"),
        ("<GC>".to_string(), "~".to_string(), None),
        at("from_gc", "pseudo.py", "collect"),
        at("<module>", "pseudo.py", "module_gc"),
    ];
    let options = UnwindOptions {
        native: true,
        ..Default::default()
    };
    assert_eq!(parked_stack(&p, options, &expected[0]), expected);
    // The frame cache never stores `<GC>` (the collection may be over by the next sample):
    // stacks spliced from it get the marker back while `gc.frame` still names a cached frame.
    let mut u = unwinder(p.pid(), options);
    sample_until(&mut u, PARK, |s| {
        s.iter().any(|t| simple(t).first() == Some(&expected[0]))
    });
    // The next samples are spliced from the cache once the anchor written at the last one is
    // read back; under load the parked thread may still be moving into its sleep, so wait for
    // the first full hit and check the stack it gave.
    let deadline = Instant::now() + PARK;
    loop {
        let hits_before = u.stats().cache_full_hits;
        let again = u.sample().expect("sampling the parked target");
        if u.stats().cache_full_hits > hits_before {
            assert_eq!(
                again.iter().map(simple).collect::<Vec<_>>(),
                vec![expected.clone()]
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no sample of the parked target was a full cache hit in {PARK:?}: {:?}",
            u.stats()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let no_gc = UnwindOptions {
        gc: false,
        ..Default::default()
    };
    let without: Vec<_> = expected.iter().filter(|f| f.0 != "<GC>").cloned().collect();
    assert_eq!(parked_stack(&p, no_gc, &expected[0]), without);
}
