//! The service a profiled process belongs to, from its command line, its environment and the
//! operator's rules. Every path that names a process (the service's profile labels, the file names
//! of `--all-python --duration`) asks this module, so a process has one name everywhere.
//!
//! The first of these that applies:
//! 1. `PYAGENT_SERVICE` in the process's environment: set by whoever deployed that process, the
//!    most specific statement there is; then OpenTelemetry's own: `OTEL_SERVICE_NAME`, else
//!    `service.name` in `OTEL_RESOURCE_ATTRIBUTES` (see [`super::process_env`]);
//! 2. the first [`ServiceNameRule`] whose text is in the command line (arguments joined by spaces);
//! 3. `python [options] -m module ...`: the module (`python3 -m gunicorn app:app` is `gunicorn`);
//! 4. `python [options] script ...`: the script's file stem (`python3 /srv/billing/worker.py` is
//!    `worker`, `python3 /usr/bin/celery -A app worker` is `celery`);
//! 5. the executable's name (`python3.12` for `python3 -c ...` or an interactive interpreter,
//!    `gunicorn` for a console script, `uwsgi` for a program embedding Python, the first word of a
//!    title set with `setproctitle`);
//! 6. `pid-<pid>` when the command line is empty (a zombie, or unreadable).

use std::path::Path;

use serde::Deserialize;

pub use super::process_env::SERVICE_ENV;

/// An operator's rule: a process whose command line contains `contains` is the service `name`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceNameRule {
    /// Text to find in the command line (arguments joined by spaces).
    pub contains: String,
    /// The service name to give.
    pub name: String,
}

/// What names a process: its pid, its command line (`/proc/PID/cmdline`, split at NULs) and the
/// names its environment gives, if any.
#[derive(Debug, Clone, Copy)]
pub struct ProcessIdentity<'a> {
    /// Host pid (names a process whose command line is empty).
    pub pid: u32,
    /// Arguments, the executable first.
    pub cmdline: &'a [String],
    /// `PYAGENT_SERVICE` from its environment.
    pub service_env: Option<&'a str>,
    /// OpenTelemetry's service name from its environment.
    pub otel_service: Option<&'a str>,
}

/// The service name of `process`: the rules of the module documentation, in order.
pub fn service_name(process: ProcessIdentity<'_>, rules: &[ServiceNameRule]) -> String {
    let from_env = [process.service_env, process.otel_service];
    if let Some(name) = from_env
        .into_iter()
        .flatten()
        .map(str::trim)
        .find(|n| !n.is_empty())
    {
        return name.to_owned();
    }
    let joined = process.cmdline.join(" ");
    if let Some(rule) = rules.iter().find(|rule| joined.contains(&rule.contains)) {
        return rule.name.trim().to_owned();
    }
    name_from_cmdline(process.cmdline).unwrap_or_else(|| format!("pid-{}", process.pid))
}

/// A process's part in a service of several processes: a pre-forking server (gunicorn, uwsgi,
/// celery prefork, `multiprocessing` with fork) is one service, whose master and workers an
/// operator still wants told apart. Labelled `process_role` on profiles and per-service metrics;
/// a process of neither role (a lone process) has no such label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProcessRole {
    /// Parent of at least one worker.
    Master,
    /// A child of a process running the same program.
    Worker,
}

impl ProcessRole {
    /// The label value: `master` or `worker`.
    pub fn label(self) -> &'static str {
        match self {
            ProcessRole::Master => "master",
            ProcessRole::Worker => "worker",
        }
    }
}

/// The program a command line runs, as the service name names it but without the environment
/// (which a child inherits, so it would make any child of a shell that exported
/// `PYAGENT_SERVICE` look like the shell's worker): the operator's rules, then rules 3 to 5.
fn program(cmdline: &[String], rules: &[ServiceNameRule]) -> Option<String> {
    let joined = cmdline.join(" ");
    if let Some(rule) = rules.iter().find(|rule| joined.contains(&rule.contains)) {
        return Some(rule.name.trim().to_owned());
    }
    name_from_cmdline(cmdline)
}

/// Whether a process running `cmdline` whose parent runs `parent_cmdline` is a worker: both
/// run the same program (gunicorn's, uwsgi's and celery's workers are forked from their master,
/// with its command line or a title naming the same program, `gunicorn: worker [app]` under
/// `gunicorn: master [app]`).
pub fn is_worker(cmdline: &[String], parent_cmdline: &[String], rules: &[ServiceNameRule]) -> bool {
    match (program(cmdline, rules), program(parent_cmdline, rules)) {
        (Some(own), Some(parent)) => own == parent,
        _ => false,
    }
}

/// Rules 3 to 5: the module, the script or the executable; `None` without an executable.
fn name_from_cmdline(cmdline: &[String]) -> Option<String> {
    // A title set by setproctitle replaces argv with one string ("gunicorn: worker [app]").
    let exe = cmdline.first()?.split_whitespace().next()?;
    let exe = Path::new(exe)
        .file_name()
        .and_then(|name| name.to_str())
        .unwrap_or(exe)
        .trim_end_matches(':');
    if exe.is_empty() {
        return None;
    }
    if !exe.starts_with("python") {
        return Some(exe.to_owned());
    }
    let name = match python_target(&cmdline[1..]) {
        PythonTarget::Module(module) if !module.is_empty() => module,
        PythonTarget::Script(script) => Path::new(script)
            .file_stem()
            .and_then(|stem| stem.to_str())
            .filter(|stem| !stem.is_empty())
            .unwrap_or(exe),
        _ => exe,
    };
    Some(name.to_owned())
}

/// What a CPython command line runs.
#[derive(Debug, PartialEq, Eq)]
enum PythonTarget<'a> {
    /// `-m module`
    Module(&'a str),
    /// A script path.
    Script(&'a str),
    /// `-c`, `-` (stdin) or nothing (interactive).
    Other,
}

/// CPython's short options that take a value, either the rest of the argument (`-Wignore`) or the
/// next argument (`-W ignore`): `SHORT_OPTS` of `Python/getopt.c` in 3.11 to 3.15, less `c` and `m`,
/// which end the interpreter's options and are handled apart.
const SHORT_OPTIONS_WITH_VALUE: &[char] = &['W', 'X'];

/// CPython's long options that take the next argument as their value (`Python/getopt.c`).
const LONG_OPTIONS_WITH_VALUE: &[&str] = &["check-hash-based-pycs"];

/// Walks the interpreter's options as `Python/getopt.c` does, up to the first non-option.
fn python_target(args: &[String]) -> PythonTarget<'_> {
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let arg = arg.as_str();
        if arg == "--" {
            return args
                .next()
                .map_or(PythonTarget::Other, |s| PythonTarget::Script(s));
        }
        if arg == "-" {
            return PythonTarget::Other;
        }
        if let Some(long) = arg.strip_prefix("--") {
            if LONG_OPTIONS_WITH_VALUE.contains(&long) {
                args.next();
            }
            continue;
        }
        let Some(flags) = arg.strip_prefix('-') else {
            return PythonTarget::Script(arg);
        };
        // Short options can be grouped (`-uOO`); one taking a value ends the group.
        for (i, flag) in flags.char_indices() {
            let rest = &flags[i + flag.len_utf8()..];
            if flag == 'm' {
                let module = if rest.is_empty() {
                    args.next().map(String::as_str)
                } else {
                    Some(rest)
                };
                return module.map_or(PythonTarget::Other, PythonTarget::Module);
            }
            if flag == 'c' {
                return PythonTarget::Other;
            }
            if SHORT_OPTIONS_WITH_VALUE.contains(&flag) {
                if rest.is_empty() {
                    args.next();
                }
                break;
            }
        }
    }
    PythonTarget::Other
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One row: the command line, `PYAGENT_SERVICE` (if set), and the name expected.
    type Row = (&'static [&'static str], Option<&'static str>, &'static str);

    /// Command lines → names. The rule set below names `-A tasks` processes `billing-worker`.
    // One row a line: the table reads as a table.
    #[rustfmt::skip]
    const CASES: &[Row] = &[
        (&["python", "x.py"], None, "x"),
        // -W and -X take a value: "ignore" and "dev" are not scripts.
        (&["python", "-W", "ignore", "x.py"], None, "x"),
        (&["python", "-X", "dev", "-m", "pkg.mod"], None, "pkg.mod"),
        (&["python", "-m", "module"], None, "module"),
        (&["python", "-c", "import time; time.sleep(9)"], None, "python"),
        (&["python", "-u", "script.py", "arg"], None, "script"),
        (&["/usr/bin/python3.12", "/srv/app/manage.py", "runserver"], None, "manage"),
        (&["gunicorn", "app:app"], None, "gunicorn"),
        // The target's own PYAGENT_SERVICE wins over everything, a rule included.
        (&["python3", "x.py"], Some(" billing "), "billing"),
        (&["python3", "-m", "celery", "-A", "tasks", "worker"], Some("billing"), "billing"),
        // An empty PYAGENT_SERVICE is not a name.
        (&["python3", "x.py"], Some(" "), "x"),
        // The operator's rule wins over the command line.
        (&["python3", "-m", "celery", "-A", "tasks", "worker"], None, "billing-worker"),
        // Options as CPython parses them.
        (&["python3", "-m", "gunicorn", "app:app"], None, "gunicorn"),
        (&["/usr/bin/python3.12", "-u", "-mhttp.server", "8000"], None, "http.server"),
        (&["python3", "-X", "dev", "-W", "error", "-OO", "/srv/billing/worker.py"], None, "worker"),
        (&["python3", "-Wignore", "-Xfrozen_modules=off", "app.py"], None, "app"),
        (&["python3", "-uW", "ignore", "app.py"], None, "app"),
        (&["python3", "-I", "-m", "celery", "worker"], None, "celery"),
        (&["/usr/bin/python3", "/usr/local/bin/celery", "-A", "app"], None, "celery"),
        (&["python3", "--check-hash-based-pycs", "never", "run.py"], None, "run"),
        (&["python3", "--help-all"], None, "python3"),
        (&["python3", "--", "-odd-name.py"], None, "-odd-name"),
        (&["python3", "-m"], None, "python3"),
        (&["python3.13t"], None, "python3.13t"),
        (&["python3", "-"], None, "python3"),
        (&["/opt/venv/bin/python", "-uc", "print(1)"], None, "python"),
        (&["python3", "/srv/app/"], None, "app"),
        // Not Python's command line: the executable.
        (&["uwsgi", "--ini", "app.ini"], None, "uwsgi"),
        (&["gunicorn: worker [app]"], None, "gunicorn"),
        // Nothing to go on: the pid.
        (&[], None, "pid-7"),
        (&[""], None, "pid-7"),
    ];

    #[test]
    fn opentelemetry_names_come_after_pyagent_service_and_before_the_rules() {
        let cmdline: Vec<String> = ["python3", "-m", "celery", "-A", "tasks", "worker"]
            .iter()
            .map(|a| a.to_string())
            .collect();
        let rules = [ServiceNameRule {
            contains: "-A tasks".into(),
            name: "billing-worker".into(),
        }];
        let named = |service_env, otel_service| {
            service_name(
                ProcessIdentity {
                    pid: 7,
                    cmdline: &cmdline,
                    service_env,
                    otel_service,
                },
                &rules,
            )
        };
        assert_eq!(named(Some("billing"), Some("checkout")), "billing");
        assert_eq!(named(None, Some("checkout")), "checkout");
        assert_eq!(named(Some(" "), Some("checkout")), "checkout");
        assert_eq!(named(None, None), "billing-worker");
    }

    #[test]
    fn a_child_running_the_parents_program_is_a_worker() {
        let args = |a: &[&str]| a.iter().map(|a| a.to_string()).collect::<Vec<_>>();
        let rules = [ServiceNameRule {
            contains: "-A tasks".into(),
            name: "billing-worker".into(),
        }];
        let gunicorn = args(&["/srv/venv/bin/python3", "/srv/venv/bin/gunicorn", "app:app"]);
        assert!(is_worker(&gunicorn, &gunicorn, &rules));
        // setproctitle's titles name the same program.
        let titled = args(&["gunicorn: worker [app]"]);
        assert!(is_worker(
            &titled,
            &args(&["gunicorn: master [app]"]),
            &rules
        ));
        // A rule names both alike.
        let celery = args(&["python3", "-m", "celery", "-A", "tasks", "worker"]);
        assert!(is_worker(&celery, &celery, &rules));
        // A script started by a shell, or by another script, is no worker.
        assert!(!is_worker(&gunicorn, &args(&["-bash"]), &rules));
        assert!(!is_worker(
            &args(&["python3", "busy.py"]),
            &args(&["python3", "parent.py"]),
            &rules
        ));
        // A parent whose command line is gone says nothing.
        assert!(!is_worker(&gunicorn, &[], &rules));
    }

    #[test]
    fn command_lines_to_names() {
        let rules = [ServiceNameRule {
            contains: "-A tasks".into(),
            name: "billing-worker".into(),
        }];
        for &(args, service_env, expected) in CASES {
            let cmdline: Vec<String> = args.iter().map(|a| a.to_string()).collect();
            let process = ProcessIdentity {
                pid: 7,
                cmdline: &cmdline,
                service_env,
                otel_service: None,
            };
            assert_eq!(
                service_name(process, &rules),
                expected,
                "{args:?} with PYAGENT_SERVICE={service_env:?}"
            );
        }
    }
}
