//! The one error type of this crate. Every variant reads as a sentence and names the file,
//! offset and sizes involved, so an operator can act on it without a debugger.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StorageError {
    #[error("I/O failed while trying to {op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("the log options are invalid: {reason}")]
    InvalidOptions { reason: String },

    #[error("a record payload of {have} bytes exceeds the limit of {max} bytes")]
    RecordTooLarge { have: usize, max: u32 },

    #[error("append refused: expected index {expected}, got {got}")]
    NonContiguous { expected: u64, got: u64 },

    #[error(
        "append refused: index {got} is not available: the highest index a log holds is {} \
         (u64::MAX is reserved) and nothing follows it",
        crate::HIGHEST_INDEX
    )]
    IndexSpaceExhausted { got: u64 },

    #[error("segment {path} has an unusable header: {reason}")]
    BadSegmentHeader { path: PathBuf, reason: String },

    #[error(
        "segment {path} has format version {version}; this build reads only version {supported}"
    )]
    UnsupportedVersion {
        path: PathBuf,
        version: u8,
        supported: u8,
    },

    #[error("record at offset {offset} of {path} is corrupt: {reason}")]
    CorruptRecord {
        path: PathBuf,
        offset: u64,
        reason: String,
    },

    #[error(
        "the log refuses writes because an earlier fsync failed; reopen it to recover from disk"
    )]
    Poisoned,

    #[error("the state store failed while trying to {op}: {source}")]
    State {
        op: &'static str,
        #[source]
        source: Box<redb::Error>,
    },

    #[error(
        "id file {path} is damaged at block {block}: {reason}; it is not trusted and must be \
         written again from its segment"
    )]
    CorruptIdFile {
        path: PathBuf,
        block: u64,
        reason: String,
    },

    #[error("the snapshot stream was refused at byte {offset}: {reason}")]
    SnapshotRefused { offset: u64, reason: String },

    #[error("no snapshot can be streamed: {reason}")]
    SnapshotUnavailable { reason: String },

    #[error("the checkpoint was not saved: {reason}")]
    CheckpointRefused { reason: String },

    #[error(
        "a snapshot install staged at index {applied_index} is not finished, so {refused}; \
         reopening the group (or restarting the node) finishes it first"
    )]
    InstallPending {
        applied_index: u64,
        refused: &'static str,
    },

    #[error("the stored checkpoint is corrupt: {reason}")]
    CorruptCheckpoint { reason: String },

    #[error(
        "refusing to start: recovery would drop acknowledged {0}. Restore the data directory \
         from a backup or replica, or start once with accept_data_loss=true \
         (QUEEN_ACCEPT_DATA_LOSS=true, --accept-data-loss) to drop them"
    )]
    DataLoss(Box<crate::LogLoss>),
}

impl StorageError {
    pub(crate) fn io(
        op: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| StorageError::Io { op, path, source }
    }

    /// The file is open elsewhere (redb's lock): in use, not damaged. Whoever sees this must
    /// not move the file aside or rebuild it.
    pub fn is_in_use(&self) -> bool {
        matches!(self, StorageError::State { source, .. }
            if matches!(**source, redb::Error::DatabaseAlreadyOpen))
    }

    pub(crate) fn state<E: Into<redb::Error>>(op: &'static str) -> impl FnOnce(E) -> Self {
        move |e| StorageError::State {
            op,
            source: Box::new(e.into()),
        }
    }
}
