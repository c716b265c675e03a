//! Waiting on a condition with a deadline, by looking at it again every 100 ms.

use std::time::{Duration, Instant};

/// How long to wait before looking at a condition again.
const POLL: Duration = Duration::from_millis(100);

/// The first `Some` that `cond` gives within `timeout`; `None` once the time is up.
pub fn poll_until<T>(timeout: Duration, mut cond: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = cond() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(POLL);
    }
}

/// The first `Some` that `cond` gives within `timeout`.
///
/// # Panics
/// When the time is up first, naming `what` was waited for.
pub fn wait_for<T>(what: &str, timeout: Duration, cond: impl FnMut() -> Option<T>) -> T {
    poll_until(timeout, cond).unwrap_or_else(|| panic!("timed out waiting for {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gives_the_first_value_and_gives_up_at_the_deadline() {
        let mut calls = 0;
        let got = wait_for("the third call", Duration::from_secs(5), || {
            calls += 1;
            (calls == 3).then_some(calls)
        });
        assert_eq!(got, 3);
        let start = Instant::now();
        assert_eq!(poll_until(Duration::from_millis(250), || None::<()>), None);
        assert!(start.elapsed() >= Duration::from_millis(250));
    }

    #[test]
    #[should_panic(expected = "timed out waiting for nothing")]
    fn wait_for_panics_naming_what() {
        wait_for("nothing", Duration::from_millis(10), || None::<()>);
    }
}
