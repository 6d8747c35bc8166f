//! The one place this crate names the storage implementation, so switching from the temporary
//! stand-in to `queenmq-storage` is a one-line change.

pub use crate::stand_in::{LogOptions, SegmentLog, StateStore, StorageError};
