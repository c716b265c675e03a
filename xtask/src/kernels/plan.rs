//! What runs on each kernel: the features (the table's columns) and, for each, the existing
//! tests that show it works, named by test binary and exact libtest name.

use std::fmt;

/// A column of the table: one kernel facility pyagent depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Feature {
    /// The BPF sampler passes the verifier and attaches.
    Load,
    /// Records from the cpu-clock perf event name the function the target spends its time in.
    CpuClock,
    /// The off-CPU program (`tp_btf/sched_switch`) times waits and labels them with their reason.
    OffCpu,
    /// The program's copy of the user stack unwinds into native frames under the Python caller.
    Native,
    /// 3.15's frame cache: the walks stop at the anchor and chains never mix.
    FrameCache315,
}

impl Feature {
    /// Every feature, in column order.
    pub const ALL: [Feature; 5] = [
        Feature::Load,
        Feature::CpuClock,
        Feature::OffCpu,
        Feature::Native,
        Feature::FrameCache315,
    ];

    /// The column heading, also what `--feature` takes.
    pub fn name(self) -> &'static str {
        match self {
            Feature::Load => "load",
            Feature::CpuClock => "cpu-clock",
            Feature::OffCpu => "off-cpu",
            Feature::Native => "native",
            Feature::FrameCache315 => "frame cache 3.15",
        }
    }

    /// `--feature NAME`: a column heading, with hyphens for its spaces if wished
    /// (`frame-cache-3.15`).
    pub fn parse(text: &str) -> Result<Feature, String> {
        let wanted = text.trim().replace(' ', "-");
        Feature::ALL
            .into_iter()
            .find(|f| f.name().replace(' ', "-") == wanted)
            .ok_or_else(|| {
                let names: Vec<&str> = Feature::ALL.iter().map(|f| f.name()).collect();
                format!(
                    "no feature {text:?}; the features are: {}",
                    names.join(", ")
                )
            })
    }
}

impl fmt::Display for Feature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A test executable of the workspace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Binary {
    /// `agent/tests/bpf.rs`: the BPF sampler against fake frame chains, no Python needed.
    Bpf,
    /// `tests/tests/integration.rs`: the `pyagent` binary against the interpreter matrix.
    Integration,
}

impl Binary {
    /// The test target's name, as cargo reports it.
    pub fn target(self) -> &'static str {
        match self {
            Binary::Bpf => "bpf",
            Binary::Integration => "integration",
        }
    }

    /// The package directory, relative to the workspace: cargo runs a test binary there.
    pub fn package_dir(self) -> &'static str {
        match self {
            Binary::Bpf => "agent",
            Binary::Integration => "tests",
        }
    }
}

/// One test run for a feature.
#[derive(Clone, Copy, Debug)]
pub struct Check {
    pub feature: Feature,
    pub binary: Binary,
    /// The exact libtest name (`--exact`).
    pub name: &'static str,
    /// What sets it apart from the feature's other checks (the interpreter), for log names.
    pub variant: &'static str,
}

impl Check {
    /// `off-cpu py312`, for messages.
    pub fn label(&self) -> String {
        match self.variant {
            "" => self.feature.name().to_owned(),
            variant => format!("{} {variant}", self.feature),
        }
    }

    /// The name of this check's log file: its place in the plan and its label.
    pub fn log_name(&self, index: usize) -> String {
        let slug: String = self
            .label()
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        format!("{index:02}-{slug}.log")
    }
}

const fn check(
    feature: Feature,
    binary: Binary,
    name: &'static str,
    variant: &'static str,
) -> Check {
    Check {
        feature,
        binary,
        name,
        variant,
    }
}

/// Every check, in the order they run. One interpreter before the frame cache existed (3.7,
/// whose frame objects the program reads by themselves, or 3.12, as the test's roles have it) and
/// one with it (3.15) where a test is parameterised, to keep a guest's run short. The names are the integration tests' own: the plan's unit test
/// below cannot see them, `cargo xtask kernels` fails on a name that runs no test.
pub const CHECKS: &[Check] = &[
    // Loads the program with every knob (frame bounds, wake-up sizes, early stops), then
    // attaches it to each CPU's cpu-clock event.
    check(
        Feature::Load,
        Binary::Bpf,
        "verifier_accepts_every_knob",
        "",
    ),
    // `spin`, the named threads' function, must carry samples walked by BPF.
    check(
        Feature::CpuClock,
        Binary::Integration,
        "ebpf::ebpf_samples_carry_python_thread_names::py_1___py36__",
        "py36",
    ),
    check(
        Feature::CpuClock,
        Binary::Integration,
        "ebpf::ebpf_samples_carry_python_thread_names::py_2___py315__",
        "py315",
    ),
    check(
        Feature::OffCpu,
        Binary::Integration,
        "off_cpu::off_cpu_waits_show_under_their_function_with_their_reason::py_1___py36__",
        "py36",
    ),
    check(
        Feature::OffCpu,
        Binary::Integration,
        "off_cpu::off_cpu_waits_show_under_their_function_with_their_reason::py_5___py315__",
        "py315",
    ),
    check(
        Feature::Native,
        Binary::Integration,
        "native_stacks::native_frames_sit_between_and_above_the_python_ones::py_09___py312__::mode_1___ebpf__",
        "py312",
    ),
    check(
        Feature::Native,
        Binary::Integration,
        "native_stacks::native_frames_sit_between_and_above_the_python_ones::py_14___py315__::mode_1___ebpf__",
        "py315",
    ),
    check(
        Feature::FrameCache315,
        Binary::Integration,
        "ebpf::ebpf_frame_cache_never_mixes_chains",
        "",
    ),
];

/// The checks of `features` (all of them when empty), in plan order.
pub fn select(features: &[Feature]) -> Vec<Check> {
    CHECKS
        .iter()
        .filter(|c| features.is_empty() || features.contains(&c.feature))
        .copied()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feature_names_parse_back_with_spaces_or_hyphens() {
        for feature in Feature::ALL {
            assert_eq!(Feature::parse(feature.name()), Ok(feature));
        }
        assert_eq!(
            Feature::parse("frame-cache-3.15"),
            Ok(Feature::FrameCache315)
        );
        let err = Feature::parse("gpu").unwrap_err();
        assert!(err.contains("load, cpu-clock"), "{err}");
    }

    #[test]
    fn every_feature_has_a_check_and_log_names_are_distinct() {
        for feature in Feature::ALL {
            assert!(CHECKS.iter().any(|c| c.feature == feature), "{feature}");
        }
        let mut names: Vec<String> = CHECKS
            .iter()
            .enumerate()
            .map(|(i, c)| c.log_name(i))
            .collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), CHECKS.len());
        assert_eq!(CHECKS[3].log_name(3), "03-off-cpu-py36.log");
    }

    #[test]
    fn select_keeps_plan_order() {
        let picked = select(&[Feature::FrameCache315, Feature::Load]);
        let features: Vec<Feature> = picked.iter().map(|c| c.feature).collect();
        assert_eq!(features, [Feature::Load, Feature::FrameCache315]);
        assert_eq!(select(&[]).len(), CHECKS.len());
    }
}
