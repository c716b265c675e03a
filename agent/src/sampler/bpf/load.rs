//! Loading the program: its knobs checked and set, maps taken, the perf events attached on every
//! CPU, the off-CPU and exec programs attached where the kernel allows.

use aya::maps::{Array, HashMap, PerCpuArray, RingBuf};
use std::os::fd::AsFd;

use aya::programs::perf_event::PerfEventScope;
use aya::programs::{BtfTracePoint, PerfEvent, RawTracePoint};
use aya::sys::{enable_stats, Stats};
use aya::{Btf, Ebpf, EbpfLoader};
use common::{MAX_FRAMES, PROC_SLOTS, THREAD_SLOTS};

use super::clock::ClockEvents;
use super::error::{clock_event_error, load_error, map_error, program_error, BpfError};
use super::kernel::{KernelFacilities, ProgramBuild};
use super::{
    BpfConfig, BpfSampler, EXEC_PROGRAM, EXIT_PROGRAM, FORK_PROGRAM, KNOB_GIL_HOLDER,
    KNOB_MAX_FRAMES, KNOB_OFF_CPU, KNOB_OFF_CPU_MAX_CARRY, KNOB_OFF_CPU_MIN_GAP, KNOB_STOP_AFTER,
    KNOB_THREAD_SEARCH_MAX, KNOB_WAKEUP_BYTES, MAP_COUNTERS, MAP_NOTICES, MAP_OFF_CPU_THREADS,
    MAP_PROCS, MAP_PROC_SLOTS, MAP_SAMPLES, MAP_SCRATCH, MAP_THREADS, MAP_THREAD_LISTS,
    MAP_THREAD_SLOTS, OFF_CPU_PROGRAM, PROGRAM, SAMPLER_OBJ, SAMPLER_PORTABLE_OBJ,
};
use crate::sampler::slots::SlotIndex;

impl BpfSampler {
    /// Loads the build this kernel can run; a default build the verifier refuses is replaced by
    /// the portable one, with the refusal among the kernel notes.
    pub(super) fn load_inner(config: &BpfConfig, attach: bool) -> Result<Self, BpfError> {
        validate(config)?;
        let facilities = KernelFacilities::probe();
        let mut notes = facilities.notes();
        let build = config.build.unwrap_or_else(|| facilities.build());
        match Self::load_build(config, attach, build) {
            Err(e)
                if build == ProgramBuild::Default
                    && config.build.is_none()
                    && e.is_verifier_refusal() =>
            {
                notes.push(format!(
                    "the kernel's verifier refused the default BPF build ({}); using the portable build",
                    e.summary()
                ));
                let mut sampler = Self::load_build(config, attach, ProgramBuild::Portable)?;
                sampler.kernel_notes = notes;
                Ok(sampler)
            }
            Err(e) => Err(e),
            Ok(mut sampler) => {
                sampler.kernel_notes = notes;
                Ok(sampler)
            }
        }
    }

    fn load_build(config: &BpfConfig, attach: bool, build: ProgramBuild) -> Result<Self, BpfError> {
        let object = match build {
            ProgramBuild::Default => SAMPLER_OBJ,
            ProgramBuild::Portable => SAMPLER_PORTABLE_OBJ,
        };
        let nr_cpus =
            aya::util::nr_cpus().map_err(|(path, source)| BpfError::Cpus { path, source })?;
        let nr_cpus =
            u32::try_from(nr_cpus).map_err(|_| BpfError::InvalidConfig("too many CPUs"))?;
        let min_gap_ns = u64::try_from(config.off_cpu_min_gap.as_nanos()).unwrap_or(u64::MAX);
        let max_carry_ns = u64::try_from(config.off_cpu_max_carry.as_nanos()).unwrap_or(u64::MAX);

        let mut ebpf = EbpfLoader::new()
            .override_global(KNOB_MAX_FRAMES, &config.max_frames, true)
            .override_global(KNOB_WAKEUP_BYTES, &config.wakeup_bytes, true)
            .override_global(KNOB_STOP_AFTER, &config.stop_after, true)
            .override_global(KNOB_THREAD_SEARCH_MAX, &config.thread_search_max, true)
            .override_global(KNOB_OFF_CPU, &u32::from(config.off_cpu), true)
            .override_global(KNOB_OFF_CPU_MIN_GAP, &min_gap_ns, true)
            .override_global(KNOB_OFF_CPU_MAX_CARRY, &max_carry_ns, true)
            .override_global(KNOB_GIL_HOLDER, &u32::from(config.gil_holder), true)
            .map_max_entries(MAP_SAMPLES, config.ring_bytes)
            .map_max_entries(MAP_SCRATCH, nr_cpus)
            .map_max_entries(MAP_PROCS, config.max_processes)
            .map_max_entries(MAP_THREADS, config.max_threads)
            .map_max_entries(MAP_THREAD_LISTS, config.max_processes)
            .load(object)
            .map_err(load_error)?;

        let program: &mut PerfEvent = ebpf
            .program_mut(PROGRAM)
            .ok_or(BpfError::Missing("program pa_sample"))?
            .try_into()
            .map_err(|e| program_error("loading the program", e))?;
        // Verification is most of a short `record`'s start-up cost: say what it took.
        let verifying = std::time::Instant::now();
        program
            .load()
            .map_err(|e| program_error("loading the program", e))?;
        log_verified(
            "pa_sample",
            build.name(),
            verifying,
            program.info().ok().as_ref(),
        );

        // Statistics must be on before the first run to count it; optional (CAP_SYS_ADMIN).
        let stats = if config.enable_stats {
            enable_stats(Stats::RunTime).ok()
        } else {
            None
        };

        let mut cpus = Vec::new();
        let mut scopes = Vec::new();
        let mut clock = None;
        if attach {
            cpus = aya::util::online_cpus()
                .map_err(|(path, source)| BpfError::Cpus { path, source })?;
            scopes = match config.only_thread {
                Some(tid) => vec![PerfEventScope::OneProcess {
                    pid: tid,
                    cpu: None,
                }],
                None => cpus
                    .iter()
                    .map(|&cpu| PerfEventScope::AllProcessesOneCpu { cpu })
                    .collect(),
            };
            let fd = program
                .fd()
                .map_err(|e| program_error("attaching the program", e))?
                .as_fd();
            clock = Some(ClockEvents::open(fd, &scopes, config.rate_hz).map_err(|e| {
                clock_event_error(
                    "attaching the program to the cpu-clock events",
                    config.rate_hz,
                    e,
                )
            })?);
        }

        if config.off_cpu {
            attach_off_cpu(&mut ebpf, attach)?;
        }

        // Without them the caller polls /proc as before: worth a warning, not a failure.
        let exec_notices = attach_notices(&mut ebpf, EXEC_PROGRAM, "sched_process_exec", attach)?;
        // The fork program reads the child's tgid where the kernel's BTF says it is: without
        // BTF (no CO-RE relocation) it would read the wrong field and notice nothing.
        let lifetime_notices = exec_notices
            && kernel_btf_present()
            && attach_notices(&mut ebpf, FORK_PROGRAM, "sched_process_fork", attach)?
            && attach_notices(&mut ebpf, EXIT_PROGRAM, "sched_process_exit", attach)?;

        let procs =
            HashMap::try_from(take_map(&mut ebpf, MAP_PROCS)?).map_err(map_error(MAP_PROCS))?;
        let threads =
            HashMap::try_from(take_map(&mut ebpf, MAP_THREADS)?).map_err(map_error(MAP_THREADS))?;
        let thread_lists = HashMap::try_from(take_map(&mut ebpf, MAP_THREAD_LISTS)?)
            .map_err(map_error(MAP_THREAD_LISTS))?;
        let proc_slots = Array::try_from(take_map(&mut ebpf, MAP_PROC_SLOTS)?)
            .map_err(map_error(MAP_PROC_SLOTS))?;
        let thread_slots = Array::try_from(take_map(&mut ebpf, MAP_THREAD_SLOTS)?)
            .map_err(map_error(MAP_THREAD_SLOTS))?;
        let ring =
            RingBuf::try_from(take_map(&mut ebpf, MAP_SAMPLES)?).map_err(map_error(MAP_SAMPLES))?;
        let counters = PerCpuArray::try_from(take_map(&mut ebpf, MAP_COUNTERS)?)
            .map_err(map_error(MAP_COUNTERS))?;
        let notices =
            HashMap::try_from(take_map(&mut ebpf, MAP_NOTICES)?).map_err(map_error(MAP_NOTICES))?;
        let off_cpu_threads = HashMap::try_from(take_map(&mut ebpf, MAP_OFF_CPU_THREADS)?)
            .map_err(map_error(MAP_OFF_CPU_THREADS))?;
        let ring_wakeups = super::ring_wakeups(&ring);
        Ok(BpfSampler {
            procs,
            threads,
            thread_lists,
            proc_slots,
            thread_slots,
            proc_index: SlotIndex::new(PROC_SLOTS),
            thread_index: SlotIndex::new(THREAD_SLOTS),
            ring,
            ring_wakeups,
            counters,
            notices,
            off_cpu_threads,
            exec_notices,
            lifetime_notices,
            notices_taken: 0,
            ebpf,
            stats,
            cpus,
            scopes,
            clock,
            rate_hz: config.rate_hz,
            malformed: 0,
            build,
            kernel_notes: Vec::new(),
        })
    }
}

/// Loads the notice program `name` and attaches it to raw tracepoint `tracepoint`; whether it
/// is attached (a kernel that refuses it is logged, not an error: the caller lists /proc).
fn attach_notices(
    ebpf: &mut Ebpf,
    name: &'static str,
    tracepoint: &str,
    attach: bool,
) -> Result<bool, BpfError> {
    let during = || format!("loading the {tracepoint} notice program");
    let program: &mut RawTracePoint = ebpf
        .program_mut(name)
        .ok_or(BpfError::Missing(name))?
        .try_into()
        .map_err(|e| program_error(&during(), e))?;
    if let Err(e) = program.load() {
        tracing::warn!("no {tracepoint} notices (polling /proc instead): {e}");
        return Ok(false);
    }
    Ok(attach
        && program
            .attach(tracepoint)
            .inspect_err(|e| tracing::warn!("no {tracepoint} notices (polling /proc instead): {e}"))
            .is_ok())
}

/// Whether the kernel publishes its BTF, against which aya relocates the programs' reads of
/// kernel structures (without it they keep the layout they were compiled with).
fn kernel_btf_present() -> bool {
    std::path::Path::new("/sys/kernel/btf/vmlinux").exists()
}

/// Says what verifying `program` took: the time since `started`, and how many instructions
/// the verifier walked (what grows when a change multiplies its paths; 5.10's stops at 1M).
fn log_verified(
    program: &str,
    build: &str,
    started: std::time::Instant,
    info: Option<&aya::programs::ProgramInfo>,
) {
    tracing::debug!(
        took_ms = started.elapsed().as_secs_f64() * 1e3,
        verified_instructions = info.and_then(|i| i.verified_instruction_count()),
        build,
        "{program} loaded"
    );
}

/// Loads the off-CPU program against the kernel's BTF and attaches it to `sched_switch`.
pub(super) fn attach_off_cpu(ebpf: &mut Ebpf, attach: bool) -> Result<(), BpfError> {
    const DURING: &str = "loading the off-CPU program (tp_btf/sched_switch)";
    let btf = Btf::from_sys_fs().map_err(|e| BpfError::OffCpuUnavailable(e.to_string()))?;
    let program: &mut BtfTracePoint = ebpf
        .program_mut(OFF_CPU_PROGRAM)
        .ok_or(BpfError::Missing("program pa_switch"))?
        .try_into()
        .map_err(|e| program_error(DURING, e))?;
    let verifying = std::time::Instant::now();
    program
        .load("sched_switch", &btf)
        .map_err(|e| program_error(DURING, e))?;
    log_verified("pa_switch", "", verifying, program.info().ok().as_ref());
    if attach {
        program
            .attach()
            .map_err(|e| program_error("attaching to sched_switch", e))?;
    }
    Ok(())
}

pub(super) fn validate(config: &BpfConfig) -> Result<(), BpfError> {
    if config.rate_hz == 0 {
        return Err(BpfError::InvalidConfig("rate_hz must be positive"));
    }
    if !config.ring_bytes.is_power_of_two() || config.ring_bytes < 4096 {
        return Err(BpfError::InvalidConfig(
            "ring_bytes must be a power of two of at least 4096",
        ));
    }
    if config.max_frames == 0 || config.max_frames > MAX_FRAMES {
        return Err(BpfError::InvalidConfig("max_frames must be in 1..=1024"));
    }
    if config.max_processes == 0 || config.max_threads == 0 {
        return Err(BpfError::InvalidConfig(
            "max_processes and max_threads must be positive",
        ));
    }
    if config.stop_after > common::STAGE_LAST {
        return Err(BpfError::InvalidConfig("stop_after must name a stage"));
    }
    if config.thread_search_max > MAX_FRAMES {
        return Err(BpfError::InvalidConfig(
            "thread_search_max must be in 0..=1024",
        ));
    }
    Ok(())
}

pub(super) fn take_map(ebpf: &mut Ebpf, name: &'static str) -> Result<aya::maps::Map, BpfError> {
    ebpf.take_map(name).ok_or(BpfError::Missing(name))
}
