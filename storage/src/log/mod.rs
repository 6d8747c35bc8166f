//! The segment log: the Raft log and, because entries carry messages, the message store.

mod append;
mod index;
mod lease;
mod recovery;
mod resync;
mod scan;
mod trim;

#[cfg(test)]
pub(crate) mod tests;
#[cfg(test)]
mod tests_crash;
#[cfg(test)]
mod tests_recovery;
#[cfg(test)]
mod tests_resync;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use crate::backend::{FileBackend, IoBackend, SegmentFile};
use crate::format::{decode_body, le_u32, LEN_FIELD};
use crate::sync::{lock, read};
use crate::{LogOptions, RecoveryReport, StorageError};
use index::LogIndex;
pub use lease::FloorLease;
pub(crate) use lease::RecordSpan;

/// The Raft log and message store: append-only records `index, term, payload`, indexes
/// contiguous, in segment files of about `segment_bytes` each.
///
/// # Storage contract
///
/// To ensure correctness the log guarantees, and callers rely on, the following:
///
/// - **No holes.** The stored indexes are always one contiguous run `first_index()..=last()`.
///   `append` accepts only `last + 1` (any index when the log is empty), and recovery either
///   cuts a torn tail at the first record that does not continue the run or refuses to open
///   (see `open_with_backend`).
/// - **Durable only after `sync`.** `append` and `append_batch` hand bytes to the OS and return;
///   a crash may lose any suffix of what was appended since the last successful `sync`, but
///   never a record before it, and never leaves a hole. `sync` is the group commit: one call
///   makes everything appended before it durable, including segments rolled since the last
///   call and their directory entries. Raft must not acknowledge an entry (vote for it, report
///   it flushed) before the `sync` that follows its append has returned `Ok`.
/// - **`truncate_from` is durable on return**, so a record Raft discarded in a conflict never
///   comes back after a crash. `purge_upto` is not required to be durable: a purged segment
///   that survives a crash holds records Raft has already moved past.
/// - **Serialised writes.** `append*` and `truncate_from` hold one writer lock, so they never
///   interleave. `purge_upto` takes it only to pick its segments and to drop each from the
///   index once its unlink is durable, never across an unlink or fsync, and deletes only
///   sealed segments, never the one appends go to. `sync` takes that lock only to collect the files to flush and
///   fsyncs outside it, so appends for the next batch proceed during the fsync.
/// - **Readers never wait for an fsync.** `read`, `term_of`, `first_index` and `last` see a
///   record as soon as the `append` that wrote it returns, synced or not, and never see a
///   partly written one. A `read` racing a `truncate_from` or `purge_upto` of the same index
///   may return the old record, `None`, or an error; it never returns another index's bytes.
/// - **A failed fsync poisons the log.** After `sync` fails the kernel may have dropped dirty
///   pages, so what is on disk is unknown: every later write or sync fails with
///   `StorageError::Poisoned` until the log is reopened and recovered from disk.
/// - **Every read is verified**: the CRC32C and the index stored in the record are checked.
pub struct SegmentLog {
    backend: Arc<dyn IoBackend>,
    opts: LogOptions,
    index: RwLock<LogIndex>,
    writer: Mutex<Dirty>,
    /// Serialises whole `sync` calls, so a second caller cannot return before the fsync of
    /// bytes it appended (and the first caller collected) has finished.
    sync_lock: Mutex<()>,
    /// Serialises purges, so segments always go oldest first (`purge_upto`).
    purge_lock: Mutex<()>,
    /// Floors snapshot streams are reading from: no purge deletes at or above the lowest.
    leases: lease::LeaseTable,
    poisoned: AtomicBool,
    /// The last index a successful `sync` (or the recovery at open) vouches for; 0 for none.
    synced_through: AtomicU64,
}

/// Files and directory entries changed since the last sync. Guarded by the writer lock.
#[derive(Default)]
struct Dirty {
    files: BTreeMap<String, Arc<dyn SegmentFile>>,
    dir: bool,
}

impl SegmentLog {
    /// Opens (creating if needed) the log in `dir` and recovers it; see `open_with_backend`.
    pub fn open(
        dir: &Path,
        opts: LogOptions,
    ) -> Result<(SegmentLog, RecoveryReport), StorageError> {
        let backend =
            FileBackend::new(dir).map_err(StorageError::io("create log directory", dir))?;
        SegmentLog::open_with_backend(Arc::new(backend), opts)
    }

    /// Scans every segment. A torn tail (damage in the last segment holding records, with no
    /// valid record after it, above `opts.durable_through`) is cut: the segment is truncated
    /// just before it and any later header-only or torn segment is deleted; the cut is
    /// reported and logged with `tracing::warn`. Any other damage, or a log ending below
    /// `durable_through`, is `StorageError::DataLoss` unless `opts.accept_data_loss`.
    pub fn open_with_backend(
        backend: Arc<dyn IoBackend>,
        opts: LogOptions,
    ) -> Result<(SegmentLog, RecoveryReport), StorageError> {
        opts.validate()?;
        let (index, report) = recovery::recover(&*backend, &opts)?;
        let recovered = index.last().map_or(0, |(i, _)| i);
        let log = SegmentLog {
            backend,
            opts,
            index: RwLock::new(index),
            writer: Mutex::new(Dirty::default()),
            sync_lock: Mutex::new(()),
            purge_lock: Mutex::new(()),
            leases: Default::default(),
            poisoned: AtomicBool::new(false),
            synced_through: AtomicU64::new(recovered),
        };
        Ok((log, report))
    }

    pub fn first_index(&self) -> Option<u64> {
        read(&self.index).first_index()
    }

    /// (index, term) of the last record.
    pub fn last(&self) -> Option<(u64, u64)> {
        read(&self.index).last()
    }

    /// From the in-memory index; no disk read.
    pub fn term_of(&self, index: u64) -> Option<u64> {
        let idx = read(&self.index);
        idx.find(index)?.locate(index).map(|(_, _, term)| term)
    }

    /// (term, payload) of a record, synced or not.
    pub fn read(&self, index: u64) -> Result<Option<(u64, Vec<u8>)>, StorageError> {
        let (file, path, offset, len) = {
            let idx = read(&self.index);
            let Some(seg) = idx.find(index) else {
                return Ok(None);
            };
            let Some((offset, len, _)) = seg.locate(index) else {
                return Ok(None);
            };
            (seg.file.clone(), seg.path.clone(), offset, len)
        };
        // `len` comes from our own index, built from verified records, not from the file.
        let mut buf = vec![0u8; len as usize];
        file.read_at(offset, &mut buf)
            .map_err(StorageError::io("read record from", &path))?;
        let corrupt = |reason: String| StorageError::CorruptRecord {
            path: path.clone(),
            offset,
            reason,
        };
        let prefix = u64::from(le_u32(&buf));
        if prefix + LEN_FIELD != len {
            return Err(corrupt(format!(
                "length prefix {prefix} disagrees with the indexed record length {len}"
            )));
        }
        let record = decode_body(&buf[LEN_FIELD as usize..]).map_err(corrupt)?;
        if record.index != index {
            return Err(corrupt(format!(
                "record holds index {} where {index} was expected",
                record.index
            )));
        }
        let term = record.term;
        let payload_at = buf.len() - record.payload.len();
        buf.drain(..payload_at);
        Ok(Some((term, buf)))
    }

    /// Makes everything appended so far durable: one fdatasync per file written since the last
    /// sync (normally one) plus a directory sync if segments were created.
    pub fn sync(&self) -> Result<(), StorageError> {
        let _one_at_a_time = lock(&self.sync_lock);
        self.check_poisoned()?;
        let (dirty, upto) = {
            // Appends hold the writer lock: the last index read under it is exactly what
            // the files collected here hold.
            let mut writer = lock(&self.writer);
            let upto = self.last().map_or(0, |(i, _)| i);
            (std::mem::take(&mut *writer), upto)
        };
        for (name, file) in &dirty.files {
            if let Err(e) = file.sync_data() {
                return Err(
                    self.poison(StorageError::io("fdatasync", self.backend.locate(name))(e))
                );
            }
        }
        if dirty.dir {
            if let Err(e) = self.backend.sync_dir() {
                return Err(self.poison(StorageError::io(
                    "sync directory of",
                    self.backend.locate(""),
                )(e)));
            }
        }
        self.synced_through.fetch_max(upto, Ordering::SeqCst);
        Ok(())
    }

    /// The last index known durable: covered by a `sync` that returned `Ok` (or recovered at
    /// open). After this log fails, what lies beyond it was never acknowledged and may not be
    /// on disk even if the page cache still shows it: whoever reopens the log in the same
    /// process drops it (`truncate_from(synced_through + 1)`) rather than trust it.
    pub fn synced_through(&self) -> Option<u64> {
        match self.synced_through.load(Ordering::SeqCst) {
            0 => None,
            i => Some(i),
        }
    }

    /// Bytes of all segment files, headers included.
    pub fn disk_bytes(&self) -> u64 {
        read(&self.index).disk_bytes()
    }

    pub fn segment_count(&self) -> usize {
        read(&self.index).segments.len()
    }

    fn check_poisoned(&self) -> Result<(), StorageError> {
        if self.poisoned.load(Ordering::SeqCst) {
            return Err(StorageError::Poisoned);
        }
        Ok(())
    }

    fn poison(&self, e: StorageError) -> StorageError {
        tracing::error!(error = %e, "segment log poisoned: refusing writes until reopened");
        self.poisoned.store(true, Ordering::SeqCst);
        e
    }
}
