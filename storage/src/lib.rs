//! Segment log files and the redb state store of QueenMQ. Bytes and ids only: no protocol,
//! Raft or engine types cross this crate's API.
//!
//! docs/storage-format.md describes every byte this crate writes.

// Tests may unwrap: a panic there is the failure report.
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod backend;
mod error;
mod format;
#[doc(hidden)]
pub mod fuzzing;
mod ids;
mod log;
mod options;
mod snapshot;
mod state;
mod sync;
#[cfg(test)]
mod tests_first_start;

pub use backend::{
    create_dir_durable, sync_parent, FileBackend, IoBackend, MemBackend, SegmentFile,
};
pub use error::StorageError;
pub use format::{segment_name as segment_file_name, HIGHEST_INDEX};
pub use ids::{
    id_file_name, parse_id_file_name, FilterFile, FilterName, IdFileReader, IdFiles, IdSource,
    PairCursor, NO_PREV as NO_PREV_FILTER,
};
pub use log::{FloorLease, SegmentLog};
pub use options::{LogLoss, LogOptions, RecoveryReport, TornTail};
pub use snapshot::{
    discard_incoming, finish_interrupted_install, precheck_install, remove_send_links,
    stage_install, AdmitFn, DataDir, DiskDataDir, Installed, SnapshotHeader, SnapshotReceiver,
    SnapshotSource, ENTRY_HEAD, IDS_DIR, IDS_INCOMING, IDS_OLD, LOG_DIR, LOG_INCOMING, LOG_OLD,
    MAX_IDS_FILES, SNAPSHOT_HEADER_LEN, SNAPSHOT_HEADER_V2_LEN, SNAPSHOT_INCOMING,
    SNAPSHOT_PART_CAP,
};
pub use state::{
    Checkpoint, FillState, Generation, GenerationHead, Installing, StateSink, StateStore,
    StateView, Streamable, CHECKPOINT_CHUNK_BYTES, INSTALLING_KEY, MEMBERSHIP_KEY,
    STATE_CACHE_BYTES, STATE_MIN_CACHE_BYTES,
};
