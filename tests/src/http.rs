//! The tests' HTTP client: ureq, as the agent's own Pyroscope sink uses it.

use std::time::Duration;

/// How long one request may take, connection included.
const TIMEOUT: Duration = Duration::from_secs(10);

/// GET `path` from `127.0.0.1:port`: the status and the body, whatever the status; `None` while
/// nothing answers there (not listening yet, or the request failed).
pub fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(TIMEOUT))
        .http_status_as_error(false)
        .build()
        .into();
    let mut response = agent
        .get(format!("http://127.0.0.1:{port}{path}"))
        .call()
        .ok()?;
    let status = response.status().as_u16();
    let body = response.body_mut().read_to_string().ok()?;
    Some((status, body))
}

/// A free loopback port (bound, then released for a child process to take).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free loopback port")
        .port()
}
