//! Raft's small durable facts in the StateStore's meta table, one key each, serde_json values.
//! These calls block on redb's commit (an fsync); async callers run them via `blocking`.

// openraft's storage traits return `openraft::StorageError` (~200 bytes) by value; helpers
// return the same type so `?` reaches the trait boundary without boxing and unboxing.
#![allow(clippy::result_large_err)]

use std::sync::Arc;

use openraft::{ErrorSubject, ErrorVerb};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::backend::StateStore;
use crate::types::{io_err as err, OrStorageError};

pub const VOTE: &str = "raft/vote";
pub const COMMITTED: &str = "raft/committed";
pub const PURGED: &str = "raft/purged";
/// The same row the storage crate copies into each checkpoint generation it saves.
pub const MEMBERSHIP: &str = queenmq_storage::MEMBERSHIP_KEY;
/// `true` once any membership naming more than one node was appended, applied, installed or
/// found at start: reclamation stays refused for good (review s12 F6), whatever membership a
/// later truncation or restart shows. Cleared by nothing: there is no operator switch either
/// (docs/raft-storage.md). A membership change openraft refuses never writes it.
pub const MULTI_NODE: &str = "raft/multi_node";

/// Whether the snapshot last installed here (`LogStore::stage_install`, in the same commit as
/// its membership) was taken before this node was added: its membership does not name the
/// node, and the entry adding it follows `A` (review s27 snap second pass M2). Written `true`
/// or `false` by every install; set back to `false` by the first start whose stored
/// membership names the node. A start may hold a membership not naming this node only while
/// it is `true` (`cluster_start::may_predate_addition`).
pub const INSTALLED_BEFORE_ADDITION: &str = "raft/installed_before_addition";

/// Whether `INSTALLED_BEFORE_ADDITION` is set.
pub fn installed_before_addition(store: &StateStore) -> Result<bool, OrStorageError> {
    Ok(get::<bool>(store, INSTALLED_BEFORE_ADDITION, ErrorSubject::Store)?.unwrap_or(false))
}

/// Whether `MULTI_NODE` was ever written.
pub fn multi_node_noted(store: &StateStore) -> Result<bool, OrStorageError> {
    Ok(get::<bool>(store, MULTI_NODE, ErrorSubject::Store)?.unwrap_or(false))
}

/// Writes `MULTI_NODE` (a redb commit): reclamation is refused from now on, restarts included.
pub fn note_multi_node(store: &StateStore) -> Result<(), OrStorageError> {
    put(store, MULTI_NODE, &true, ErrorSubject::Store)
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

/// What Raft has stored durably that says the log once held entries: read at start, before
/// the log is opened, so a log that lost acknowledged entries is refused instead of served.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Persisted {
    /// A vote was saved (the node has taken part in an election).
    pub vote: bool,
    /// The persisted committed index: every entry up to it was flushed and acknowledged. It
    /// may lag the real commit (see `committed_saver`), never lead it.
    pub committed: Option<u64>,
    /// The Raft purge horizon: every entry up to it is covered by the applied state (a
    /// snapshot install writes it at the snapshot's last index).
    pub purged: Option<u64>,
}

/// For a start the operator accepted with the log's first entries gone below `first`, under a
/// checkpoint that covers them: moves the purge horizon to just below `first`, as a purge
/// would have, so openraft reads the log from `first` instead of failing on index 0. `term`
/// is the term of the record at `first`; the gone entry's own term is unknown, and no earlier
/// entry's term is higher. A horizon already at or past that point is left alone.
pub fn accept_missing_log_start(store: &StateStore, first: u64, term: u64) -> Result<(), String> {
    let Some(below) = first.checked_sub(1) else {
        return Ok(());
    };
    let purged: Option<crate::types::RaftLogId> =
        get(store, PURGED, ErrorSubject::Logs).map_err(|e| format!("reading {PURGED}: {e}"))?;
    if purged.is_some_and(|p| p.index >= below) {
        return Ok(());
    }
    put(
        store,
        PURGED,
        &crate::types::log_id(term, below),
        ErrorSubject::Logs,
    )
    .map_err(|e| format!("writing {PURGED}: {e}"))
}

/// Reads `Persisted` from the state store; an unreadable value is an error naming its key.
pub fn read_persisted(store: &StateStore) -> Result<Persisted, String> {
    let vote: Option<openraft::Vote<u64>> =
        get(store, VOTE, ErrorSubject::Vote).map_err(|e| format!("reading {VOTE}: {e}"))?;
    let committed: Option<Option<crate::types::RaftLogId>> =
        get(store, COMMITTED, ErrorSubject::Store)
            .map_err(|e| format!("reading {COMMITTED}: {e}"))?;
    let purged: Option<crate::types::RaftLogId> =
        get(store, PURGED, ErrorSubject::Logs).map_err(|e| format!("reading {PURGED}: {e}"))?;
    Ok(Persisted {
        vote: vote.is_some(),
        committed: committed.flatten().map(|c| c.index),
        purged: purged.map(|p| p.index),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::log_id;

    #[test]
    fn persisted_facts_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(&dir.path().join("s.redb")).unwrap();
        assert_eq!(read_persisted(&store).unwrap(), Persisted::default());
        put(&store, COMMITTED, &Some(log_id(2, 41)), ErrorSubject::Store).unwrap();
        put(&store, VOTE, &openraft::Vote::new(2, 1), ErrorSubject::Vote).unwrap();
        let p = read_persisted(&store).unwrap();
        assert_eq!((p.vote, p.committed), (true, Some(41)));
        store.put_meta(COMMITTED, b"not json").unwrap();
        assert!(read_persisted(&store).unwrap_err().contains(COMMITTED));
    }

    #[test]
    fn an_accepted_missing_log_start_moves_the_purge_horizon_only_forward() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(&dir.path().join("s.redb")).unwrap();
        let purged = |s: &StateStore| -> Option<crate::types::RaftLogId> {
            get(s, PURGED, ErrorSubject::Logs).unwrap()
        };
        accept_missing_log_start(&store, 0, 1).unwrap();
        assert_eq!(purged(&store), None);
        accept_missing_log_start(&store, 18, 2).unwrap();
        assert_eq!(purged(&store), Some(log_id(2, 17)));
        accept_missing_log_start(&store, 10, 3).unwrap();
        assert_eq!(purged(&store), Some(log_id(2, 17)));
    }
}
