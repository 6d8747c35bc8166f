//! The log ids `LogStore::open` reads from the state store are held to the log's index space
//! (review s17 S2): a purge horizon or committed id past `HIGHEST_INDEX` is damage.

use openraft::storage::RaftLogStorage;

use crate::log_store::LogStore;
use crate::meta;
use crate::types::log_id;

use super::fixtures::filled_then_stopped;

fn refusal(key: &str, e: impl std::fmt::Display) {
    let text = e.to_string();
    assert!(text.contains(key), "{text}");
    assert!(text.contains("past the highest index"), "{text}");
}

/// Before the check, the interrupted-purge finish took a horizon at u64::MAX as "every record
/// is stale" and deleted the whole log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_horizon_past_the_highest_index_refuses_the_open_and_keeps_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let (log, store) = filled_then_stopped(dir.path()).await;
    let before = (log.first_index(), log.last());
    let term = log.last().unwrap().1;
    meta::put(
        &store,
        meta::PURGED,
        &Some(log_id(term, u64::MAX)),
        openraft::ErrorSubject::Logs,
    )
    .unwrap();

    let Err(e) = LogStore::open(log.clone(), store.clone()) else {
        panic!("a purge horizon at u64::MAX was taken");
    };
    refusal(meta::PURGED, e);
    assert_eq!(
        (log.first_index(), log.last()),
        before,
        "the log was changed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committed_id_past_the_highest_index_refuses_the_open() {
    let dir = tempfile::tempdir().unwrap();
    let (log, store) = filled_then_stopped(dir.path()).await;
    let before = (log.first_index(), log.last());
    let term = log.last().unwrap().1;
    let committed = Some(log_id(term, u64::MAX));
    meta::put(
        &store,
        meta::COMMITTED,
        &committed,
        openraft::ErrorSubject::Store,
    )
    .unwrap();

    let Err(e) = LogStore::open(log.clone(), store.clone()) else {
        panic!("a committed id at u64::MAX was taken");
    };
    refusal(meta::COMMITTED, e);
    assert_eq!(
        (log.first_index(), log.last()),
        before,
        "the log was changed"
    );

    // At the highest index itself the ids are in range: the open goes on.
    meta::put(
        &store,
        meta::COMMITTED,
        &Some(log_id(term, crate::backend::HIGHEST_INDEX)),
        openraft::ErrorSubject::Store,
    )
    .unwrap();
    let mut opened = LogStore::open(log.clone(), store.clone()).unwrap();
    // read_committed never names an index past the last record present.
    assert_eq!(opened.read_committed().await.unwrap(), None);
    opened.stop();
}
