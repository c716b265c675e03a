//! The `deep.py` targets' shared settings: how long one may take to start, the depth of the
//! agent runs' processes, and how those are started at a given niceness.

use std::process::Command;
use std::time::Duration;

/// How long a target may take to print `ready`.
pub(super) const READY: Duration = Duration::from_secs(60);
/// Depth of the busy processes of the agent-overhead runs.
pub(super) const AGENT_TARGET_DEPTH: usize = 30;

/// `inner` run under `nice -n niceness`.
pub(super) fn niced(inner: &Command, niceness: u32) -> Command {
    let mut cmd = Command::new("nice");
    cmd.args(["-n", &niceness.to_string()])
        .arg(inner.get_program())
        .args(inner.get_args());
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_niced_command_keeps_its_program_and_arguments() {
        let mut inner = Command::new("/usr/bin/python3");
        inner.args(["deep.py", "30", "busy"]);
        let cmd = niced(&inner, 19);
        assert_eq!(cmd.get_program(), "nice");
        let args: Vec<_> = cmd.get_args().collect();
        assert_eq!(
            args,
            ["-n", "19", "/usr/bin/python3", "deep.py", "30", "busy"]
        );
    }
}
