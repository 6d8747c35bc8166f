//! The broker's id files (`<data_dir>/ids/`, docs/storage-format.md "Id files"): the durable
//! half of the transaction-id index that the engine's hot table spills to
//! (`queenmq_engine::state::TxnSpill`).
//!
//! A damaged file never stops anything (review s25 H4): it is removed, warned about once and
//! counted in `queen_dedup_id_files_damaged_total`; the dedup of its ids is lost, no
//! acknowledged message is. Only a file that cannot be read at all (an I/O error) makes a
//! lookup fail, and the push then fails closed (retry), as an unreadable frame does.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use queenmq_engine::state::IdStore;
use queenmq_storage::{FileBackend, IdFiles, IdSource, StorageError};

/// The subdirectory of a data dir holding the id files.
pub const IDS_DIR: &str = "ids";

pub struct DiskIdStore {
    files: IdFiles,
    /// The files by bucket, so a lookup lists no directory; behind a lock because a lookup
    /// (`&self`) drops the damaged files it meets.
    index: Mutex<BTreeMap<u64, Vec<IdSource>>>,
    /// The next spill's source number: one past the highest seen, so a name is never reused.
    next: AtomicU64,
    /// Held shared by a lookup while it opens a bucket's files, exclusively by the writer
    /// while it takes names out of `index` that it is about to remove (a merge's inputs,
    /// expired buckets): after that no lookup can be on its way to one of them.
    names: RwLock<()>,
}

fn damaged(bucket: u64, source: IdSource, e: &StorageError) {
    metrics::counter!("queen_dedup_id_files_damaged_total").increment(1);
    tracing::warn!(
        bucket,
        source = ?source,
        error = %e,
        "a damaged id file was removed: transaction ids in it are no longer deduplicated \
         (no stored message is affected)"
    );
}

impl DiskIdStore {
    /// Opens (creating it durably) `<data_dir>/ids`.
    pub fn open(data_dir: &Path) -> Result<DiskIdStore, StorageError> {
        let dir = data_dir.join(IDS_DIR);
        let backend = FileBackend::new(&dir).map_err(|e| StorageError::Io {
            op: "create the id file directory",
            path: dir.clone(),
            source: e,
        })?;
        let files = IdFiles::new(Arc::new(backend));
        let mut index: BTreeMap<u64, Vec<IdSource>> = BTreeMap::new();
        let mut next = 0;
        for (b, s) in files.list()? {
            if let IdSource::Segment(n) = s {
                next = next.max(n + 1);
            }
            index.entry(b).or_default().push(s);
        }
        Ok(DiskIdStore {
            files,
            index: Mutex::new(index),
            next: AtomicU64::new(next),
            names: RwLock::new(()),
        })
    }

    fn index(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Vec<IdSource>>> {
        self.index.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn sources(&self, bucket: u64) -> Vec<IdSource> {
        self.index().get(&bucket).cloned().unwrap_or_default()
    }

    /// Removes a damaged file from the directory and the index.
    fn drop_damaged(&self, bucket: u64, source: IdSource, e: &StorageError) {
        damaged(bucket, source, e);
        if let Err(re) = self.files.remove(bucket, source) {
            tracing::warn!(bucket, error = %re, "a damaged id file could not be removed");
        }
        if let Some(v) = self.index().get_mut(&bucket) {
            v.retain(|s| *s != source);
        }
    }

    /// Rereads the bucket's files from the directory (after a merge changed them).
    fn relist(&self, bucket: u64) {
        let Ok(all) = self.files.list() else {
            return;
        };
        let now: Vec<IdSource> = all
            .into_iter()
            .filter(|(b, _)| *b == bucket)
            .map(|(_, s)| s)
            .collect();
        let mut index = self.index();
        if now.is_empty() {
            index.remove(&bucket);
        } else {
            index.insert(bucket, now);
        }
    }
}

impl IdStore for DiskIdStore {
    fn write(&self, bucket: u64, pairs: &mut [(u64, u64)]) -> Result<(), String> {
        // One writer (the spill's thread, or the open before it starts): no race on `next`.
        let source = self.next.load(Ordering::Relaxed);
        self.files
            .write_segment(bucket, source, pairs)
            .map_err(|e| e.to_string())?;
        self.next.store(source + 1, Ordering::Relaxed);
        self.index()
            .entry(bucket)
            .or_default()
            .push(IdSource::Segment(source));
        Ok(())
    }

    fn buckets(&self) -> Vec<u64> {
        self.index().keys().copied().collect()
    }

    fn keys(&self, bucket: u64, each: &mut dyn FnMut(u64)) -> Result<(), String> {
        let mut unread = Ok(());
        for s in self.sources(bucket) {
            let read = self.files.open(bucket, s).and_then(|r| {
                // The whole file is checked before any key is given: a damaged file adds
                // nothing, not half of itself.
                r.verify()?;
                let mut c = r.cursor();
                while let Some((k, _)) = c.next_pair()? {
                    each(k);
                }
                Ok(())
            });
            match read {
                Ok(()) => {}
                Err(e @ StorageError::CorruptIdFile { .. }) => self.drop_damaged(bucket, s, &e),
                // Unreadable but maybe whole: kept; the caller searches its bucket at every
                // lookup, which fails closed while the file stays unreadable.
                Err(e) => unread = Err(format!("{s:?}: {e}")),
            }
        }
        unread
    }

    fn find(
        &self,
        bucket: u64,
        key: u64,
        accept: &mut dyn FnMut(u64) -> bool,
    ) -> Result<Option<u64>, String> {
        let _names = self.names.read().unwrap_or_else(PoisonError::into_inner);
        for s in self.sources(bucket).into_iter().rev() {
            match self
                .files
                .open(bucket, s)
                .and_then(|r| r.find(key, &mut *accept))
            {
                Ok(Some(off)) => return Ok(Some(off)),
                Ok(None) => {}
                Err(e @ StorageError::CorruptIdFile { .. }) => self.drop_damaged(bucket, s, &e),
                Err(e) => return Err(e.to_string()),
            }
        }
        Ok(None)
    }

    fn merge(&self, bucket: u64) {
        if self.sources(bucket).len() < 2 {
            return;
        }
        let swap = &mut |out: IdSource, inputs: &[IdSource]| {
            let _names = self.names.write().unwrap_or_else(PoisonError::into_inner);
            let mut index = self.index();
            let v = index.entry(bucket).or_default();
            v.retain(|s| !inputs.contains(s));
            v.push(out);
            v.sort_unstable();
        };
        if let Err(e) = self.files.merge_generation_then(bucket, swap) {
            // Merging is only for speed; a damaged input is found and dropped here, the
            // rest merged at the next close or start.
            tracing::warn!(bucket, error = %e, "id files of a bucket could not be merged");
            for s in self.sources(bucket) {
                if let Err(e @ StorageError::CorruptIdFile { .. }) =
                    self.files.open(bucket, s).and_then(|r| r.verify())
                {
                    self.drop_damaged(bucket, s, &e);
                }
            }
        }
        self.relist(bucket);
    }

    fn remove_before(&self, bucket: u64) {
        {
            let _names = self.names.write().unwrap_or_else(PoisonError::into_inner);
            self.index().retain(|b, _| *b >= bucket);
        }
        if let Err(e) = self.files.remove_before(bucket) {
            // Left on disk, out of the index: listed again (and removed) at the next start.
            tracing::warn!(error = %e, "id files out of the window could not be removed");
        }
    }
}

#[cfg(test)]
#[path = "id_store_tests.rs"]
mod tests;
