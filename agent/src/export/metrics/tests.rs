//! Metrics tests: the exposition text, the service cap, BPF increments, and the dashboard's queries.

use std::process::{Command, Stdio};

use super::*;
use crate::discovery::service_name::ProcessRole;
use crate::unwind::RecordLoss;

/// The series of a lone process of `service` on CPython 3.12.3.
fn lone(service: &str) -> ServiceSeries {
    ServiceSeries {
        service: service.to_string(),
        python_version: "3.12.3".to_string(),
        role: None,
    }
}

/// Metrics with at least one series in every family.
pub(crate) fn busy_metrics() -> AgentMetrics {
    let metrics = AgentMetrics::new();
    metrics.add_samples(&lone("web"), 100, 40);
    metrics.add_samples(&lone("worker"), 7, 0);
    metrics.add_window(&lone("web"), &one_second_window());
    metrics.add_lost(LossReason::Record(RecordLoss::TornRead), 3);
    metrics.set_bpf(Some((12_345_678, 200)), 1);
    metrics.add_cache("page", 90, 10);
    metrics.add_cache("frame", 50, 5);
    metrics.add_cache("code", 500, 2);
    metrics.set_process_states(&[(ProcessState::Ready, 2), (ProcessState::NotPython, 120)]);
    metrics.set_service_threads(&[(&lone("web"), 8), (&lone("worker"), 1)]);
    metrics.set_python_info(&[("web", "3.12.3"), ("worker", "3.11.9")]);
    let sink = metrics.sink("pyroscope");
    sink.submitted();
    sink.failure(FailureReason::Timeout, Duration::from_secs(1));
    sink.retry();
    sink.success(2048, Duration::from_millis(30));
    sink.spill();
    sink.drop_profile(DropReason::QueueFull);
    sink.set_queue_length(3);
    let directory = metrics.sink("directory");
    directory.success(2048, Duration::from_millis(2));
    directory.evicted(EvictReason::Size, 2);
    metrics
}

/// Every query of `deploy/grafana-dashboard.json` parses (`promtool check rules` on them as recording
/// rules) and names only metrics the agent exports.
#[test]
fn dashboard_queries_parse_and_use_exported_metrics() {
    let dashboard: serde_json::Value =
        serde_json::from_str(include_str!("../../../../deploy/grafana-dashboard.json"))
            .expect("the dashboard is JSON");
    let exprs: Vec<String> = dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .flat_map(|panel| panel["targets"].as_array().cloned().unwrap_or_default())
        .map(|target| target["expr"].as_str().expect("expr").to_owned())
        .collect();
    assert!(exprs.len() >= 15, "{} queries", exprs.len());

    let exported = busy_metrics().encode();
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, expr) in exprs.iter().enumerate() {
        for name in expr
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|word| word.starts_with("pyagent_") || word.starts_with("process_"))
        {
            assert!(
                exported.contains(&format!("\n{name}")),
                "the dashboard queries {name}, which the agent does not export"
            );
        }
        // Grafana's variables, as Prometheus would see them after substitution.
        let expr = expr
            .replace("$__rate_interval", "5m")
            .replace("$job", ".*")
            .replace("$instance", ".*");
        rules.push_str(&format!(
            "      - record: dashboard:q{i}\n        expr: {}\n",
            serde_json::to_string(&expr).expect("JSON string")
        ));
    }
    let dir = std::env::temp_dir().join(format!("pyagent-dash-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("rules.yml");
    std::fs::write(&file, &rules).expect("write rules");
    let output = Command::new("promtool")
        .args(["check", "rules"])
        .arg(&file)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|err| panic!("cannot run promtool ({err}); apt-get install prometheus"));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        output.status.success(),
        "promtool check rules failed:\n{}{}\n{rules}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn services_past_the_cap_fold_into_other() {
    let metrics = AgentMetrics::with_max_services(2);
    metrics.add_samples(&lone("web"), 10, 4);
    metrics.add_samples(&lone("api"), 5, 0);
    metrics.add_samples(&lone("batch"), 7, 7);
    metrics.add_samples(&lone("cron"), 1, 0);
    metrics.add_samples(&lone("web"), 1, 1);
    assert_eq!(metrics.samples(), 24);
    assert_eq!(metrics.services().len(), 2);
    let text = metrics.encode();
    assert!(
        text.contains("pyagent_service_samples_total{process_role=\"\",python_version=\"3.12.3\",service=\"web\"} 11"),
        "{text}"
    );
    assert!(
        text.contains("pyagent_service_samples_total{process_role=\"\",python_version=\"3.12.3\",service=\"other\"} 8"),
        "{text}"
    );
    assert!(
        text.contains("pyagent_service_gil_samples_total{process_role=\"\",python_version=\"3.12.3\",service=\"other\"} 7"),
        "{text}"
    );
    assert!(!text.contains("batch"), "{text}");

    metrics.set_service_threads(&[(&lone("web"), 3), (&lone("batch"), 2), (&lone("cron"), 1)]);
    metrics.set_python_info(&[("web", "3.12.3"), ("cron", "3.11.9")]);
    let text = metrics.encode();
    assert!(
        text.contains("pyagent_service_threads{process_role=\"\",python_version=\"3.12.3\",service=\"other\"} 3"),
        "{text}"
    );
    assert!(
        text.contains("pyagent_python_info{service=\"other\",version=\"3.11.9\"} 1"),
        "{text}"
    );
    // A service that went away loses its gauge.
    metrics.set_service_threads(&[(&lone("api"), 1)]);
    let text = metrics.encode();
    assert!(
        !text.contains(
            "pyagent_service_threads{process_role=\"\",python_version=\"3.12.3\",service=\"web\"}"
        ),
        "{text}"
    );
}

/// Processes of one service on several interpreters, or a master and its workers, have
/// series of their own: their samples are not summed into one.
#[test]
fn versions_and_roles_have_series_of_their_own() {
    let metrics = AgentMetrics::new();
    let of = |version: &str, role| ServiceSeries {
        python_version: version.to_string(),
        role,
        ..lone("web")
    };
    metrics.add_samples(&of("3.13.0", None), 3, 0);
    metrics.add_samples(&of("3.14.2", None), 4, 0);
    metrics.add_samples(&of("3.14.2", Some(ProcessRole::Master)), 5, 0);
    metrics.add_samples(&of("3.14.2", Some(ProcessRole::Worker)), 6, 0);
    metrics.add_samples(&of("3.14.2", Some(ProcessRole::Worker)), 1, 0);
    let text = metrics.encode();
    for line in [
        r#"pyagent_service_samples_total{process_role="",python_version="3.13.0",service="web"} 3"#,
        r#"pyagent_service_samples_total{process_role="",python_version="3.14.2",service="web"} 4"#,
        r#"pyagent_service_samples_total{process_role="master",python_version="3.14.2",service="web"} 5"#,
        r#"pyagent_service_samples_total{process_role="worker",python_version="3.14.2",service="web"} 7"#,
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in:\n{text}");
    }
}

/// A window of two 1-second samples of a thread holding the GIL and half a second waiting on a
/// lock.
fn one_second_window() -> crate::aggregate::ProfileWindow {
    use crate::aggregate::tests::{frame, sample};
    let mut agg = crate::aggregate::Aggregator::new(1_000_000_000);
    let mut sample = sample(1, 1, None, vec![frame("work", "app.py", 3, 1)]);
    sample.thread.gil = Some(crate::unwind::GilState::Held);
    agg.add_count(&sample, 2);
    agg.add_off_cpu(&sample, crate::aggregate::WaitReason::Lock, 500_000_000);
    agg.cut()
}

/// A window's time goes into the wall-time family by reason, per series.
#[test]
fn wall_time_is_exported_by_reason() {
    let metrics = AgentMetrics::new();
    metrics.add_window(&lone("web"), &one_second_window());
    let text = metrics.encode();
    for line in [
        r#"pyagent_python_wall_seconds_total{process_role="",python_version="3.12.3",reason="cpu_gil_held",service="web"} 2"#,
        r#"pyagent_python_wall_seconds_total{process_role="",python_version="3.12.3",reason="lock",service="web"} 0.5"#,
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in:\n{text}");
    }
}

#[test]
fn bpf_totals_become_increments() {
    let metrics = AgentMetrics::new();
    metrics.set_bpf(Some((1_500_000_000, 10)), 0);
    metrics.set_bpf(Some((2_000_000_000, 15)), 3);
    assert_eq!(metrics.bpf_runs.get(), 15);
    assert_eq!(metrics.ring_drops.get(), 3);
    assert!((metrics.bpf_run_time.get() - 2.0).abs() < 1e-9);
    // The program was reloaded: its counters start again from zero.
    metrics.set_bpf(Some((500_000_000, 2)), 0);
    assert_eq!(metrics.bpf_runs.get(), 17);
    assert!((metrics.bpf_run_time.get() - 2.5).abs() < 1e-9);
}

#[test]
fn process_states_are_all_exported() {
    let metrics = AgentMetrics::new();
    metrics.set_process_states(&[(ProcessState::Ready, 3), (ProcessState::NotPython, 40)]);
    let text = metrics.encode();
    for expected in [
        "pyagent_processes{state=\"ready\"} 3",
        "pyagent_processes{state=\"not_python\"} 40",
        "pyagent_processes{state=\"unsupported\"} 0",
        "pyagent_processes{state=\"failed\"} 0",
    ] {
        assert!(text.contains(expected), "missing {expected}:\n{text}");
    }
}

#[test]
fn sink_counters_are_labelled_per_sink() {
    let metrics = AgentMetrics::new();
    let dir = metrics.sink("directory");
    let remote = metrics.sink("pyroscope");
    remote.failure(FailureReason::Http5xx, Duration::from_millis(3));
    remote.retry();
    remote.success(100, Duration::from_millis(5));
    dir.success(50, Duration::from_millis(1));
    assert_eq!(remote.successes(), 1);
    assert_eq!(remote.failures(FailureReason::Http5xx), 1);
    assert_eq!(remote.attempts(), 2);
    assert_eq!(dir.bytes(), 50);
    let text = metrics.encode();
    assert!(
        text.contains("pyagent_sink_failures_total{reason=\"5xx\",sink=\"pyroscope\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("pyagent_sink_bytes_total{sink=\"directory\"} 50"),
        "{text}"
    );
}
