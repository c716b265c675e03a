//! The directory sink's bounds: files past an age are deleted, then the oldest until the total size
//! fits (the newest file always stays). Spilled profiles deleted this way leave the spool as expired.

use std::time::{Duration, SystemTime};

use super::{remove, DirectorySink};
use crate::export::metrics::{EvictReason, SpoolOutcome};
use crate::export::sinks::index::DirectoryIndex;

/// How much the directory sink may keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirectoryLimits {
    /// Total size of the profile files.
    pub max_bytes: u64,
    /// Age (modification time) past which a file is deleted.
    pub max_age: Duration,
}

impl Default for DirectoryLimits {
    /// 1 GiB and 7 days.
    fn default() -> DirectoryLimits {
        DirectoryLimits {
            max_bytes: 1 << 30,
            max_age: Duration::from_secs(7 * 24 * 3600),
        }
    }
}
impl DirectorySink {
    /// Deletes files past `max_age`, then the oldest until the total is within `max_bytes`.
    pub fn enforce_limits(&self) {
        let mut index = self.lock();
        self.enforce_limits_locked(&mut index);
    }
    /// [`enforce_limits`](DirectorySink::enforce_limits) with the index already locked (by a write).
    pub(super) fn enforce_limits_locked(&self, index: &mut DirectoryIndex) {
        let now = SystemTime::now();
        let too_old: Vec<String> = index
            .oldest_first()
            .take_while(|(_, file)| {
                now.duration_since(file.modified).unwrap_or_default() > self.limits.max_age
            })
            .map(|(name, _)| name.to_owned())
            .collect();
        let mut evicted = 0;
        let mut expired = 0;
        for name in too_old {
            if remove(&self.dir.join(&name)) {
                if let Some((_, true)) = index.remove(&name) {
                    expired += 1;
                }
                evicted += 1;
            }
        }
        self.metrics.evicted(EvictReason::Age, evicted);

        // Oldest first, and the newest file (last) always stays. A file that cannot be deleted is
        // skipped (still counted in the total), so the walk ends.
        let mut evicted = 0;
        let mut skipped = 0;
        while index.total_bytes() > self.limits.max_bytes && index.len() > skipped + 1 {
            let Some(name) = index
                .oldest_first()
                .nth(skipped)
                .map(|(name, _)| name.to_owned())
            else {
                break;
            };
            if remove(&self.dir.join(&name)) {
                if let Some((_, true)) = index.remove(&name) {
                    expired += 1;
                }
                evicted += 1;
            } else {
                skipped += 1;
            }
        }
        self.metrics.evicted(EvictReason::Size, evicted);
        // Spilled profiles deleted before the store took them.
        self.metrics.spool_settled(SpoolOutcome::Expired, expired);
        self.metrics.set_spool_pending(index.pending_len());
    }
}
