//! `pyagent --all-python`: the host-wide run, as a service (configuration layers: defaults, file,
//! environment, flags) or for `--duration` (one profile per process written to a directory).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use pyagent::aggregate::ProfileWindow;
use pyagent::config::{Overrides, ServiceConfig, ServiceNameRule};
use pyagent::discovery::host::count_processes;
use pyagent::discovery::privileges::Shortfall;
use pyagent::discovery::service_name::{service_name, ProcessRole};
use pyagent::export;
use pyagent::export::atomic_file::write_atomically;
use pyagent::profiler::{process_roles, HostConfig, HostProfiler, ProcessInfo};

use crate::cli::{debug_dir_flags, FormatArg, FrameArgs, HostArgs, ModeArg};
use crate::{
    host_profiler, install_stop_handlers, privilege_shortfalls, unwind_options, OffCpu, STOP,
};

/// The settings the flags give, as the top configuration layer.
fn flag_layer(args: &HostArgs, log: Option<&str>) -> Result<Overrides> {
    let pyroscope_api = match &args.pyroscope_api {
        Some(api) => Some(
            api.parse()
                .map_err(|e| anyhow::anyhow!("pyroscope_api: {e}"))?,
        ),
        None => None,
    };
    Ok(Overrides {
        interval: args.interval,
        rate_hz: args.rate,
        mode: args.mode.map(Into::into),
        off_cpu: args.off_cpu.then_some(true),
        // With the userspace sampler `--native` keeps meaning `<native>` markers.
        native: (args.frames.native && args.mode != Some(ModeArg::Userspace)).then_some(true),
        debug_dirs: debug_dir_flags(&args.debug_dirs),
        async_tasks: args.frames.async_tasks.then_some(true),
        cpu_budget: args.cpu_budget,
        stall_after: args.stall_after,
        metrics_addr: args.metrics_addr,
        log: log.map(str::to_string),
        output_dir: args.output.clone(),
        pyroscope_url: args.pyroscope_url.clone(),
        pyroscope_api,
        pyroscope_tenant: args.pyroscope_tenant.clone(),
        otlp_endpoint: args.otlp_endpoint.clone(),
        ..Overrides::default()
    })
}

/// The service configuration: file, then environment, then flags.
pub(crate) fn service_config(args: &HostArgs, log: Option<&str>) -> Result<ServiceConfig> {
    if let Some(format) = args.format.filter(|f| *f != FormatArg::Pprof) {
        bail!(
            "-f {}: the service writes pprof (.pb.gz), which Pyroscope takes and the directory's size bound counts; other formats are for --duration runs and record",
            export::Format::from(format)
        );
    }
    Ok(ServiceConfig::load(
        args.config.as_deref(),
        std::env::vars(),
        &flag_layer(args, log)?,
    )?)
}

/// The configuration of an `--all-python --duration` run: the service's layers (flags >
/// `PYAGENT_*` > `--config` file) with the service's validation, over the defaults of a
/// one-off run (99 Hz, off-CPU only when asked). `layers` name no setting only the service
/// uses: with one, the run is the service's ([`service_for`]).
fn duration_config(layers: Overrides) -> Result<(ServiceConfig, PathBuf)> {
    // Checked before the service's validation, whose complaint (no directory and no upload
    // URL) would point at an upload this mode does not make.
    let Some(dir) = layers.output_dir.clone() else {
        bail!("--all-python --duration needs --output DIR (or output.dir in the --config file)");
    };
    let one_off = Overrides {
        rate_hz: Some(99),
        off_cpu: Some(false),
        ..Overrides::default()
    };
    Ok((ServiceConfig::from_overrides(layers.over(one_off))?, dir))
}

/// `--duration` with a setting only the service uses (an upload target, metrics, an interval):
/// the service itself for that long, every sink it would use included, ending as it ends at
/// SIGTERM (the partial interval cut, every profile delivered or spilled to the directory).
fn service_for(args: &HostArgs, duration: Duration, settings: &[&str]) -> Result<()> {
    let config = service_config(args, None)?;
    eprintln!(
        "pyagent: running the service for {:?} ({} given), then stopping as at SIGTERM",
        duration,
        settings.join(", ")
    );
    // The service stops at STOP, which SIGTERM and SIGINT set too; the timer just sets it
    // early. If the service ends first (an error), the process exits with the timer pending.
    std::thread::Builder::new()
        .name("pyagent-duration".into())
        .spawn(move || {
            std::thread::sleep(duration);
            STOP.store(true, Ordering::Relaxed);
        })
        .context("cannot start the --duration timer")?;
    service(&config, &args.frames)
}

pub(crate) fn service(config: &ServiceConfig, frames: &FrameArgs) -> Result<()> {
    install_stop_handlers();
    let report = pyagent::service::run(config, unwind_options(frames), &STOP)?;
    // Whole-run totals first: what was delivered at shutdown alone is a small part of it.
    eprintln!(
        "pyagent: stopped ({} mode): {} profiles, {} written to the directory, {} uploaded; at shutdown {} delivered and {} spilled to disk; {} dropped in all, {} failed writes",
        report.mode,
        report.profiles,
        report.written,
        report.uploaded,
        report.shutdown.delivered,
        report.shutdown.spilled,
        report.dropped,
        report.write_failures
    );
    Ok(())
}

pub(crate) fn all_python(args: &HostArgs) -> Result<()> {
    let duration = args
        .duration
        .expect("service mode is handled by the caller");
    let layers = ServiceConfig::layers(
        args.config.as_deref(),
        std::env::vars(),
        &flag_layer(args, None)?,
    )?;
    let service_settings = layers.service_only_settings();
    if !service_settings.is_empty() {
        return service_for(args, duration, &service_settings);
    }
    if args.off_cpu && args.mode == Some(ModeArg::Userspace) {
        bail!("--off-cpu needs --mode ebpf (the userspace sampler cannot see a thread block; --idle in `record --mode userspace` samples waiting threads instead)");
    }
    let (config, dir) = duration_config(layers)?;
    let dir = dir.as_path();
    let lacks = privilege_shortfalls()?;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let rate = config.rate_hz;
    // `async` may come from the file or the environment too.
    let frames = FrameArgs {
        async_tasks: config.async_tasks,
        ..args.frames
    };
    let host = HostConfig {
        mode: config.mode,
        rate_hz: rate,
        unwind: unwind_options(&frames),
        native_stacks: config.native || args.frames.native,
        debug_dirs: config.debug_dirs.clone(),
        ..HostConfig::default()
    };
    let mut profiler = host_profiler(host, OffCpu::from_config(config.off_cpu, args.off_cpu))?;
    if let Some(why) = profiler.fallback_reason() {
        eprintln!("pyagent: eBPF sampler unavailable ({why}); using the userspace sampler");
    }
    install_stop_handlers();
    // The first scan parses every Python binary on the host: the duration starts after it.
    profiler.scan();
    let denied = profiler.denied_processes();
    let denied_note = denied_note(&denied);
    // Without the privileges, the processes we may not read are likely the Python ones.
    if profiler.pids().is_empty() && !denied.is_empty() && !lacks.is_empty() {
        let why: Vec<String> = lacks.iter().map(Shortfall::brief).collect();
        bail!(
            "no process can be profiled: {} (permission denied: {}); run as root, or grant CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH",
            denied_note,
            why.join(", ")
        );
    }
    let until = std::time::Instant::now() + duration;
    let found = profiler.pids().len();
    // A host with no Python is not an error: one may start within the duration.
    let found_so_far = if found == 0 {
        "no CPython process running yet".to_string()
    } else {
        format!("{found} found so far")
    };
    eprintln!(
        "pyagent: profiling every CPython process ({} mode, {rate} Hz, {found_so_far}{})",
        profiler.mode_name(),
        if denied.is_empty() {
            String::new()
        } else {
            format!("; {denied_note}")
        }
    );
    // Windows of processes that exit during the run are written as soon as they are found gone,
    // so that memory stays bounded by the live processes under churn, not by all of them.
    let mut files = ProfileFiles::new(
        dir,
        args.format.unwrap_or(FormatArg::Pprof).into(),
        &config.service_names,
    );
    profiler.run(&STOP, Some(until), |profiler| {
        let finished = profiler.take_finished();
        files.write_all(profiler, finished);
    });
    let idle = profiler.idle_pids();
    let windows = profiler.cut();
    files.write_all(&profiler, windows);
    let ProfileFiles {
        written, failed, ..
    } = files;
    let s = profiler.stats();
    let states: Vec<String> = profiler
        .process_states()
        .iter()
        .map(|(k, v)| format!("{v} {k}"))
        .collect();
    if written + failed == 0 {
        eprintln!(
            "pyagent: no CPython process found ({} mode; processes: {})",
            profiler.mode_name(),
            states.join(", ")
        );
        return Ok(());
    }
    eprintln!(
        "pyagent: {} mode, wrote {written} profiles to {}, {failed} failed ({} samples, {}; processes: {})",
        profiler.mode_name(),
        dir.display(),
        s.samples,
        s.dropped_summary(),
        states.join(", ")
    );
    if !idle.is_empty() {
        eprintln!(
            "pyagent: {} had no sample (no thread ran Python code on a CPU{}): no file (pid {})",
            count_processes(idle.len()),
            if args.off_cpu { " or waited" } else { "" },
            pid_list(&idle)
        );
    }
    if args.off_cpu {
        if let Some(line) = crate::summary::off_cpu_line(&profiler, None, true) {
            eprintln!("{line}");
        }
    }
    if failed > 0 {
        bail!(
            "{failed} of {} profiles could not be written",
            written + failed
        );
    }
    Ok(())
}

/// "1 process cannot be inspected (pid 1)": the processes whose memory or executable we may
/// not read, the first few by pid.
fn denied_note(denied: &[u32]) -> String {
    format!(
        "{} cannot be inspected (pid {})",
        count_processes(denied.len()),
        pid_list(denied)
    )
}

/// "12, 40, 41, 57, 90, …": the first few pids.
fn pid_list(pids: &[u32]) -> String {
    const SHOWN: usize = 5;
    let mut shown: Vec<String> = pids.iter().take(SHOWN).map(u32::to_string).collect();
    if pids.len() > SHOWN {
        shown.push("…".to_string());
    }
    shown.join(", ")
}

/// The profiles of an `--all-python --duration` run, one file per process. Each file is written
/// atomically (a kill or a full disk leaves no empty or truncated profile), and one failed file
/// does not stop the others.
struct ProfileFiles<'a> {
    dir: &'a Path,
    /// the configuration's service-name rules, as the service applies them
    rules: &'a [ServiceNameRule],
    format: export::Format,
    host: String,
    written: usize,
    failed: usize,
}

impl<'a> ProfileFiles<'a> {
    fn new(dir: &'a Path, format: export::Format, rules: &'a [ServiceNameRule]) -> Self {
        Self {
            dir,
            rules,
            format,
            host: pyagent::service::hostname(),
            written: 0,
            failed: 0,
        }
    }

    /// Writes each window with [`ProfileFiles::write`], its process's role taken from the
    /// processes `profiler` tracks (a master is known by its workers).
    fn write_all(&mut self, profiler: &HostProfiler, windows: Vec<(ProcessInfo, ProfileWindow)>) {
        let roles = process_roles(
            profiler
                .process_infos()
                .chain(windows.iter().map(|(info, _)| info)),
            self.rules,
        );
        for (info, window) in windows {
            let role = roles.get(&info.pid).copied();
            self.write(&info, role, window);
        }
    }

    /// Writes `SERVICE-PID.EXT`, labelled as the service labels its profiles, counting it as
    /// written or failed (and saying why).
    fn write(&mut self, info: &ProcessInfo, role: Option<ProcessRole>, mut window: ProfileWindow) {
        let service = service_name(info.identity(), self.rules);
        window.labels = pyagent::service::process_labels(info, &service, role, &self.host);
        let path = self.dir.join(format!(
            "{}-{}.{}",
            pyagent::export::sinks::file_safe_service(&service),
            info.pid,
            self.format.extension()
        ));
        let format = self.format;
        let fill = |mut out: &mut dyn Write| {
            export::write(format, &window, &mut out).map_err(std::io::Error::other)
        };
        match write_atomically(&path, fill) {
            Ok(_) => self.written += 1,
            Err(err) => {
                self.failed += 1;
                eprintln!("pyagent: cannot write {}: {err}", path.display());
            }
        }
    }
}
