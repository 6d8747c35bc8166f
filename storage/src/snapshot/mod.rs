//! The Raft snapshot stream: a durable checkpoint followed by the records its runs point at
//! (docs/storage-format.md "Raft snapshot"). Built so far: the stream format, its receiver,
//! its sender and the install (not called by openraft yet).

mod check;
mod data_dir;
mod header;
mod ids_part;
mod install;
mod install_ids;
mod receiver;
mod sender;
mod sender_ids;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_generation;
#[cfg(test)]
mod tests_ids;
#[cfg(test)]
mod tests_install;
#[cfg(test)]
mod tests_sender;

pub use check::AdmitFn;
pub use data_dir::{DataDir, DiskDataDir};
pub use header::{
    header_len_of, SnapshotHeader, SNAPSHOT_HEADER_LEN, SNAPSHOT_HEADER_V2_LEN, SNAPSHOT_PART_CAP,
};
pub use ids_part::{encode_entry_head, ENTRY_HEAD, MAX_IDS_FILES};
pub use install::{
    discard_incoming, finish_interrupted_install, precheck_install, stage_install, Installed,
    LOG_DIR, LOG_INCOMING, LOG_OLD,
};
pub use install_ids::{IDS_DIR, IDS_INCOMING, IDS_OLD};
pub use receiver::{SnapshotReceiver, SNAPSHOT_INCOMING};
pub use sender::SnapshotSource;
pub use sender_ids::remove_send_links;
