use crate::{Checkpoint, StateStore, StorageError};

fn big_state(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn checkpoint_of_20_mib_round_trips_and_replaces_the_previous_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.redb");
    let first = Checkpoint {
        applied_index: 1000,
        applied_term: 3,
        state: big_state(20 * 1024 * 1024 + 123, 1),
    };
    {
        let store = StateStore::open(&path).unwrap();
        assert_eq!(store.load_checkpoint().unwrap(), None);
        store.save_checkpoint(&first).unwrap();
        assert_eq!(store.load_checkpoint().unwrap().as_ref(), Some(&first));
    }
    let store = StateStore::open(&path).unwrap();
    assert_eq!(store.load_checkpoint().unwrap().as_ref(), Some(&first));
    // Smaller than one chunk: any leftover chunk of the first checkpoint would break the CRC.
    let second = Checkpoint {
        applied_index: 2000,
        applied_term: 4,
        state: big_state(5000, 2),
    };
    store.save_checkpoint(&second).unwrap();
    assert_eq!(store.load_checkpoint().unwrap(), Some(second));
    let empty = Checkpoint {
        applied_index: 2001,
        applied_term: 4,
        state: Vec::new(),
    };
    store.save_checkpoint(&empty).unwrap();
    assert_eq!(store.load_checkpoint().unwrap(), Some(empty));
}

#[test]
fn meta_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.redb");
    {
        let store = StateStore::open(&path).unwrap();
        assert_eq!(store.get_meta("vote").unwrap(), None);
        store.put_meta("vote", b"term 1").unwrap();
        store.put_meta("vote", b"term 2").unwrap();
        store.put_meta("node_id", &7u64.to_le_bytes()).unwrap();
    }
    let store = StateStore::open(&path).unwrap();
    assert_eq!(store.get_meta("vote").unwrap(), Some(b"term 2".to_vec()));
    assert_eq!(
        store.get_meta("node_id").unwrap(),
        Some(7u64.to_le_bytes().to_vec())
    );
}

#[test]
fn a_corrupt_checkpoint_header_is_reported() {
    use super::checkpoint::CheckpointHead;
    let err = CheckpointHead::decode(&[1; 10]).err().unwrap();
    assert!(matches!(err, StorageError::CorruptCheckpoint { .. }));
    let mut head = CheckpointHead::describe(&Checkpoint {
        applied_index: 1,
        applied_term: 1,
        state: vec![1, 2, 3],
    })
    .unwrap();
    head.state_len = u64::MAX;
    assert!(
        head.checked_capacity().is_err(),
        "a huge length must not reach an allocation"
    );
}

#[test]
fn opening_a_directory_is_an_error_with_a_sentence() {
    let dir = tempfile::tempdir().unwrap();
    let err = StateStore::open(dir.path()).err().unwrap();
    assert!(
        err.to_string()
            .starts_with("the state store failed while trying to open"),
        "{err}"
    );
}

#[test]
fn a_flipped_bit_anywhere_in_the_checkpoint_header_is_detected() {
    use super::checkpoint::CheckpointHead;
    let cp = Checkpoint {
        applied_index: 77,
        applied_term: 3,
        state: b"some state".to_vec(),
    };
    let head = CheckpointHead::describe(&cp).unwrap().encode();
    let back = CheckpointHead::decode(&head).unwrap();
    assert_eq!((back.applied_index, back.applied_term), (77, 3));
    for byte in 0..head.len() {
        for bit in 0..8 {
            let mut bad = head;
            bad[byte] ^= 1 << bit;
            assert!(
                matches!(
                    CheckpointHead::decode(&bad),
                    Err(StorageError::CorruptCheckpoint { .. })
                ),
                "byte {byte} bit {bit} went unnoticed"
            );
        }
    }
}

#[test]
fn a_version_1_header_is_still_read() {
    use super::checkpoint::CheckpointHead;
    let mut v1 = [0u8; 36];
    v1[0] = 1;
    v1[4..12].copy_from_slice(&9u64.to_le_bytes());
    v1[12..20].copy_from_slice(&2u64.to_le_bytes());
    v1[20..28].copy_from_slice(&3u64.to_le_bytes());
    v1[28..32].copy_from_slice(&1u32.to_le_bytes());
    v1[32..36].copy_from_slice(&crc32c::crc32c(b"abc").to_le_bytes());
    let head = CheckpointHead::decode(&v1).unwrap();
    assert_eq!(
        (head.applied_index, head.applied_term, head.state_len),
        (9, 2, 3)
    );
    head.verify(b"abc").unwrap();
}

#[test]
fn a_streamed_checkpoint_fed_in_odd_pieces_reads_back_whole() {
    let dir = tempfile::tempdir().unwrap();
    let store = StateStore::open(&dir.path().join("state.redb")).unwrap();
    let state = big_state(3 * crate::CHECKPOINT_CHUNK_BYTES + 777, 5);
    store
        .save_checkpoint_streamed(9, 2, |sink| {
            // Pieces that straddle chunk boundaries, and an empty one.
            let mut rest = state.as_slice();
            for size in [0usize, 1, 4095, 1 << 20, 3 << 19].iter().cycle() {
                if rest.is_empty() {
                    break;
                }
                let (now, later) = rest.split_at((*size).min(rest.len()));
                sink.write(now);
                rest = later;
            }
        })
        .unwrap();
    let back = store.load_checkpoint().unwrap().expect("saved");
    assert_eq!((back.applied_index, back.applied_term), (9, 2));
    assert!(back.state == state, "the state reads back byte for byte");
}

#[test]
fn a_checkpoint_written_in_8_mib_chunks_still_loads() {
    use redb::TableDefinition;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.redb");
    let old = Checkpoint {
        applied_index: 77,
        applied_term: 1,
        state: big_state(8 * 1024 * 1024 + 5000, 9),
    };
    {
        // As builds before streamed saves wrote it: 8 MiB chunks, the same header.
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let chunks: TableDefinition<u32, &[u8]> = TableDefinition::new("checkpoint_chunks");
            let heads: TableDefinition<&str, &[u8]> = TableDefinition::new("checkpoint_head");
            let mut t = txn.open_table(chunks).unwrap();
            for (i, c) in old.state.chunks(8 * 1024 * 1024).enumerate() {
                t.insert(i as u32, c).unwrap();
            }
            let head = super::checkpoint::CheckpointHead {
                applied_index: old.applied_index,
                applied_term: old.applied_term,
                state_len: old.state.len() as u64,
                chunk_count: 2,
                crc: crc32c::crc32c(&old.state),
            };
            txn.open_table(heads)
                .unwrap()
                .insert("current", head.encode().as_slice())
                .unwrap();
        }
        txn.commit().unwrap();
    }
    let store = StateStore::open(&path).unwrap();
    assert_eq!(store.load_checkpoint().unwrap(), Some(old));
}

#[test]
fn a_store_open_elsewhere_is_in_use_not_damaged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.redb");
    let _first = StateStore::open(&path).unwrap();
    let second = StateStore::open(&path).err().expect("redb locks the file");
    assert!(second.is_in_use(), "{second}");
}

/// Flips one byte of the first chunk of the checkpoint in `table`, as bit rot would, with the
/// store closed.
fn flip_a_byte(path: &std::path::Path, table: &'static str) {
    use redb::{ReadableDatabase, TableDefinition};
    let def: TableDefinition<u32, &[u8]> = TableDefinition::new(table);
    let db = redb::Database::open(path).unwrap();
    let mut chunk = {
        let txn = db.begin_read().unwrap();
        let t = txn.open_table(def).unwrap();
        let v = t.get(0).unwrap().unwrap().value().to_vec();
        v
    };
    chunk[7] ^= 0x10;
    let txn = db.begin_write().unwrap();
    txn.open_table(def)
        .unwrap()
        .insert(0, chunk.as_slice())
        .unwrap();
    txn.commit().unwrap();
}

fn small(index: u64) -> Checkpoint {
    Checkpoint {
        applied_index: index,
        applied_term: 1,
        state: big_state(3000, index as u8),
    }
}

/// The applied indexes of the generations stored, newest first; all must verify.
fn applied(store: &StateStore) -> Vec<u64> {
    store
        .load_generations()
        .unwrap()
        .into_iter()
        .map(|g| g.checkpoint.unwrap().applied_index)
        .collect()
}

#[test]
fn two_generations_are_kept_and_a_save_never_overwrites_the_one_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.redb");
    {
        let store = StateStore::open(&path).unwrap();
        store.save_checkpoint(&small(10)).unwrap();
        store.save_checkpoint(&small(20)).unwrap();
        let gens = store.load_generations().unwrap();
        let got: Vec<_> = gens.iter().map(|g| g.applied_index).collect();
        assert_eq!(got, [Some(20), Some(10)], "newest first");
        // The first save took slot 0, the layout older builds read.
        assert_eq!(gens[1].slot, 0);
    }
    let store = StateStore::open(&path).unwrap();
    assert_eq!(store.load_checkpoint().unwrap(), Some(small(20)));
    store.save_checkpoint(&small(30)).unwrap();
    assert_eq!(
        applied(&store),
        [30, 20],
        "the loaded one was kept, the older overwritten"
    );
}

#[test]
fn a_flipped_byte_in_the_newest_checkpoint_falls_back_to_the_older_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.redb");
    let newest_table = {
        let store = StateStore::open(&path).unwrap();
        store.save_checkpoint(&small(10)).unwrap();
        store.save_checkpoint(&small(20)).unwrap();
        let slot = store.load_generations().unwrap()[0].slot;
        ["checkpoint_chunks", "checkpoint_chunks_2"][slot]
    };
    flip_a_byte(&path, newest_table);
    let store = StateStore::open(&path).unwrap();
    let gens = store.load_generations().unwrap();
    assert_eq!(gens[0].applied_index, Some(20));
    let err = gens[0].checkpoint.as_ref().expect_err("the CRC catches it");
    assert!(
        matches!(err, StorageError::CorruptCheckpoint { .. }),
        "{err}"
    );
    assert_eq!(store.load_checkpoint().unwrap(), Some(small(10)));
    // The next save goes over the damaged one, never over the one that loaded.
    store.save_checkpoint(&small(30)).unwrap();
    assert_eq!(applied(&store), [30, 10]);
}

/// Review s27 snap M1: a stream reading a generation pins its slot; the save that would
/// overwrite it is deferred (at most `DEFER_MAX` in a row), and once the stream ends it goes
/// ahead. A save into the other slot is never deferred.
#[test]
fn a_save_over_a_slot_a_stream_reads_is_deferred_until_the_stream_ends() {
    let dir = tempfile::tempdir().unwrap();
    let store = std::sync::Arc::new(StateStore::open(&dir.path().join("state.redb")).unwrap());
    let save = |index: u64| {
        store
            .save_checkpoint_with_floor(index, 1, index + 1, |sink| sink.write(&[7; 3000]))
            .unwrap()
    };
    save(10);
    let view = StateStore::state_view(&store, 10).unwrap();
    // The next save goes to the empty slot: not deferred.
    assert!(!store.defer_save(false).unwrap());
    save(20);
    // The one after would overwrite generation 10, which the stream reads (and reads on).
    let mut buf = [0u8; 100];
    for _ in 0..super::slot_pins::DEFER_MAX {
        view.read_at(0, &mut buf).unwrap();
        assert!(store.defer_save(false).unwrap());
    }
    view.read_at(0, &mut buf).unwrap();
    assert!(
        !store.defer_save(false).unwrap(),
        "deferred at most DEFER_MAX in a row"
    );
    drop(view);
    assert!(!store.defer_save(false).unwrap());
    save(30);
    // Generation 10 was overwritten, 20 kept.
    assert!(StateStore::state_view(&store, 10).is_err());
    assert!(StateStore::state_view(&store, 20).is_ok());
}

/// Review s28 snap M3: a save the node needs (the disk gate short, log to free, the last one
/// at shutdown) is never deferred, even over a slot a stream reads, and does not count
/// against the deferrals in a row.
#[test]
fn a_pressed_save_over_a_pinned_slot_is_never_deferred() {
    let dir = tempfile::tempdir().unwrap();
    let store = std::sync::Arc::new(StateStore::open(&dir.path().join("state.redb")).unwrap());
    let save = |index: u64| {
        store
            .save_checkpoint_with_floor(index, 1, index + 1, |sink| sink.write(&[7; 3000]))
            .unwrap()
    };
    save(10);
    save(20);
    let view = StateStore::state_view(&store, 10).unwrap();
    view.read_at(0, &mut [0u8; 100]).unwrap();
    assert!(!store.defer_save(true).unwrap(), "pressed: goes ahead");
    assert!(store.defer_save(false).unwrap(), "not pressed: deferred");
    save(30);
    drop(view);
    assert!(StateStore::state_view(&store, 10).is_err());
}

/// Review s28 snap M2: a stream that stopped reading does not hold the save over its slot.
#[test]
fn a_save_over_a_slot_a_stuck_stream_pins_goes_ahead() {
    let dir = tempfile::tempdir().unwrap();
    let store = std::sync::Arc::new(StateStore::open(&dir.path().join("state.redb")).unwrap());
    let save = |index: u64| {
        store
            .save_checkpoint_with_floor(index, 1, index + 1, |sink| sink.write(&[7; 3000]))
            .unwrap()
    };
    save(10);
    save(20);
    let view = StateStore::state_view(&store, 10).unwrap();
    view.read_at(0, &mut [0u8; 100]).unwrap();
    assert!(store.defer_save(false).unwrap(), "read since the save");
    assert!(
        !store.defer_save(false).unwrap(),
        "no read since the deferral: goes ahead"
    );
    drop(view);
}
