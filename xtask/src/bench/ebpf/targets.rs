//! The `deep.py` targets' shared settings: how long one may take to start, and the depth of the
//! agent runs' processes (started at a given niceness with [`crate::bench::util::niced`]).

use std::time::Duration;

/// How long a target may take to print `ready`.
pub(super) const READY: Duration = Duration::from_secs(60);
/// Depth of the busy processes of the agent-overhead runs.
pub(super) const AGENT_TARGET_DEPTH: usize = 30;
