//! The id files of a version-2 snapshot on the receiver (docs/storage-format.md "The id files
//! in the stream"): step 2 writes them into `ids-incoming/`, verified and durable before step
//! 3 commits; step 4 puts that directory in the place of `ids/`, step 5 deletes the old one.
//! The directory, not each file, is the unit: nothing reads `ids-incoming/` before step 3
//! committed, and a start without `raft/installing` deletes it unread.

use std::path::Path;
use std::sync::Arc;

use super::data_dir::DataDir;
use super::header::SnapshotHeader;
use super::ids_part::{decode_entry_head, ENTRY_HEAD};
use crate::backend::{IoBackend, SegmentFile};
use crate::ids::{parse_id_file_name, IdFiles};
use crate::StorageError;

/// The node's id files (the broker's `DiskIdStore` directory).
pub const IDS_DIR: &str = "ids";
pub const IDS_INCOMING: &str = "ids-incoming";
pub const IDS_OLD: &str = "ids-old";
/// What one copy takes at a time.
const COPY_BYTES: u64 = 1 << 20;

fn refused(offset: u64, reason: String) -> StorageError {
    StorageError::SnapshotRefused { offset, reason }
}

/// Deletes `ids-incoming/` if it is there and makes that durable; whether it was.
pub(crate) fn remove_ids_incoming(
    dir: &dyn DataDir,
    files: &dyn IoBackend,
) -> Result<bool, StorageError> {
    if !dir.has_dir(IDS_INCOMING) {
        return Ok(false);
    }
    dir.remove_dir_all(IDS_INCOMING)
        .map_err(StorageError::io("remove", files.locate(IDS_INCOMING)))?;
    files
        .sync_dir()
        .map_err(StorageError::io("sync", files.locate("")))?;
    Ok(true)
}

/// Step 2 of the ids. A leftover `ids-incoming/` goes first, durably, for a version-1 stream
/// too: after step 3 the directory's presence is what tells step 4 to replace `ids/`. Then
/// every file of the part is copied in, `fdatasync`ed and read whole through the id-file
/// reader (header against name and length, every block's CRC, count and order); then the
/// directory and the data directory are fsynced.
pub(crate) fn stage_ids(
    dir: &dyn DataDir,
    files: &dyn IoBackend,
    file: &Arc<dyn SegmentFile>,
    path: &Path,
    head: &SnapshotHeader,
) -> Result<(), StorageError> {
    remove_ids_incoming(dir, files)?;
    if head.ids_files == 0 {
        return Ok(());
    }
    let incoming = dir
        .make_dir(IDS_INCOMING)
        .map_err(StorageError::io("create", files.locate(IDS_INCOMING)))?;
    let end = head.stream_len();
    let mut at = head.ids_start();
    let mut prev: Option<String> = None;
    let mut buf = Vec::new();
    for _ in 0..head.ids_files {
        if end - at < ENTRY_HEAD as u64 {
            return Err(refused(at, "the ids part ends inside an entry head".into()));
        }
        let mut raw = [0u8; ENTRY_HEAD];
        file.read_at(at, &mut raw)
            .map_err(StorageError::io("read an id file entry from", path))?;
        let room = end - at - ENTRY_HEAD as u64;
        let (name, len) = decode_entry_head(&raw, room).map_err(|r| refused(at, r))?;
        if prev.as_ref().is_some_and(|p| *p >= name) {
            return Err(refused(at, format!("id file {name} out of order")));
        }
        let Some((generation, source)) = parse_id_file_name(&name) else {
            return Err(refused(at, format!("{name} is no id file name")));
        };
        let out = incoming
            .create(&name)
            .map_err(StorageError::io("create", incoming.locate(&name)))?;
        let from = at + ENTRY_HEAD as u64;
        let mut done = 0u64;
        while done < len {
            // Bounded whatever the entry claims: at most one copy piece is held.
            let n = (len - done).min(COPY_BYTES) as usize;
            buf.resize(n, 0);
            file.read_at(from + done, &mut buf)
                .map_err(StorageError::io("read an id file from", path))?;
            out.write_at(done, &buf)
                .map_err(StorageError::io("write", incoming.locate(&name)))?;
            done += n as u64;
        }
        out.sync_data()
            .map_err(StorageError::io("fdatasync", incoming.locate(&name)))?;
        // A file that does not verify is kept as sent, not refused (review s31 H1): the
        // leader sends the same bytes on every retry. Kept, it is what the leader has: the
        // group's start cannot read it and so counts its bucket as lost (lookups in that span
        // fail closed); dropped, the node would answer "new" for the ids it held.
        match IdFiles::new(incoming.clone())
            .open(generation, source)
            .and_then(|r| r.verify())
        {
            Ok(()) => {}
            Err(StorageError::CorruptIdFile { reason, block, .. }) => tracing::warn!(
                file = %name,
                block,
                reason = %reason,
                "a snapshot's id file does not verify; it is installed as sent"
            ),
            Err(e) => return Err(e),
        }
        at = from + len;
        prev = Some(name);
    }
    if at != end {
        return Err(refused(
            at,
            format!("{} bytes follow the last id file", end - at),
        ));
    }
    incoming
        .sync_dir()
        .map_err(StorageError::io("sync", incoming.locate("")))?;
    files
        .sync_dir()
        .map_err(StorageError::io("sync", files.locate("")))
}

/// Step 4 and 5 of the ids, each idempotent: `ids` aside, `ids-incoming` in its place, the
/// old one deleted. Nothing to do for an install that carried no ids part.
pub(crate) fn finish_ids(dir: &dyn DataDir) -> Result<(), StorageError> {
    let files = dir.files();
    let sync = || {
        files
            .sync_dir()
            .map_err(StorageError::io("sync", files.locate("")))
    };
    if dir.has_dir(IDS_INCOMING) {
        if dir.has_dir(IDS_DIR) {
            if dir.has_dir(IDS_OLD) {
                dir.remove_dir_all(IDS_OLD)
                    .map_err(StorageError::io("remove", files.locate(IDS_OLD)))?;
            }
            dir.rename_dir(IDS_DIR, IDS_OLD)
                .map_err(StorageError::io("rename aside", files.locate(IDS_DIR)))?;
        }
        dir.rename_dir(IDS_INCOMING, IDS_DIR)
            .map_err(StorageError::io(
                "rename into place",
                files.locate(IDS_INCOMING),
            ))?;
        sync()?;
    }
    if dir.has_dir(IDS_OLD) {
        dir.remove_dir_all(IDS_OLD)
            .map_err(StorageError::io("remove", files.locate(IDS_OLD)))?;
        sync()?;
    }
    Ok(())
}
