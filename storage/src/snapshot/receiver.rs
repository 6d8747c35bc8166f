//! The receiving side of a snapshot transfer: `snapshot-incoming.<n>.part` in the data
//! directory, written chunk by chunk at the offsets the sender gives, every byte judged before
//! it is written, renamed to `snapshot-incoming` when whole (docs/storage-format.md "What the
//! receiver checks, against what").

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::check::{AdmitFn, Refusal, StreamCheck};
use super::header::SnapshotHeader;
use crate::backend::{IoBackend, SegmentFile};
use crate::StorageError;

/// The file a whole, verified snapshot waits in for its install.
pub const SNAPSHOT_INCOMING: &str = "snapshot-incoming";

/// Numbers each receiver's own file: openraft creates a new stream's receiver before it drops
/// the old one, so two receivers can be alive at once and must never share a name.
static NEXT_PART: AtomicU64 = AtomicU64::new(0);

/// What a rewind re-reads at a time when it must rebuild the verdict from the file.
const RESCAN_BYTES: usize = 64 << 10;

/// Writes one snapshot stream into its own part file. A chunk at an offset at or below the
/// file's length truncates the file there and writes on (openraft resends a chunk that timed
/// out at its old offset, and restarts a snapshot id at 0); a chunk beyond it is a hole and
/// refused. Any refusal deletes the file; a later chunk at offset 0 starts the stream afresh
/// (openraft keeps a receiver for as long as the snapshot id, and a refusal such as free space
/// may pass). Dropping it unfinished deletes its file and no other.
pub struct SnapshotReceiver {
    dir: Arc<dyn IoBackend>,
    /// This receiver's file until `finish` renames it to `SNAPSHOT_INCOMING`.
    part: String,
    /// None once refused or finished.
    file: Option<Arc<dyn SegmentFile>>,
    check: StreamCheck,
    /// The verdict as it stood before the last write, at that write's offset: a resent chunk
    /// comes back there, and restoring it spares re-reading the file.
    before_last: Option<StreamCheck>,
    admit: Box<AdmitFn>,
}

impl SnapshotReceiver {
    /// Starts a stream in `dir` (the data directory) under a name no other live receiver has.
    /// Records are judged against `max_record_bytes`; `admit` judges the header (the
    /// free disk space above the reserve) before any byte past it is written.
    pub fn create(
        dir: Arc<dyn IoBackend>,
        max_record_bytes: u32,
        admit: Box<AdmitFn>,
    ) -> Result<SnapshotReceiver, StorageError> {
        let part = format!(
            "{SNAPSHOT_INCOMING}.{}.part",
            NEXT_PART.fetch_add(1, Ordering::Relaxed)
        );
        let file = dir
            .create(&part)
            .map_err(StorageError::io("create", dir.locate(&part)))?;
        Ok(SnapshotReceiver {
            dir,
            part,
            file: Some(file),
            check: StreamCheck::new(max_record_bytes),
            before_last: None,
            admit,
        })
    }

    /// Bytes written and judged so far.
    pub fn len(&self) -> u64 {
        self.check.pos()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes `data` at `offset`, after judging it.
    pub fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<(), StorageError> {
        if self.file.is_none() && offset == 0 {
            self.restart()?;
        }
        let file = self.live_file()?;
        let len = self.check.pos();
        if offset > len {
            return Err(self.refuse(Refusal {
                offset,
                reason: format!("a chunk at offset {offset} leaves a hole after byte {len}"),
            }));
        }
        if offset < len {
            if let Err(e) = self.rewind(&file, offset) {
                return Err(self.fail(e));
            }
        }
        let before = self.check.clone();
        if let Err(r) = self.check.feed(data, &*self.admit) {
            return Err(self.refuse(r));
        }
        if let Err(e) = file.write_at(offset, data) {
            return Err(self.fail(StorageError::io("write", self.dir.locate(&self.part))(e)));
        }
        self.before_last = Some(before);
        Ok(())
    }

    /// Ends the stream: refused unless record `A` (or the state, when no record is carried)
    /// was its last byte; otherwise the file is fdatasynced, renamed to `snapshot-incoming`
    /// (replacing an earlier stream's that was never installed), the directory fsynced, and
    /// the header returned. The file stays for the install.
    pub fn finish(mut self) -> Result<SnapshotHeader, StorageError> {
        let file = self.live_file()?;
        let Some(head) = self.check.done() else {
            let pos = self.check.pos();
            return Err(self.refuse(Refusal {
                offset: pos,
                reason: format!("the stream ended after {pos} bytes, before its last record"),
            }));
        };
        let path = self.dir.locate(&self.part);
        if let Err(e) = file.sync_data() {
            return Err(self.fail(StorageError::io("fdatasync", &path)(e)));
        }
        if let Err(e) = self.dir.rename(&self.part, SNAPSHOT_INCOMING) {
            return Err(self.fail(StorageError::io("rename into place", &path)(e)));
        }
        // The part name is gone: from here the file is the install's, not this receiver's.
        self.file = None;
        let path = self.dir.locate(SNAPSHOT_INCOMING);
        if let Err(e) = self.dir.sync_dir() {
            if let Err(r) = self.dir.remove(SNAPSHOT_INCOMING) {
                tracing::warn!(path = %path.display(), error = %r,
                    "a snapshot whose name never synced could not be deleted");
            }
            return Err(StorageError::io("sync the directory of", &path)(e));
        }
        Ok(head)
    }

    /// A fresh file under the same name and a fresh verdict, after a refusal.
    fn restart(&mut self) -> Result<(), StorageError> {
        let file = self
            .dir
            .create(&self.part)
            .map_err(StorageError::io("create", self.dir.locate(&self.part)))?;
        self.file = Some(file);
        self.check = StreamCheck::new(self.check.max_record_bytes());
        self.before_last = None;
        Ok(())
    }

    fn live_file(&self) -> Result<Arc<dyn SegmentFile>, StorageError> {
        self.file
            .clone()
            .ok_or_else(|| StorageError::SnapshotRefused {
                offset: self.check.pos(),
                reason: "this stream was refused; it starts again only at offset 0".into(),
            })
    }

    /// Cuts the file back to `offset` and brings the verdict back to what it was there.
    fn rewind(&mut self, file: &Arc<dyn SegmentFile>, offset: u64) -> Result<(), StorageError> {
        let path = self.dir.locate(&self.part);
        file.set_len(offset)
            .map_err(StorageError::io("truncate", &path))?;
        let mut check = match self.before_last.take() {
            Some(c) if c.pos() <= offset => c,
            _ => StreamCheck::new(self.check.max_record_bytes()),
        };
        // Bytes already judged once: the header was admitted then, so it is not asked again.
        let admitted: &AdmitFn = &|_| Ok(());
        let mut buf = vec![0u8; RESCAN_BYTES.min((offset - check.pos()) as usize)];
        while check.pos() < offset {
            let n = buf.len().min((offset - check.pos()) as usize);
            file.read_at(check.pos(), &mut buf[..n])
                .map_err(StorageError::io("read back", &path))?;
            check
                .feed(&buf[..n], admitted)
                .map_err(|r| StorageError::SnapshotRefused {
                    offset: r.offset,
                    reason: format!("the bytes written earlier no longer verify: {}", r.reason),
                })?;
        }
        self.check = check;
        Ok(())
    }

    fn refuse(&mut self, r: Refusal) -> StorageError {
        self.fail(StorageError::SnapshotRefused {
            offset: r.offset,
            reason: r.reason,
        })
    }

    /// Deletes the file and ends the receiver; returns `e`.
    fn fail(&mut self, e: StorageError) -> StorageError {
        self.discard();
        e
    }

    fn discard(&mut self) {
        if self.file.take().is_none() {
            return;
        }
        let removed = self
            .dir
            .remove(&self.part)
            .and_then(|()| self.dir.sync_dir());
        if let Err(e) = removed {
            // A part file is never read as a snapshot; the start-up sweep of
            // `snapshot-incoming*` (docs/storage-format.md, stage 3) removes it.
            tracing::warn!(
                path = %self.dir.locate(&self.part).display(),
                error = %e,
                "a refused snapshot stream could not be deleted"
            );
        }
    }
}

impl Drop for SnapshotReceiver {
    /// openraft drops a stalled receiver after `install_snapshot_timeout`: the partial file
    /// goes with it.
    fn drop(&mut self) {
        self.discard();
    }
}
