//! A local HTTP server standing in for Pyroscope: answers from a script, records every request.

use std::collections::VecDeque;
use std::net::{SocketAddr, TcpListener};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

/// How the receiver answers one request.
#[derive(Debug, Clone, Copy)]
pub(super) enum Reply {
    Status(u16),
    /// Read the request, never answer (until the receiver is dropped).
    Hang,
    /// The status the test last set ([`Receiver::set_status`]): a store that goes down and comes back.
    Current,
}

/// One request as the receiver saw it.
#[derive(Debug)]
pub(super) struct Captured {
    pub(super) method: String,
    pub(super) path: String,
    pub(super) query: Vec<(String, String)>,
    pub(super) headers: Vec<(String, String)>,
    pub(super) body: Vec<u8>,
    /// The status the receiver answered with (0: none, the request hangs).
    pub(super) answered: u16,
}

impl Captured {
    pub(super) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }
}

/// A local HTTP server answering from a script, then with `fallback`.
pub(super) struct Receiver {
    addr: SocketAddr,
    server: Arc<tiny_http::Server>,
    requests: mpsc::Receiver<Captured>,
    thread: Option<JoinHandle<()>>,
    current: Arc<std::sync::atomic::AtomicU16>,
}

impl Receiver {
    pub(super) fn start(script: &[Reply], fallback: Reply) -> Receiver {
        let server =
            Arc::new(tiny_http::Server::http("127.0.0.1:0").expect("bind the test receiver"));
        let addr = server
            .server_addr()
            .to_ip()
            .expect("the receiver listens on TCP");
        let (sender, requests) = mpsc::channel();
        let mut script: VecDeque<Reply> = script.iter().copied().collect();
        let current = Arc::new(std::sync::atomic::AtomicU16::new(200));
        let thread = {
            let server = Arc::clone(&server);
            let current = Arc::clone(&current);
            thread::spawn(move || {
                let mut held = Vec::new();
                for mut request in server.incoming_requests() {
                    let mut body = Vec::new();
                    request
                        .as_reader()
                        .read_to_end(&mut body)
                        .expect("read request body");
                    let (path, query) =
                        request.url().split_once('?').unwrap_or((request.url(), ""));
                    let reply = match script.pop_front().unwrap_or(fallback) {
                        Reply::Current => {
                            Reply::Status(current.load(std::sync::atomic::Ordering::SeqCst))
                        }
                        reply => reply,
                    };
                    let captured = Captured {
                        method: request.method().to_string(),
                        path: path.to_owned(),
                        query: parse_query(query),
                        headers: request
                            .headers()
                            .iter()
                            .map(|h| (h.field.to_string(), h.value.to_string()))
                            .collect(),
                        body,
                        answered: match reply {
                            Reply::Status(status) => status,
                            _ => 0,
                        },
                    };
                    let _ = sender.send(captured);
                    match reply {
                        Reply::Status(status) => {
                            let body = if status == 200 { "{}" } else { "store says no" };
                            let _ = request.respond(
                                tiny_http::Response::from_string(body).with_status_code(status),
                            );
                        }
                        Reply::Hang | Reply::Current => held.push(request),
                    }
                }
                drop(held);
            })
        };
        Receiver {
            addr,
            server,
            requests,
            thread: Some(thread),
            current,
        }
    }

    /// The status [`Reply::Current`] answers with from now on.
    pub(super) fn set_status(&self, status: u16) {
        self.current
            .store(status, std::sync::atomic::Ordering::SeqCst);
    }

    pub(super) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The next request, waiting up to 10 s.
    pub(super) fn next(&self) -> Captured {
        self.requests
            .recv_timeout(Duration::from_secs(10))
            .expect("the receiver got no request within 10 s")
    }

    /// Requests received so far and not yet taken.
    pub(super) fn pending(&self) -> usize {
        self.requests.try_iter().count()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Percent-decoding as Go's `url.ParseQuery` does it (`+` is a space).
pub(super) fn parse_query(query: &str) -> Vec<(String, String)> {
    fn decode(text: &str) -> String {
        let bytes = text.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'%' => {
                    let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).expect("ascii escape");
                    out.push(u8::from_str_radix(hex, 16).expect("hex escape"));
                    i += 3;
                }
                b'+' => {
                    out.push(b' ');
                    i += 1;
                }
                b => {
                    out.push(b);
                    i += 1;
                }
            }
        }
        String::from_utf8(out).expect("UTF-8 query")
    }
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(key), decode(value))
        })
        .collect()
}

/// A closed local port: connecting is refused.
pub(super) fn refused_url() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("local addr");
    drop(listener);
    format!("http://{addr}")
}
/// The `from` (window start, Unix seconds) of each request the receiver answered with 200, in order.
pub(super) fn delivered_starts(receiver: &Receiver) -> Vec<u64> {
    receiver
        .requests
        .try_iter()
        .filter(|request| request.answered == 200)
        .map(|request| {
            request
                .query
                .iter()
                .find(|(key, _)| key == "from")
                .and_then(|(_, value)| value.parse().ok())
                .expect("a from parameter")
        })
        .collect()
}
