//! Steps 2-5 of a snapshot install on the receiver, each durable before the next, and the
//! start-up that finishes an interrupted one (docs/storage-format.md "Install on the
//! receiver", "A crash, or a file that no longer verifies"): `stage_install` runs steps 2-3
//! under the live log, `finish_interrupted_install` steps 4-5 at the group's next open, with
//! the log closed between.

use std::sync::Arc;

use super::data_dir::DataDir;
use super::header::{header_len_of, SnapshotHeader, SNAPSHOT_HEADER_V2_LEN};
use super::install_ids::{finish_ids, remove_ids_incoming, stage_ids};
use super::receiver::SNAPSHOT_INCOMING;
use crate::backend::{IoBackend, SegmentFile};
use crate::format::{decode_body, le_u32, record_len, LEN_FIELD};
use crate::state::{Installing, StateSink};
use crate::{LogOptions, SegmentLog, StateStore, StorageError};

pub const LOG_DIR: &str = "log";
pub const LOG_INCOMING: &str = "log-incoming";
pub const LOG_OLD: &str = "log-old";
/// What one read of the file takes at a time.
const READ_BYTES: usize = 1 << 20;

/// What an install did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Installed {
    pub header: SnapshotHeader,
    /// Whether `log` was replaced by the snapshot's records (false: the log was kept).
    pub switched: bool,
}

/// Stages the finished `snapshot-incoming` of `dir`: steps 2 and 3, up to `raft/installing`
/// committed. `log` is the live log in `dir/log`, read only to decide whether it is kept;
/// `meta` are the Raft rows step 3 writes with the state (the purge horizon and the
/// snapshot's membership, in the Raft crate's encodings); `opts` open `log-incoming`;
/// `expect` is the `(A, term)` the Raft layer was told the snapshot covers, which the file's
/// header must name.
///
/// Steps 4 and 5 are not run here: they rename `log` aside, which must not happen under an
/// open `SegmentLog` (review s21 M2). After Ok the caller closes `log` and every reader of it
/// and runs [`finish_interrupted_install`] before anything opens `log/` again (the group's
/// reopen does); until then checkpoint saves and further installs are refused
/// (`InstallPending`). Any other error leaves the node's state and log as they were, with
/// `snapshot-incoming` and `log-incoming` deleted: the sender may send again.
pub fn stage_install(
    dir: &dyn DataDir,
    store: &StateStore,
    log: &SegmentLog,
    opts: LogOptions,
    meta: &[(&str, &[u8])],
    expect: (u64, u64),
) -> Result<Installed, StorageError> {
    // One stage at a time: a second one running beside this would replace the
    // `log-incoming` this one builds before either commits (review s22 snapshot M2).
    let _one_at_a_time = store.stage_lock();
    // An unfinished install owns `log-incoming`: refused before anything is deleted (M1).
    refuse_while_pending(store)?;
    let files = dir.files();
    match stage(dir, &*files, store, log, opts, meta, expect) {
        Ok((header, switched)) => Ok(Installed { header, switched }),
        Err(e @ StorageError::InstallPending { .. }) => Err(e),
        Err(e) => {
            discard_incoming(dir);
            Err(e)
        }
    }
}

/// An unfinished install owns `log-incoming`: no other stage may begin until a reopen
/// finishes it (review s22 M1).
fn refuse_while_pending(store: &StateStore) -> Result<(), StorageError> {
    match store.installing()? {
        Some(i) => Err(StorageError::InstallPending {
            applied_index: i.applied_index,
            refused: "no other snapshot is installed",
        }),
        None => Ok(()),
    }
}

/// The checks of a stage that read no record: the file's header against its length and
/// `expect`, and whether this node is already past the snapshot (the state of a checkpoint
/// generation is read only when its header is at or past the snapshot). Cheap, so the
/// Raft layer runs them before it holds its appends back (review s23 M2); `stage_install`
/// runs them again under that hold. On a refusal the files of the stream are deleted.
pub fn precheck_install(
    dir: &dyn DataDir,
    store: &StateStore,
    log: &SegmentLog,
    expect: (u64, u64),
) -> Result<(), StorageError> {
    let _one_at_a_time = store.stage_lock();
    refuse_while_pending(store)?;
    let files = dir.files();
    open_checked(&*files, store, log, expect)
        .map(drop)
        .inspect_err(|_| discard_incoming(dir))
}

type Opened = (Arc<dyn SegmentFile>, std::path::PathBuf, SnapshotHeader);

/// `snapshot-incoming` opened, with `precheck_install`'s checks passed.
fn open_checked(
    files: &dyn IoBackend,
    store: &StateStore,
    log: &SegmentLog,
    expect: (u64, u64),
) -> Result<Opened, StorageError> {
    let path = files.locate(SNAPSHOT_INCOMING);
    let file = files
        .open(SNAPSHOT_INCOMING)
        .map_err(StorageError::io("open", &path))?;
    let mut raw = [0u8; SNAPSHOT_HEADER_V2_LEN];
    file.read_at(0, &mut raw[..5])
        .map_err(StorageError::io("read the header of", &path))?;
    let head_len = header_len_of(raw[4]).unwrap_or(5);
    file.read_at(0, &mut raw[..head_len])
        .map_err(StorageError::io("read the header of", &path))?;
    let head = SnapshotHeader::decode(&raw[..head_len])
        .map_err(|reason| StorageError::SnapshotRefused { offset: 0, reason })?;
    let len = file.len().map_err(StorageError::io("size", &path))?;
    if len != head.stream_len() {
        return Err(refused(
            len,
            format!(
                "the file holds {len} bytes, its header {}",
                head.stream_len()
            ),
        ));
    }
    let (a, term) = (head.applied_index, head.applied_term);
    if (a, term) != expect {
        return Err(refused(
            0,
            format!(
                "the file covers ({a}, {term}), the snapshot it was sent as ({}, {})",
                expect.0, expect.1
            ),
        ));
    }
    // Review s22 H1: a node already past A has nothing to gain and much to lose. Its log
    // starting above A (reclaimed past it) would look like a log lacking A and be replaced,
    // deleting entries after A that may be acknowledged; a checkpoint at or past A would be
    // set back to A under a log and a `raft/committed` that are ahead of it.
    if let Some(first) = log.first_index().filter(|&first| first > a) {
        return Err(refused(
            0,
            format!(
                "the log starts at index {first}, above the snapshot's last index {a}: this \
                 node is past the snapshot"
            ),
        ));
    }
    if let Some(at) = store.usable_checkpoint_at_or_past(a)? {
        return Err(refused(
            0,
            format!(
                "this node's checkpoint is at index {at}, at or past the snapshot's last \
                 index {a}"
            ),
        ));
    }
    Ok((file, path, head))
}

/// Steps 2 and 3; nothing the node starts on has changed unless this returns Ok.
fn stage(
    dir: &dyn DataDir,
    files: &dyn IoBackend,
    store: &StateStore,
    log: &SegmentLog,
    opts: LogOptions,
    meta: &[(&str, &[u8])],
    expect: (u64, u64),
) -> Result<(SnapshotHeader, bool), StorageError> {
    let (file, path, head) = open_checked(files, store, log, expect)?;
    let (a, term, f) = (head.applied_index, head.applied_term, head.first_record);
    // Step 2: by Log Matching a log holding A in the same term holds the sender's records up
    // to A, and records after A may have been acknowledged: it stays. The lease keeps a
    // reclamation from deleting records from F on between this check and step 3's commit
    // (review s21 M3); it fails when the log already starts above F.
    let holds_a = log.term_of(a) == Some(term);
    let _lease = if holds_a {
        Some(log.lease_floor(f).map_err(|_| {
            // Replacing it would drop records after A that may be acknowledged; keeping it
            // would leave checkpoint runs naming records F.. it lacks (review s21 M4).
            refused(
                0,
                format!(
                    "the log holds ({a}, {term}) but starts at {:?}, above the snapshot's first \
                     record {f}: neither kept nor replaced",
                    log.first_index()
                ),
            )
        })?)
    } else {
        None
    };
    let keep = holds_a;
    if !keep {
        if dir.has_dir(LOG_INCOMING) {
            dir.remove_dir_all(LOG_INCOMING)
                .map_err(StorageError::io("remove", files.locate(LOG_INCOMING)))?;
        }
        let incoming = dir
            .make_dir(LOG_INCOMING)
            .map_err(StorageError::io("create", files.locate(LOG_INCOMING)))?;
        let opts = LogOptions {
            durable_through: 0,
            accept_data_loss: false,
            ..opts
        };
        let (new_log, _) = SegmentLog::open_with_backend(incoming, opts)?;
        copy_records(&file, &path, &head, &new_log, opts.max_record_bytes)?;
        new_log.sync()?;
        files.sync_dir().map_err(StorageError::io(
            "sync the directory of",
            files.locate(LOG_INCOMING),
        ))?;
    }
    // Step 2 of the ids: the sender's id files into `ids-incoming/`, or none left there, so
    // that after step 3 the directory's presence says whether step 4 replaces `ids/`.
    stage_ids(dir, files, &file, &path, &head)?;
    // Step 3.
    let install = Installing {
        applied_index: a,
        applied_term: term,
        first_record: f,
        switch: !keep,
    };
    let mut fill = |sink: &mut StateSink<'_>| read_state(&file, &path, &head, sink);
    store.commit_install(&install, head.state_len, head.state_crc, &mut fill, meta)?;
    Ok((head, !keep))
}

fn refused(offset: u64, reason: String) -> StorageError {
    StorageError::SnapshotRefused { offset, reason }
}

/// The state bytes of the file into `sink`, a piece at a time.
fn read_state(
    file: &Arc<dyn SegmentFile>,
    path: &std::path::Path,
    head: &SnapshotHeader,
    sink: &mut StateSink<'_>,
) -> Result<(), StorageError> {
    let mut buf = vec![0u8; READ_BYTES];
    let mut at = 0u64;
    while at < head.state_len {
        let n = buf.len().min((head.state_len - at) as usize);
        file.read_at(head.header_len() as u64 + at, &mut buf[..n])
            .map_err(StorageError::io("read the state from", path))?;
        sink.write(&buf[..n]);
        at += n as u64;
    }
    Ok(())
}

/// Records `F..=A` of the file into `log`, each verified (length, CRC32C, index, term).
fn copy_records(
    file: &Arc<dyn SegmentFile>,
    path: &std::path::Path,
    head: &SnapshotHeader,
    log: &SegmentLog,
    max_record_bytes: u32,
) -> Result<(), StorageError> {
    let start = head.header_len() as u64 + head.state_len;
    let end = start + head.records_len;
    let mut at = start;
    let mut next = head.first_record;
    // Terms never fall along a log (review s21 L4).
    let mut prev_term = 0;
    let mut body = Vec::new();
    while at < end {
        if end - at < LEN_FIELD {
            return Err(refused(at, "the records end inside a length field".into()));
        }
        let mut len_field = [0u8; LEN_FIELD as usize];
        file.read_at(at, &mut len_field)
            .map_err(StorageError::io("read a record from", path))?;
        let len = u64::from(le_u32(&len_field));
        // Checked before the buffer grows: the file is read again, not trusted.
        let most = record_len(max_record_bytes as usize) - LEN_FIELD;
        if len > most || len > end - at - LEN_FIELD {
            return Err(refused(
                at,
                format!("a record of {len} bytes: above {most} or past the file's records"),
            ));
        }
        body.resize(len as usize, 0);
        file.read_at(at + LEN_FIELD, &mut body)
            .map_err(StorageError::io("read a record from", path))?;
        let r = decode_body(&body).map_err(|reason| refused(at, reason))?;
        if r.index != next || r.term > head.applied_term || r.term < prev_term {
            return Err(refused(
                at,
                format!(
                    "record ({}, {}) where index {next} was due in a term from {prev_term} to {}",
                    r.index, r.term, head.applied_term
                ),
            ));
        }
        log.append(r.index, r.term, r.payload)?;
        prev_term = r.term;
        next += 1;
        at += LEN_FIELD + len;
    }
    let carried = head.first_record <= head.applied_index;
    if next != head.applied_index.saturating_add(1)
        || (carried && log.term_of(head.applied_index) != Some(head.applied_term))
    {
        return Err(refused(
            at,
            format!(
                "the records end at index {} of term {:?}, not at ({}, {})",
                next.saturating_sub(1),
                log.last().map(|(_, t)| t),
                head.applied_index,
                head.applied_term
            ),
        ));
    }
    Ok(())
}

/// Steps 4 and 5, each idempotent: rename only what is still there, delete what is left.
fn finish_steps_4_and_5(
    dir: &dyn DataDir,
    store: &StateStore,
    switch: bool,
) -> Result<(), StorageError> {
    let files = dir.files();
    let sync = || {
        files
            .sync_dir()
            .map_err(StorageError::io("sync", files.locate("")))
    };
    finish_ids(dir)?;
    if switch && dir.has_dir(LOG_INCOMING) {
        if dir.has_dir(LOG_DIR) {
            if dir.has_dir(LOG_OLD) {
                dir.remove_dir_all(LOG_OLD)
                    .map_err(StorageError::io("remove", files.locate(LOG_OLD)))?;
            }
            dir.rename_dir(LOG_DIR, LOG_OLD)
                .map_err(StorageError::io("rename aside", files.locate(LOG_DIR)))?;
        }
        dir.rename_dir(LOG_INCOMING, LOG_DIR)
            .map_err(StorageError::io(
                "rename into place",
                files.locate(LOG_INCOMING),
            ))?;
        sync()?;
    }
    if dir.has_dir(LOG_OLD) {
        dir.remove_dir_all(LOG_OLD)
            .map_err(StorageError::io("remove", files.locate(LOG_OLD)))?;
    }
    remove_incoming_files(&*files)?;
    sync()?;
    store.clear_installing()
}

/// Deletes every `snapshot-incoming*` file; whether any was there.
fn remove_incoming_files(files: &dyn IoBackend) -> Result<bool, StorageError> {
    let names = files
        .list()
        .map_err(StorageError::io("list", files.locate("")))?;
    let mut any = false;
    for name in names.iter().filter(|n| n.starts_with(SNAPSHOT_INCOMING)) {
        files
            .remove(name)
            .map_err(StorageError::io("remove", files.locate(name)))?;
        any = true;
    }
    Ok(any)
}

/// Deletes the files of a stream that will not be installed (`snapshot-incoming*` and
/// `log-incoming`). Before step 3 commits nothing depends on these: best effort, the start-up
/// removes what is left. Never while an install is staged: its `log-incoming` is the log.
pub fn discard_incoming(dir: &dyn DataDir) {
    let files = dir.files();
    let mut result = remove_incoming_files(&*files).map(drop);
    if result.is_ok() && dir.has_dir(LOG_INCOMING) {
        result = dir
            .remove_dir_all(LOG_INCOMING)
            .map_err(StorageError::io("remove", files.locate(LOG_INCOMING)));
    }
    if result.is_ok() {
        result = remove_ids_incoming(dir, &*files).map(drop);
    }
    if let Err(e) = result.and_then(|()| {
        files
            .sync_dir()
            .map_err(StorageError::io("sync", files.locate("")))
    }) {
        tracing::warn!(error = %e, "a refused snapshot install left files behind; the next start removes them");
    }
}

/// The start-up step, before `SegmentLog::open` of `log/` and before the Raft log store's
/// interrupted-purge finish: an install whose step 3 committed is finished (steps 4 and 5);
/// otherwise every `snapshot-incoming*` and `log-incoming` is deleted unread. Returns the
/// install it finished, if any.
pub fn finish_interrupted_install(
    dir: &dyn DataDir,
    store: &StateStore,
) -> Result<Option<Installing>, StorageError> {
    if let Some(install) = store.installing()? {
        tracing::warn!(
            applied_index = install.applied_index,
            switch = install.switch,
            "finishing a snapshot install a crash interrupted"
        );
        finish_steps_4_and_5(dir, store, install.switch)?;
        return Ok(Some(install));
    }
    let files = dir.files();
    let mut any = remove_incoming_files(&*files)?;
    if dir.has_dir(LOG_INCOMING) {
        dir.remove_dir_all(LOG_INCOMING)
            .map_err(StorageError::io("remove", files.locate(LOG_INCOMING)))?;
        any = true;
    }
    // The id files of an install whose step 3 never committed.
    any |= remove_ids_incoming(dir, &*files)?;
    if any {
        files
            .sync_dir()
            .map_err(StorageError::io("sync", files.locate("")))?;
    }
    Ok(None)
}
