//! The one place this crate names the storage implementation.

pub use queenmq_storage::{SegmentLog, StateStore, StorageError, HIGHEST_INDEX};
