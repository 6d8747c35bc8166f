//! The Raft snapshot stream: a durable checkpoint followed by the records its runs point at
//! (docs/storage-format.md "Raft snapshot"). Built so far: the stream format and its
//! receiver; the sender, the install and the openraft wiring are not.

mod check;
mod header;
mod receiver;
#[cfg(test)]
mod tests;

pub use check::AdmitFn;
pub use header::{SnapshotHeader, SNAPSHOT_HEADER_LEN, SNAPSHOT_PART_CAP};
pub use receiver::{SnapshotReceiver, SNAPSHOT_INCOMING};
