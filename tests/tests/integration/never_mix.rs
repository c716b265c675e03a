//! Chains that differ only inside generators, coroutines (`await` chains) and recursion never
//! come out mixed: the pitfalls CPython's own frame cache met (updates missed in generators and
//! coroutines, gh-151436; frame addresses reused, gh-151613). Each target runs two chains, `a_`
//! and `b_`, over the same frame addresses; every sampler, with the 3.15 frame cache on and off,
//! must report only stacks that are a part of one chain, and the same whole chains as a
//! recording that stops the thread for each read (`--blocking`), the ground truth.

use std::collections::BTreeSet;

use pyagent_tests::agent::{host_wide_lock, number_before, pyagent_bin, record_collapsed_default};
use pyagent_tests::scratch::fresh_dir;
use pyagent_tests::{Interpreter, PythonProcess};
use rstest::rstest;

/// A stack reduced to the frames that tell the chains apart, root first.
type Signature = Vec<String>;

/// How a recording reads the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reader {
    /// the userspace sampler, stopping each thread while it reads it
    Blocking,
    /// the userspace sampler reading the running thread, as it does by default: a walk the
    /// thread moved under keeps only its proven frames, under `[stack moved while read]`. The
    /// defect: it kept such walks whole, and on these targets up to half of its stacks were
    /// torn copies of two moments.
    Userspace,
    /// the userspace sampler reading the running thread, keeping only stacks read whole in one
    /// instant (`--verified-stacks-only`)
    VerifiedOnly,
    /// the BPF program on cpu-clock events
    Ebpf,
    /// `record` with no sampler named: eBPF here
    Default,
}
/// One target and the whole chains it runs.
struct Target {
    script: &'static str,
    /// every whole chain's signature
    chains: Vec<Signature>,
}

impl Target {
    fn generator() -> Target {
        Target {
            script: "mix_generator.py",
            chains: sigs(&[
                "a_drive shared a_work",
                "b_drive shared b_work",
                "a_fresh a_gen a_work",
                "b_fresh b_gen b_work",
            ]),
        }
    }

    fn coroutine() -> Target {
        Target {
            script: "mix_coroutine.py",
            chains: sigs(&["a_outer a_mid a_leaf", "b_outer b_mid b_leaf"]),
        }
    }

    fn recursion() -> Target {
        Target {
            script: "mix_recursion.py",
            chains: sigs(&[
                "down down down down a_leaf",
                "down down down down down down b_leaf",
            ]),
        }
    }

    /// Whether `sig` is a part of one chain (a chain's frames from its root down).
    fn possible(&self, sig: &Signature) -> bool {
        self.chains.iter().any(|c| c.starts_with(sig))
    }
}

fn sigs(chains: &[&str]) -> Vec<Signature> {
    chains
        .iter()
        .map(|c| c.split(' ').map(str::to_string).collect())
        .collect()
}

/// The frames of a collapsed line that tell the chains apart (their functions start `a_` or
/// `b_`, or are the shared `shared` and `down`), root first.
fn signature(line: &str) -> Signature {
    // `<moving>` and the other pseudo-frames do not start `a_` or `b_`: left out below.
    let (stack, _count) = line
        .rsplit_once(' ')
        .expect("collapsed line ends in a count");
    stack
        .split(';')
        .map(|f| f.split(" (").next().unwrap_or(f))
        .filter(|name| {
            name.starts_with("a_") || name.starts_with("b_") || ["shared", "down"].contains(name)
        })
        .map(str::to_string)
        .collect()
}

/// Records `reader`'s profile of `p` and checks every stack is a part of one chain; returns
/// the whole chains seen.
fn record_checked(
    p: &PythonProcess,
    target: &Target,
    reader: Reader,
    frame_cache: bool,
) -> BTreeSet<Signature> {
    let what = format!("{} {reader:?} frame cache {frame_cache}", target.script);
    let dir = fresh_dir(&format!(
        "never-mix-{}-{reader:?}-{frame_cache}",
        target.script.trim_end_matches(".py")
    ));
    let mut args = vec!["-d", "2", "-r", "499"];
    match reader {
        Reader::Blocking => args.extend(["--blocking", "--mode", "userspace"]),
        Reader::Userspace => args.extend(["--mode", "userspace"]),
        Reader::VerifiedOnly => args.extend(["--verified-stacks-only", "--mode", "userspace"]),
        Reader::Ebpf => args.extend(["--mode", "ebpf"]),
        Reader::Default => {}
    }
    if !frame_cache {
        args.push("--no-frame-cache");
    }
    let (text, err) = record_collapsed_default(p.pid(), &args, &dir.join("stacks.txt"));
    if reader == Reader::Default {
        assert!(
            err.starts_with("pyagent: eBPF sampler"),
            "{what}: the default reads with eBPF where it loads, and says so first: {err}"
        );
    }
    let samples = number_before(&err, " samples,");
    // Verified stacks of chains that change every few microseconds are rare when the target
    // has a CPU to itself: that reader holds out for them (its purpose), so it gets fewer.
    // A blocking recording stops the target at each read: beside other tests on two CPUs it
    // gets about a third of its ticks, still every chain many times over.
    let least = match reader {
        Reader::VerifiedOnly => 20,
        Reader::Blocking => 100,
        Reader::Userspace | Reader::Ebpf | Reader::Default => 200,
    };
    assert!(samples >= least, "{what}: too few samples: {err}");
    let mut whole = BTreeSet::new();
    for line in text.lines() {
        let sig = signature(line);
        assert!(
            target.possible(&sig),
            "{what}: a stack that never happened, {sig:?}, in:\n{text}\n{err}"
        );
        if target.chains.contains(&sig) {
            whole.insert(sig);
        }
    }
    whole
}

/// Every reader that vouches for its stacks (eBPF, the userspace sampler's verified stacks),
/// with the frame cache on and off where it applies (3.15), reports parts of the target's
/// chains only. eBPF sees exactly the whole chains a blocking recording saw, each one of them;
/// the verified stacks, fewer, only chains it saw.
fn never_mix(py: &str, target: Target) {
    pyagent_bin(); // built before any target starts: a slow build must not outlive it
    let p = PythonProcess::ready(py, target.script, &[]);
    let expected: BTreeSet<Signature> = target.chains.iter().cloned().collect();
    let truth = record_checked(&p, &target, Reader::Blocking, false);
    assert_eq!(
        truth, expected,
        "{py} {}: the blocking recording",
        target.script
    );
    let caches: &[bool] = if Interpreter::by_name(py).role().frame_cache() {
        &[true, false]
    } else {
        &[true]
    };
    {
        let _serial = host_wide_lock();
        let seen = record_checked(&p, &target, Reader::Default, true);
        assert_eq!(seen, truth, "{py} {} default", target.script);
    }
    for &cache in caches {
        {
            let _serial = host_wide_lock();
            let seen = record_checked(&p, &target, Reader::Ebpf, cache);
            assert_eq!(seen, truth, "{py} {} eBPF, cache {cache}", target.script);
        }
        // Torn walks keep their proven root: the whole chains it names are real ones.
        let seen = record_checked(&p, &target, Reader::Userspace, cache);
        assert!(
            seen.is_subset(&truth),
            "{py} {} userspace, cache {cache}: {seen:?}",
            target.script
        );
        // Its stacks are few (see `record_checked`): the chains it saw are real ones, not
        // necessarily all of them.
        let seen = record_checked(&p, &target, Reader::VerifiedOnly, cache);
        assert!(
            seen.is_subset(&truth),
            "{py} {} verified only, cache {cache}: {seen:?}",
            target.script
        );
    }
}

#[rstest]
fn generator_chains_never_mix(
    #[values("py39", "py310", "py311", "py312", "py314", "py315", "py313t")] py: &str,
) {
    never_mix(py, Target::generator());
}

#[rstest]
fn coroutine_chains_never_mix(#[values("py310", "py314", "py315", "py313t")] py: &str) {
    never_mix(py, Target::coroutine());
}

#[rstest]
fn recursion_never_mixes_depths(#[values("py39", "py314", "py315", "py313t")] py: &str) {
    never_mix(py, Target::recursion());
}
