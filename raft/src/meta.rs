//! Raft's small durable facts in the StateStore's meta table, one key each, serde_json values.
//! These calls block on redb's commit (an fsync); async callers run them via `blocking`.

// openraft's storage traits return `openraft::StorageError` (~200 bytes) by value; helpers
// return the same type so `?` reaches the trait boundary without boxing and unboxing.
#![allow(clippy::result_large_err)]

use std::sync::Arc;

use openraft::{AnyError, ErrorSubject, ErrorVerb, StorageIOError};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::backend::StateStore;
use crate::types::OrStorageError;

pub const VOTE: &str = "raft/vote";
pub const COMMITTED: &str = "raft/committed";
pub const PURGED: &str = "raft/purged";
pub const MEMBERSHIP: &str = "raft/membership";

fn err(subject: ErrorSubject<u64>, verb: ErrorVerb, e: impl Into<AnyError>) -> OrStorageError {
    StorageIOError::new(subject, verb, e).into()
}

pub fn get<T: DeserializeOwned>(
    store: &StateStore,
    key: &str,
    subject: ErrorSubject<u64>,
) -> Result<Option<T>, OrStorageError> {
    let Some(bytes) = store
        .get_meta(key)
        .map_err(|e| err(subject.clone(), ErrorVerb::Read, &e))?
    else {
        return Ok(None);
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| err(subject, ErrorVerb::Read, &e))
}

pub fn put<T: Serialize>(
    store: &StateStore,
    key: &str,
    value: &T,
    subject: ErrorSubject<u64>,
) -> Result<(), OrStorageError> {
    let bytes =
        serde_json::to_vec(value).map_err(|e| err(subject.clone(), ErrorVerb::Write, &e))?;
    store
        .put_meta(key, &bytes)
        .map_err(|e| err(subject, ErrorVerb::Write, &e))
}

/// Runs a blocking StateStore write off the async runtime, keeping its result.
pub async fn blocking<R, F>(
    store: &Arc<StateStore>,
    subject: ErrorSubject<u64>,
    f: F,
) -> Result<R, OrStorageError>
where
    F: FnOnce(&StateStore) -> Result<R, OrStorageError> + Send + 'static,
    R: Send + 'static,
{
    let store = store.clone();
    tokio::task::spawn_blocking(move || f(&store))
        .await
        .map_err(|e| err(subject, ErrorVerb::Write, &e))?
}
