//! Replication's reads are byte-limited (review s14 F4): openraft asks the log reader for up
//! to `max_payload_entries` entries per append, and without a limit 300 records of 1 MiB were
//! read and encoded before the client refused them.

use openraft::storage::RaftLogStorage;
use openraft::RaftLogReader;

use crate::log_store::LogStore;
use crate::wire::APPEND_ENTRIES_MAX;

use super::fixtures::open_stores;

/// An application record of `n` body bytes, as `entry_codec` lays it out.
fn app_record(n: usize) -> Vec<u8> {
    let mut r = vec![1u8];
    r.resize(1 + n, b'x');
    r
}

#[tokio::test]
async fn a_batch_of_large_entries_stops_at_the_append_budget() {
    let dir = tempfile::tempdir().unwrap();
    let (log, store) = open_stores(dir.path());
    let record = app_record(1 << 20);
    for index in 1..=300u64 {
        log.append(index, 1, &record).unwrap();
    }
    let mut ls = LogStore::open(log, store).unwrap();
    let mut reader = ls.get_log_reader().await;

    let batch = reader.limited_get_log_entries(1, 301).await.unwrap();
    assert!(
        (1..=2).contains(&batch.len()),
        "{} entries of 1 MiB in one append",
        batch.len()
    );
    assert_eq!(batch[0].log_id.index, 1);
    // Further on, the same budget: a read never comes back empty while entries remain.
    let batch = reader.limited_get_log_entries(299, 301).await.unwrap();
    assert_eq!(batch.first().map(|e| e.log_id.index), Some(299));
    assert!(batch.len() <= 2);
    // The unlimited read is unchanged.
    assert_eq!(reader.try_get_log_entries(1..301).await.unwrap().len(), 300);
    ls.stop();
}

#[tokio::test]
async fn one_entry_over_the_budget_is_still_read_alone() {
    let dir = tempfile::tempdir().unwrap();
    let (log, store) = open_stores(dir.path());
    log.append(1, 1, &app_record(APPEND_ENTRIES_MAX as usize + 1))
        .unwrap();
    log.append(2, 1, &app_record(10)).unwrap();
    let mut ls = LogStore::open(log, store).unwrap();
    let mut reader = ls.get_log_reader().await;
    let batch = reader.limited_get_log_entries(1, 3).await.unwrap();
    assert_eq!(batch.len(), 1, "the first entry always goes, alone");
    let small = reader.limited_get_log_entries(2, 3).await.unwrap();
    assert_eq!(small.len(), 1);
    ls.stop();
}

#[tokio::test]
async fn small_entries_fill_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    let (log, store) = open_stores(dir.path());
    let record = app_record(1000);
    for index in 1..=300u64 {
        log.append(index, 1, &record).unwrap();
    }
    let mut ls = LogStore::open(log, store).unwrap();
    let mut reader = ls.get_log_reader().await;
    assert_eq!(
        reader.limited_get_log_entries(1, 301).await.unwrap().len(),
        300
    );
    ls.stop();
}
