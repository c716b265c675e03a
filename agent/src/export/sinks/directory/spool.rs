//! The directory as a spool: the profiles the upload sink could not deliver wait here (as files, so
//! they survive a restart) until the store takes them, oldest first; see the parent module's docs.

use std::fs;
use std::path::PathBuf;

use super::{remove, DirectoryRole, DirectorySink};
use crate::export::metrics::SpoolOutcome;
use crate::export::sinks::stored::{self, StoredProfileError};
use crate::export::sinks::{EncodedProfile, SinkError};

/// What becomes of a spilled profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpillFate {
    /// Offered to the store again when it is back.
    Redeliver,
    /// Only kept: the store refused it for good.
    Keep,
}

/// A spilled profile taken from the spool: its file name and, if the file could be read, the profile.
#[derive(Debug)]
pub struct PendingProfile {
    /// The file's name in the directory (for [`DirectorySink::settle`]).
    pub name: String,
    /// The profile, ready to upload.
    pub profile: Result<EncodedProfile, StoredProfileError>,
}
impl DirectorySink {
    /// Writes a profile an upload sink could not deliver, pending delivery unless `fate` is
    /// [`SpillFate::Keep`]. When the file is already there (the directory also archives every profile),
    /// it is not written again.
    pub fn spill(&self, profile: &EncodedProfile, fate: SpillFate) -> Result<PathBuf, SinkError> {
        let name = DirectorySink::file_name(&profile.meta);
        let written = {
            let index = self.lock();
            index.contains(&name)
        };
        let path = if written {
            self.dir.join(&name)
        } else {
            self.write(profile)?
        };
        if fate == SpillFate::Redeliver {
            let mut index = self.lock();
            // False when the bounds deleted the file at once (it alone exceeds them): counted then.
            if index.mark_pending(&name) {
                self.metrics.set_spool_pending(index.pending_len());
            } else {
                self.metrics.spool_settled(SpoolOutcome::Expired, 1);
            }
        }
        Ok(path)
    }

    /// Spilled profiles waiting for the store.
    pub fn pending_len(&self) -> usize {
        self.lock().pending_len()
    }

    /// The oldest spilled profile waiting for the store, read from its file; it stays pending until
    /// [`settle`](DirectorySink::settle)d.
    pub fn next_pending(&self) -> Option<PendingProfile> {
        let name = self.lock().oldest_pending()?.to_owned();
        // Read outside the lock: writers need not wait for it.
        let profile = fs::read(self.dir.join(&name))
            .map_err(StoredProfileError::Read)
            .and_then(stored::decode);
        Some(PendingProfile { name, profile })
    }

    /// `name` left the spool with `outcome`: a delivered file is deleted from a spool (kept in an
    /// archive), any other is kept but no longer offered. Counted once, unless it had already left
    /// (deleted by the bounds meanwhile, counted as expired then).
    pub fn settle(&self, name: &str, outcome: SpoolOutcome) {
        let mut index = self.lock();
        if !index.unmark_pending(name) {
            return;
        }
        if outcome == SpoolOutcome::Delivered
            && self.role == DirectoryRole::Spool
            && remove(&self.dir.join(name))
        {
            index.remove(name);
        }
        self.metrics.spool_settled(outcome, 1);
        self.metrics.set_spool_pending(index.pending_len());
    }
}
