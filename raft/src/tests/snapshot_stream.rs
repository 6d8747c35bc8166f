//! The sender's stream through the node's log store: its floor lease holds the records against
//! reclamation until the reader is dropped, and the stage-1 receiver accepts what it yields.

use std::io::SeekFrom;
use std::sync::Arc;

use queenmq_storage::{IoBackend, MemBackend, SnapshotReceiver, SNAPSHOT_INCOMING};
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

use super::fixtures::{fill, open_small_segments, reclaim, start_fresh};
use crate::SnapshotReader;

/// Reads the whole stream in chunks of `chunk` into a receiver; the file it kept.
async fn through_receiver(reader: &mut SnapshotReader, chunk: usize) -> Vec<u8> {
    let mem = MemBackend::new();
    let dir: Arc<dyn IoBackend> = Arc::new(mem.clone());
    let mut rx = SnapshotReceiver::create(dir, 1 << 20, Box::new(|_| Ok(()))).unwrap();
    pump(reader, &mut rx, chunk).await;
    rx.finish().unwrap();
    mem.file_bytes(SNAPSHOT_INCOMING).unwrap()
}

/// Writes the whole stream into `rx` in reads of `chunk` bytes, each at its offset.
pub(super) async fn pump(reader: &mut SnapshotReader, rx: &mut SnapshotReceiver, chunk: usize) {
    let mut buf = vec![0u8; chunk];
    let mut at = 0u64;
    loop {
        let n = reader.read(&mut buf).await.unwrap();
        if n == 0 {
            break;
        }
        rx.write_at(at, &buf[..n]).unwrap();
        at += n as u64;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_holds_its_records_against_reclamation_until_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let (log, store) = open_small_segments(dir.path());
    let node = start_fresh(&log, &store).await;
    fill(&node, &log).await;
    let (applied, term) = log.last().unwrap();
    let state: Vec<u8> = (0..9000u32).map(|i| i as u8).collect();
    let floor = 60;
    store
        .save_checkpoint_with_floor(applied, term, floor, |sink| sink.write(&state))
        .unwrap();
    let ls = node.log_store().clone();
    let source = tokio::task::spawn_blocking(move || ls.snapshot_source(applied))
        .await
        .unwrap()
        .unwrap();
    let mut reader = SnapshotReader::new(source);
    assert_eq!(reader.header().first_record, floor);

    // The reclaimer deletes what lies below the floor, nothing at or above it.
    let before = log.segment_count();
    assert!(reclaim(&node, applied).await > 0);
    assert!(log.segment_count() < before);
    let first = log.first_index().unwrap();
    assert!(first <= floor && first > 1, "first {first}, floor {floor}");
    assert_eq!(node.sealed_segment_of(floor), None);

    let file = through_receiver(&mut reader, 3 << 20).await;
    assert_eq!(file.len() as u64, reader.header().stream_len());
    assert_eq!(&file[56..56 + state.len()], &state[..]);
    // A chunk asked for again at an earlier offset reads the same bytes.
    reader.seek(SeekFrom::Start(100)).await.unwrap();
    let mut again = vec![0u8; 1000];
    reader.read_exact(&mut again).await.unwrap();
    assert_eq!(&again[..], &file[100..1100]);
    reader.seek(SeekFrom::Start(0)).await.unwrap();
    assert_eq!(through_receiver(&mut reader, 777).await, file);
    // Its writes fail: a sender's stream is read only.
    assert!(reader.write_all(b"x").await.is_err());

    drop(reader);
    assert!(reclaim(&node, applied).await > 0);
    assert!(
        log.first_index().unwrap() > floor,
        "the lease outlived its reader"
    );
    node.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_from_reclaimed_records_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (log, store) = open_small_segments(dir.path());
    let node = start_fresh(&log, &store).await;
    fill(&node, &log).await;
    let (applied, term) = log.last().unwrap();
    store
        .save_checkpoint_with_floor(applied, term, 2, |sink| sink.write(&[1; 10]))
        .unwrap();
    assert!(reclaim(&node, 60).await > 0);
    let ls = node.log_store().clone();
    let refused = tokio::task::spawn_blocking(move || ls.snapshot_source(applied))
        .await
        .unwrap();
    assert!(
        matches!(
            refused,
            Err(queenmq_storage::StorageError::SnapshotUnavailable { .. })
        ),
        "{:?}",
        refused.err()
    );
    node.shutdown().await.unwrap();
}
