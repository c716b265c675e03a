//! The directory sink's picture of its directory, kept in memory.
//!
//! The directory is read once, when the sink starts; from then on every write, deletion and bound check
//! goes through this index, so a write costs the same whether the directory holds ten files or a hundred
//! thousand (re-reading it after each write made the agent's CPU grow with the directory). Files are
//! ordered oldest first (modification time, then name), which is the order both bounds delete in.
//! The index also knows which files are spilled profiles still waiting for the store (pending), oldest
//! first, so the upload sink can deliver them in order. What the index does not see: files other programs add after the start (they are neither counted nor
//! deleted until the next start) and files others delete (found missing when this sink deletes them).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::SystemTime;

/// Where a file sits in the oldest-first order.
type Key = (SystemTime, String);

/// Where a pending file sits in the delivery order: the start of its profile (from the name
/// `<service>-<pid>-<start unix ms>.pb.gz`; 0 when the name has no such number), then the name.
type PendingKey = (u128, String);

fn pending_key(name: &str) -> PendingKey {
    let start_ms = name
        .strip_suffix(".pb.gz")
        .and_then(|stem| stem.rsplit('-').next())
        .and_then(|start| start.parse().ok())
        .unwrap_or(0);
    (start_ms, name.to_owned())
}

/// One profile file as the index knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct IndexedFile {
    /// Size in bytes.
    pub len: u64,
    /// Last modification.
    pub modified: SystemTime,
}

/// The profile files of one directory, by age and by name, their total size, and which are pending.
#[derive(Debug, Default)]
pub(super) struct DirectoryIndex {
    by_age: BTreeMap<Key, u64>,
    modified_by_name: HashMap<String, SystemTime>,
    pending: BTreeSet<PendingKey>,
    total_bytes: u64,
}

impl DirectoryIndex {
    /// Records `name` (not pending), replacing what was known of a file of the same name.
    pub fn insert(&mut self, name: &str, file: IndexedFile) {
        self.remove(name);
        self.by_age
            .insert((file.modified, name.to_owned()), file.len);
        self.modified_by_name.insert(name.to_owned(), file.modified);
        self.total_bytes = self.total_bytes.saturating_add(file.len);
    }

    /// Forgets `name`; returns what was known of it and whether it was pending.
    pub fn remove(&mut self, name: &str) -> Option<(IndexedFile, bool)> {
        let modified = self.modified_by_name.remove(name)?;
        let len = self.by_age.remove(&(modified, name.to_owned()))?;
        let was_pending = self.pending.remove(&pending_key(name));
        self.total_bytes -= len;
        Some((IndexedFile { len, modified }, was_pending))
    }

    /// Marks `name` as a spilled profile waiting for the store; false if `name` is unknown.
    pub fn mark_pending(&mut self, name: &str) -> bool {
        self.modified_by_name.contains_key(name) && {
            self.pending.insert(pending_key(name));
            true
        }
    }

    /// `name` is no longer waiting; returns whether it was.
    pub fn unmark_pending(&mut self, name: &str) -> bool {
        self.pending.remove(&pending_key(name))
    }

    /// The pending file whose profile started first.
    pub fn oldest_pending(&self) -> Option<&str> {
        self.pending.first().map(|(_, name)| name.as_str())
    }

    /// Number of pending files.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// Whether `name` is known.
    pub fn contains(&self, name: &str) -> bool {
        self.modified_by_name.contains_key(name)
    }

    /// Number of files.
    pub fn len(&self) -> usize {
        self.by_age.len()
    }

    /// Total size of the files.
    pub fn total_bytes(&self) -> u64 {
        self.total_bytes
    }

    /// The files, oldest first.
    pub fn oldest_first(&self) -> impl Iterator<Item = (&str, IndexedFile)> {
        self.by_age.iter().map(|((modified, name), &len)| {
            (
                name.as_str(),
                IndexedFile {
                    len,
                    modified: *modified,
                },
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    fn at(secs: u64, len: u64) -> IndexedFile {
        IndexedFile {
            len,
            modified: UNIX_EPOCH + Duration::from_secs(secs),
        }
    }

    #[test]
    fn orders_by_age_then_name_and_sums_sizes() {
        let mut index = DirectoryIndex::default();
        index.insert("b", at(20, 5));
        index.insert("a", at(20, 7));
        index.insert("c", at(10, 1));
        let names: Vec<&str> = index.oldest_first().map(|(name, _)| name).collect();
        assert_eq!(names, ["c", "a", "b"]);
        assert_eq!(index.total_bytes(), 13);

        // Rewriting a name moves it and replaces its size.
        index.insert("c", at(30, 100));
        let names: Vec<&str> = index.oldest_first().map(|(name, _)| name).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(index.total_bytes(), 112);

        assert_eq!(index.remove("a"), Some((at(20, 7), false)));
        assert_eq!(index.remove("a"), None);
        assert!(!index.contains("a"));
        assert_eq!(index.len(), 2);
        assert_eq!(index.total_bytes(), 105);
    }

    #[test]
    fn pending_files_come_oldest_first() {
        let mut index = DirectoryIndex::default();
        // Spilled in another order than they were taken: the profile's start decides.
        index.insert("web-1-300.pb.gz", at(10, 1));
        index.insert("web-1-1000.pb.gz", at(20, 1));
        index.insert("web-1-20.pb.gz", at(30, 1));
        assert!(index.mark_pending("web-1-1000.pb.gz"));
        assert!(index.mark_pending("web-1-20.pb.gz"));
        assert!(!index.mark_pending("unknown"));
        assert_eq!(index.oldest_pending(), Some("web-1-20.pb.gz"));
        assert!(index.unmark_pending("web-1-20.pb.gz"));
        assert_eq!(index.oldest_pending(), Some("web-1-1000.pb.gz"));
        assert_eq!(index.remove("web-1-1000.pb.gz"), Some((at(20, 1), true)));
        assert_eq!(index.oldest_pending(), None);
        assert_eq!(index.pending_len(), 0);
    }
}
