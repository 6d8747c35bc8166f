//! The Raft snapshot stream: a durable checkpoint followed by the records its runs point at
//! (docs/storage-format.md "Raft snapshot"). Built so far: the stream format, its receiver
//! and its sender; the install and the openraft wiring are not.

mod check;
mod header;
mod receiver;
mod sender;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_generation;
#[cfg(test)]
mod tests_sender;

pub use check::AdmitFn;
pub use header::{SnapshotHeader, SNAPSHOT_HEADER_LEN, SNAPSHOT_PART_CAP};
pub use receiver::{SnapshotReceiver, SNAPSHOT_INCOMING};
pub use sender::SnapshotSource;
