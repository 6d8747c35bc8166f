//! The receiving side of a snapshot transfer: `snapshot-incoming` in the data directory,
//! written chunk by chunk at the offsets the sender gives, every byte judged before it is
//! written (docs/storage-format.md "What the receiver checks, against what").

use std::sync::Arc;

use super::check::{AdmitFn, Refusal, StreamCheck};
use super::header::SnapshotHeader;
use crate::backend::{IoBackend, SegmentFile};
use crate::StorageError;

/// The file a snapshot is streamed into before it is installed.
pub const SNAPSHOT_INCOMING: &str = "snapshot-incoming";

/// What a rewind re-reads at a time when it must rebuild the verdict from the file.
const RESCAN_BYTES: usize = 64 << 10;

/// Writes one snapshot stream into `snapshot-incoming`. A chunk at an offset at or below the
/// file's length truncates the file there and writes on (openraft resends a chunk that timed
/// out at its old offset, and restarts a snapshot id at 0); a chunk beyond it is a hole and
/// refused. Any refusal deletes the file and ends the receiver; so does dropping it unfinished.
pub struct SnapshotReceiver {
    dir: Arc<dyn IoBackend>,
    /// None once refused or finished.
    file: Option<Arc<dyn SegmentFile>>,
    check: StreamCheck,
    /// The verdict as it stood before the last write, at that write's offset: a resent chunk
    /// comes back there, and restoring it spares re-reading the file.
    before_last: Option<StreamCheck>,
    admit: Box<AdmitFn>,
}

impl SnapshotReceiver {
    /// Starts a stream in `dir` (the data directory), replacing any `snapshot-incoming` left
    /// there. Records are judged against `max_record_bytes`; `admit` judges the header (the
    /// free disk space above the reserve) before any byte past it is written.
    pub fn create(
        dir: Arc<dyn IoBackend>,
        max_record_bytes: u32,
        admit: Box<AdmitFn>,
    ) -> Result<SnapshotReceiver, StorageError> {
        let file = dir
            .create(SNAPSHOT_INCOMING)
            .map_err(StorageError::io("create", dir.locate(SNAPSHOT_INCOMING)))?;
        Ok(SnapshotReceiver {
            dir,
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
            return Err(self.fail(StorageError::io(
                "write",
                self.dir.locate(SNAPSHOT_INCOMING),
            )(e)));
        }
        self.before_last = Some(before);
        Ok(())
    }

    /// Ends the stream: refused unless record `A` (or the state, when no record is carried)
    /// was its last byte; otherwise the file is fdatasynced and its directory fsynced, and the
    /// header returned. The file stays for the install.
    pub fn finish(mut self) -> Result<SnapshotHeader, StorageError> {
        let file = self.live_file()?;
        let Some(head) = self.check.done() else {
            let pos = self.check.pos();
            return Err(self.refuse(Refusal {
                offset: pos,
                reason: format!("the stream ended after {pos} bytes, before its last record"),
            }));
        };
        let path = self.dir.locate(SNAPSHOT_INCOMING);
        if let Err(e) = file.sync_data() {
            return Err(self.fail(StorageError::io("fdatasync", &path)(e)));
        }
        if let Err(e) = self.dir.sync_dir() {
            return Err(self.fail(StorageError::io("sync the directory of", &path)(e)));
        }
        self.file = None;
        Ok(head)
    }

    fn live_file(&self) -> Result<Arc<dyn SegmentFile>, StorageError> {
        self.file
            .clone()
            .ok_or_else(|| StorageError::SnapshotRefused {
                offset: self.check.pos(),
                reason: "this stream was already refused or finished".into(),
            })
    }

    /// Cuts the file back to `offset` and brings the verdict back to what it was there.
    fn rewind(&mut self, file: &Arc<dyn SegmentFile>, offset: u64) -> Result<(), StorageError> {
        let path = self.dir.locate(SNAPSHOT_INCOMING);
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
            .remove(SNAPSHOT_INCOMING)
            .and_then(|()| self.dir.sync_dir());
        if let Err(e) = removed {
            // A file left behind is never read as a snapshot: the next stream's `create` replaces it.
            tracing::warn!(
                path = %self.dir.locate(SNAPSHOT_INCOMING).display(),
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
