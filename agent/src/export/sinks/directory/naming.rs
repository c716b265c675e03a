//! What the directory sink calls its files: `<service>-<pid>-<start unix ms>.pb.gz`, safe on any file
//! system and never hidden.

use std::path::PathBuf;

use super::DirectorySink;
use crate::export::sinks::ProfileMeta;

/// Suffix of the files this sink writes.
pub(super) const SUFFIX: &str = ".pb.gz";

/// Longest service name kept in a file name.
const MAX_SERVICE_CHARS: usize = 100;

/// A service name as the start of a file name: reduced to `[A-Za-z0-9._-]` (other characters
/// become `_`, a leading dot too, so the file is never hidden), at most 100 characters,
/// `unknown` when empty. Every file the agent names after a service uses it.
pub fn file_safe_service(service: &str) -> String {
    let mut safe: String = service
        .chars()
        .take(MAX_SERVICE_CHARS)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if safe.is_empty() {
        safe.push_str("unknown");
    }
    if safe.starts_with('.') {
        safe.replace_range(..1, "_");
    }
    safe
}
impl DirectorySink {
    /// `<service>-<pid>-<start unix ms>.pb.gz`, the service as [`file_safe_service`] makes it.
    pub fn file_name(meta: &ProfileMeta) -> String {
        let service = file_safe_service(&meta.service);
        format!("{service}-{}-{}{SUFFIX}", meta.pid, meta.start_unix_ms())
    }

    /// The path `profile` is written to.
    pub fn path_for(&self, meta: &ProfileMeta) -> PathBuf {
        self.dir.join(DirectorySink::file_name(meta))
    }
}
