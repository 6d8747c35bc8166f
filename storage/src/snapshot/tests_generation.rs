//! Which checkpoint generation a stream is built from, and how a damaged one is refused
//! (review s20 M1, M3, L3).

use std::io::{Read, Seek, SeekFrom};

use redb::ReadableTable;

use super::tests_sender::{checkpoint, fixture, save};
use crate::state::checkpoint::CheckpointHead;
use crate::state::floor_row::{FloorRow, CHECKPOINT_FLOOR};
use crate::state::generations::SLOTS;
use crate::state::CHECKPOINT_HEAD;
use crate::{SnapshotSource, StorageError, SNAPSHOT_HEADER_LEN};

fn unavailable(r: Result<SnapshotSource, StorageError>) -> String {
    match r {
        Err(StorageError::SnapshotUnavailable { reason }) => reason,
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("opened"),
    }
}

/// Review s20 M1: opening reads no more than the first chunk (the reclaim gate is held only
/// that long); a damaged state is caught by the running CRC32C, and the read that would
/// deliver its last byte fails, as does any read of the records after it.
#[test]
fn a_damaged_state_opens_and_fails_at_its_last_byte() {
    let f = fixture();
    let slot = SLOTS[0].chunks;
    f.store
        .write_raw(|txn| {
            let mut t = txn.open_table(slot)?;
            let mut chunk = t.get(1)?.map(|v| v.value().to_vec()).unwrap_or_default();
            chunk[9] ^= 0x20;
            t.insert(1, chunk.as_slice())?;
            Ok(())
        })
        .unwrap();
    let mut src = SnapshotSource::open(&f.store, &f.log, 50).unwrap();
    let state_len = src.header().state_len as usize;
    let mut buf = vec![0u8; SNAPSHOT_HEADER_LEN + state_len - 1];
    src.read_exact(&mut buf).unwrap();
    let err = src.read(&mut [0u8; 10]).unwrap_err().to_string();
    assert!(err.contains("crc32c"), "{err}");
    // Out of order too: a seek straight to the records verifies the state first.
    src.seek(SeekFrom::Start((SNAPSHOT_HEADER_LEN + state_len) as u64))
        .unwrap();
    assert!(src.read(&mut [0u8; 10]).is_err());
    // An undamaged one read backwards (tail first) verifies and streams whole.
    let g = fixture();
    let mut src = SnapshotSource::open(&g.store, &g.log, 50).unwrap();
    let len = src.header().stream_len();
    src.seek(SeekFrom::Start(len - 100)).unwrap();
    src.read_exact(&mut [0u8; 100]).unwrap();
    src.seek(SeekFrom::Start(0)).unwrap();
    let mut whole = Vec::new();
    src.read_to_end(&mut whole).unwrap();
    assert_eq!(
        &whole[SNAPSHOT_HEADER_LEN..SNAPSHOT_HEADER_LEN + state_len],
        &checkpoint(50).state[..]
    );
}

/// Review s20 M3: `F` is the store's, recorded with the generation; a generation saved without
/// one (an older build, or a save naming none) is never streamed, and a row left from the
/// slot's previous generation never describes the new one.
#[test]
fn the_floor_is_the_one_saved_with_the_generation() {
    let f = fixture();
    let src = SnapshotSource::open(&f.store, &f.log, 50).unwrap();
    assert_eq!(src.header().first_record, 20);
    drop(src);
    // Slot 1 without a floor, then slot 0 (which held 50 with its row) without one either.
    f.store.save_checkpoint(&checkpoint(53)).unwrap();
    assert!(unavailable(SnapshotSource::open(&f.store, &f.log, 53)).contains("no run floor"));
    f.store.save_checkpoint(&checkpoint(50)).unwrap();
    assert!(unavailable(SnapshotSource::open(&f.store, &f.log, 50)).contains("no run floor"));
    // A row that belongs to other header bytes is no row.
    save(&f.store, 54, 30);
    let key = SLOTS[1].head_key;
    f.store
        .write_raw(|txn| {
            let mut t = txn.open_table(CHECKPOINT_FLOOR)?;
            let raw = t.get(key)?.map(|v| v.value().to_vec()).unwrap_or_default();
            let mut row = FloorRow::decode(&raw).unwrap();
            row.head_crc ^= 1;
            t.insert(key, row.encode().as_slice())?;
            Ok(())
        })
        .unwrap();
    assert!(unavailable(SnapshotSource::open(&f.store, &f.log, 54)).contains("no run floor"));
}

/// Review s20 L3: of two generations at one applied index the newer is streamed, and a
/// version-1 header (whose applied term no CRC covers) never is.
#[test]
fn the_newest_generation_is_streamed_and_a_version_1_head_never() {
    let f = fixture();
    // 50 again, floor 30: in slot 1, newer than slot 0's.
    save(&f.store, 50, 30);
    let src = SnapshotSource::open(&f.store, &f.log, 50).unwrap();
    assert_eq!(src.header().first_record, 30);
    drop(src);
    // And again in slot 0, floor 40: the newest is now in slot 0.
    save(&f.store, 50, 40);
    let src = SnapshotSource::open(&f.store, &f.log, 50).unwrap();
    assert_eq!(src.header().first_record, 40);
    drop(src);

    // Slot 0's header rewritten as version 1 with a row made for those bytes.
    let key = SLOTS[0].head_key;
    f.store
        .write_raw(|txn| {
            let mut heads = txn.open_table(CHECKPOINT_HEAD)?;
            let raw = heads
                .get(key)?
                .map(|v| v.value().to_vec())
                .unwrap_or_default();
            let mut v1 = raw[..36].to_vec();
            v1[0] = 1;
            assert!(CheckpointHead::decode(&v1).is_ok());
            heads.insert(key, v1.as_slice())?;
            let row = FloorRow {
                first_record: 40,
                save_number: 99,
                head_crc: crc32c::crc32c(&v1),
            };
            txn.open_table(CHECKPOINT_FLOOR)?
                .insert(key, row.encode().as_slice())?;
            Ok(())
        })
        .unwrap();
    // Slot 1 (floor 30) is the one left to stream.
    let src = SnapshotSource::open(&f.store, &f.log, 50).unwrap();
    assert_eq!(src.header().first_record, 30);
    drop(src);
    save(&f.store, 57, 20);
    assert!(unavailable(SnapshotSource::open(&f.store, &f.log, 50)).contains("version-1"));
}
