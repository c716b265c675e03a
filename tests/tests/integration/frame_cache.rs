//! CPython 3.15's frame cache (`last_profiled_frame`): never splices call chains that did not
//! happen (gh-151613), and gives the same stacks as walking without it.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use pyagent::profiler::{HostConfig, HostProfiler, Mode};
use pyagent::unwind::UnwindOptions;
use pyagent_tests::stacks::{at, sample_until, simple, unwinder};
use pyagent_tests::PythonProcess;

fn record_stacks(
    pid: u32,
    frame_cache: bool,
    seconds: f64,
    idle: bool,
    blocking: bool,
) -> (BTreeSet<Vec<String>>, u64, pyagent::unwind::UnwindStats) {
    let mut profiler = HostProfiler::new(HostConfig {
        mode: Mode::Userspace,
        rate_hz: 1000,
        pids: Some(vec![pid]),
        unwind: UnwindOptions {
            frame_cache,
            ..Default::default()
        },
        blocking,
        idle,
        ..HostConfig::default()
    })
    .expect("the userspace backend always starts");
    let stop = std::sync::atomic::AtomicBool::new(false);
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    profiler.run(&stop, Some(until), |_| {});
    let mut windows = profiler.cut().into_iter().map(|(_, w)| w);
    let window = windows.next().expect("the target was sampled");
    let stacks = window
        .counts
        .keys()
        .map(|k| k.frames.iter().map(|f| f.function().to_string()).collect())
        .collect();
    (stacks, window.total_samples(), profiler.unwind_stats())
}

/// The cache's own guarantee (gh-151613): between samples the target reuses frame addresses
/// for the other chain, and no sample splices a cached parent under the wrong leaf. The reads
/// of each sample are made with the thread stopped (`--blocking`), so what is tested is the
/// cache, not the torn copies any non-blocking reader of a running thread can make (README).
#[test]
fn alternating_chains_never_mix() {
    let p = PythonProcess::ready("py315", "alternate.py", &[]);
    let (stacks, total, stats) = record_stacks(p.pid(), true, 3.0, true, true);
    assert!(total > 500, "enough samples: {total}");
    assert!(
        stats.cache_full_hits + stats.cache_partial_hits > 0,
        "the cache was used: {stats:?}"
    );
    for s in &stacks {
        let names: Vec<&str> = s.iter().map(|x| x.as_str()).collect();
        let ok = matches!(
            names.as_slice(),
            ["<module>"]
                | ["a_parent", "<module>"]
                | ["b_parent", "<module>"]
                | ["a_leaf", "a_parent", "<module>"]
                | ["b_leaf", "b_parent", "<module>"]
        );
        assert!(
            ok,
            "impossible stack {names:?} (all: {stacks:?}, {stats:?})"
        );
    }
}

#[test]
fn same_stacks_with_and_without_cache() {
    let p = PythonProcess::ready("py315", "recursion.py", &["200"]);
    // Wait for the parked state, then compare: one exact stack either way.
    let top = at("recurse", "recursion.py", "sleep");
    let mut u = unwinder(p.pid(), UnwindOptions::default());
    sample_until(&mut u, Duration::from_secs(10), |s| {
        s.iter().any(|t| simple(t).first() == Some(&top))
    });
    let (with_cache, n1, stats) = record_stacks(p.pid(), true, 0.5, true, false);
    let (without, n2, _) = record_stacks(p.pid(), false, 0.5, true, false);
    assert!(n1 > 50 && n2 > 50, "{n1} {n2}");
    assert_eq!(with_cache, without);
    assert_eq!(with_cache.len(), 1);
    assert_eq!(with_cache.iter().next().map(|s| s.len()), Some(202));
    assert!(stats.cache_full_hits > 0, "{stats:?}");
}

#[test]
fn stale_anchor_from_earlier_profiler_costs_nothing() {
    // A first unwinder leaves anchors behind; a second one, built later, must still report the
    // full stack (the stale-anchor fix) and so must one with the cache off.
    let p = PythonProcess::ready("py315", "nested.py", &[]);
    let top = at("Shop.checkout", "nested.py", "checkout");
    let mut first = unwinder(p.pid(), UnwindOptions::default());
    let a = sample_until(&mut first, Duration::from_secs(10), |s| {
        s.iter().any(|t| simple(t).first() == Some(&top))
    });
    drop(first);
    let mut second = unwinder(p.pid(), UnwindOptions::default());
    let b = second.sample().expect("sample");
    let mut third = unwinder(
        p.pid(),
        UnwindOptions {
            frame_cache: false,
            ..Default::default()
        },
    );
    let c = third.sample().expect("sample");
    assert_eq!(simple(&a[0]), simple(&b[0]));
    assert_eq!(simple(&b[0]), simple(&c[0]));
    assert_eq!(simple(&a[0]).len(), 4);
}
