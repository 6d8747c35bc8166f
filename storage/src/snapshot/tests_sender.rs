//! The sender against the receiver, and the floor lease against purges.

use std::io::{Read, Seek, SeekFrom};
use std::sync::Arc;

use crate::log::tests::{fill, small};
use crate::{
    Checkpoint, IoBackend, MemBackend, SegmentLog, SnapshotReceiver, SnapshotSource, StateStore,
    StorageError, SNAPSHOT_HEADER_LEN, SNAPSHOT_INCOMING,
};

pub(super) struct Fixture {
    _dir: tempfile::TempDir,
    pub store: Arc<StateStore>,
    pub log: SegmentLog,
}

/// Records 1..=60 in term 2 over segments of 256 bytes, and a checkpoint at 50 with run floor
/// 20 whose state spans three chunks of the store (the last one short).
pub(super) fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(StateStore::open(&dir.path().join("state.redb")).unwrap());
    let log = SegmentLog::open_with_backend(Arc::new(MemBackend::new()), small())
        .unwrap()
        .0;
    fill(&log, 1, 60, 2);
    log.sync().unwrap();
    save(&store, 50, 20);
    Fixture {
        _dir: dir,
        store,
        log,
    }
}

/// Saves `checkpoint(at)` with run floor `floor`.
pub(super) fn save(store: &StateStore, at: u64, floor: u64) {
    let cp = checkpoint(at);
    store
        .save_checkpoint_with_floor(at, cp.applied_term, floor, |sink| sink.write(&cp.state))
        .unwrap();
}

pub(super) fn checkpoint(at: u64) -> Checkpoint {
    let len = 2 * crate::CHECKPOINT_CHUNK_BYTES + 1234;
    Checkpoint {
        applied_index: at,
        applied_term: 2,
        state: (0..len).map(|i| (i as u64 * 31 + at) as u8).collect(),
    }
}

/// Sends the source through a receiver in chunks of `chunk`, read with `Read`.
pub(super) fn transfer(src: &mut SnapshotSource, chunk: usize) -> Vec<u8> {
    let mem = MemBackend::new();
    let dir: Arc<dyn IoBackend> = Arc::new(mem.clone());
    let mut rx = SnapshotReceiver::create(dir, 1024, Box::new(|_| Ok(()))).unwrap();
    let mut buf = vec![0u8; chunk];
    let mut at = 0u64;
    loop {
        let n = src.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        rx.write_at(at, &buf[..n]).unwrap();
        at += n as u64;
    }
    rx.finish().unwrap();
    mem.file_bytes(SNAPSHOT_INCOMING).unwrap()
}

#[test]
fn the_sender_s_stream_is_accepted_by_the_receiver_byte_for_byte() {
    let f = fixture();
    let mut src = SnapshotSource::open(&f.store, &f.log, 50).unwrap();
    let h = *src.header();
    assert_eq!(
        (h.applied_index, h.applied_term, h.first_record),
        (50, 2, 20)
    );
    assert_eq!(h.state_len, checkpoint(50).state.len() as u64);
    let file = transfer(&mut src, 3 << 20);
    assert_eq!(file.len() as u64, h.stream_len());
    let state_end = SNAPSHOT_HEADER_LEN + h.state_len as usize;
    assert_eq!(
        &file[SNAPSHOT_HEADER_LEN..state_end],
        &checkpoint(50).state[..]
    );
    // The records are the log's own bytes: each reads back as the log holds it.
    let mut at = state_end;
    for i in 20..=50 {
        let len = crate::format::le_u32(&file[at..]) as usize;
        let r = crate::format::decode_body(&file[at + 4..at + 4 + len]).unwrap();
        assert_eq!((r.index, r.term), (i, 2));
        assert_eq!(Some((2, r.payload.to_vec())), f.log.read(i).unwrap());
        at += 4 + len;
    }
    assert_eq!(at, file.len());
    // Any chunking gives the same bytes, and so does a seek back to an earlier offset.
    src.seek(SeekFrom::Start(0)).unwrap();
    assert_eq!(transfer(&mut src, 1000), file);
    let mut tail = vec![0u8; 500];
    src.seek(SeekFrom::End(-500)).unwrap();
    src.read_exact(&mut tail).unwrap();
    assert_eq!(&tail[..], &file[file.len() - 500..]);
    assert_eq!(src.read(&mut tail).unwrap(), 0);
}

#[test]
fn a_stream_without_records_carries_the_state_alone() {
    let f = fixture();
    // Saved again over the unchanged state, with no run left: the newer generation at 50
    // (in the other slot) is the one streamed.
    save(&f.store, 50, 51);
    let mut src = SnapshotSource::open(&f.store, &f.log, 50).unwrap();
    assert_eq!(src.header().records_len, 0);
    let file = transfer(&mut src, 1 << 20);
    assert_eq!(&file[SNAPSHOT_HEADER_LEN..], &checkpoint(50).state[..]);
}

/// Review s20 H2: the stream holds no read transaction, so a save over its slot is seen, and
/// the next read of the state fails rather than reading pages redb had to keep for it.
#[test]
fn a_save_over_the_slot_fails_the_open_stream_s_next_state_read() {
    let f = fixture();
    let mut src = SnapshotSource::open(&f.store, &f.log, 50).unwrap();
    let mut first = vec![0u8; 1000];
    src.read_exact(&mut first).unwrap();
    // Two more saves: the second overwrites the slot generation 50 lived in.
    save(&f.store, 55, 20);
    let mut again = vec![0u8; 1000];
    src.seek(SeekFrom::Start(0)).unwrap();
    src.read_exact(&mut again).unwrap();
    assert_eq!(again, first, "the other slot's save changed nothing");
    save(&f.store, 58, 20);
    // The header is the stream's own; the state is gone.
    src.seek(SeekFrom::Start(0)).unwrap();
    src.read_exact(&mut again[..SNAPSHOT_HEADER_LEN]).unwrap();
    let err = src.read_exact(&mut again).unwrap_err().to_string();
    assert!(err.contains("saved over"), "{err}");
    assert!(matches!(
        SnapshotSource::open(&f.store, &f.log, 50),
        Err(StorageError::SnapshotUnavailable { .. })
    ));
}

#[test]
fn what_cannot_be_streamed_is_refused() {
    let f = fixture();
    let refused = |a| match SnapshotSource::open(&f.store, &f.log, a) {
        Err(StorageError::SnapshotUnavailable { reason }) => reason,
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("opened {a}"),
    };
    assert!(refused(49).contains("no checkpoint generation"));
    // A floor past A + 1 is refused at the save, which writes nothing.
    let cp = checkpoint(52);
    let err = f
        .store
        .save_checkpoint_with_floor(52, 2, 54, |sink| sink.write(&cp.state))
        .unwrap_err();
    assert!(err.to_string().contains("past applied index"), "{err}");
    assert!(refused(52).contains("no checkpoint generation"));
    save(&f.store, 51, 5);
    f.log.purge_upto(30).unwrap();
    let first = f.log.first_index().unwrap();
    assert!(first > 5);
    assert!(refused(51).contains("reclaimed"));
    // A refused open leaves no lease behind.
    assert!(f.log.lease_clamp(u64::MAX) == Some(u64::MAX));
}

#[test]
fn a_lease_holds_its_segments_against_purges_until_dropped() {
    let f = fixture();
    let before = f.log.segment_count();
    let free = f.log.sealed_bytes_through(50);
    let src = SnapshotSource::open(&f.store, &f.log, 50).unwrap();
    let through = f.log.sealed_through(50).unwrap();
    assert!(through < 20, "sealed_through {through} passes the floor");
    let held = f.log.sealed_bytes_through(50);
    assert!(
        held < free,
        "the bytes a lease holds are still counted as freeable"
    );
    assert_eq!(held, f.log.sealed_bytes_through(19));
    f.log.purge_upto(50).unwrap();
    assert!(
        f.log.first_index().unwrap() <= 20,
        "a leased record was deleted"
    );
    assert!(
        f.log.segment_count() < before,
        "nothing below the floor went"
    );
    // The segment holding the floor frees nothing while leased.
    assert_eq!(f.log.sealed_segment_of(20), None);
    // The stream still reads whole.
    let mut src = src;
    let _ = transfer(&mut src, 1 << 20);
    drop(src);
    assert!(f.log.sealed_segment_of(20).is_some());
    f.log.purge_upto(50).unwrap();
    assert!(
        f.log.first_index().unwrap() > 20,
        "the purge was still held"
    );
}

#[test]
fn the_lowest_of_several_leases_bounds_a_purge() {
    let f = fixture();
    let a = f.log.lease_floor(30).unwrap();
    let b = f.log.lease_floor(10).unwrap();
    let c = f.log.lease_floor(10).unwrap();
    assert_eq!(f.log.lease_clamp(50), Some(9));
    drop(b);
    assert_eq!(f.log.lease_clamp(50), Some(9));
    drop(c);
    assert_eq!(f.log.lease_clamp(50), Some(29));
    assert_eq!(f.log.lease_clamp(20), Some(20));
    drop(a);
    assert_eq!(f.log.lease_clamp(50), Some(50));
    let first = f.log.lease_floor(1).unwrap();
    assert_eq!(f.log.purge_upto(50).unwrap(), 0);
    assert_eq!(f.log.sealed_through(50), None);
    drop(first);
    // A log that starts at index 0, leased from there: nothing may go at all.
    let log = SegmentLog::open_with_backend(Arc::new(MemBackend::new()), small())
        .unwrap()
        .0;
    fill(&log, 0, 40, 1);
    let zero = log.lease_floor(0).unwrap();
    assert_eq!(zero.floor(), 0);
    assert_eq!(log.lease_clamp(40), None);
    assert_eq!(log.sealed_bytes_through(40), 0);
    assert_eq!(log.purge_upto(40).unwrap(), 0);
    drop(zero);
    assert!(log.purge_upto(40).unwrap() > 0);
}

#[test]
fn a_source_can_move_between_threads() {
    fn check<T: Send + Sync>() {}
    check::<SnapshotSource>();
}

/// Each generation keeps the `raft/membership` bytes of its own save's transaction: a later
/// membership changes the next generation's, never an earlier one's; a save with no membership
/// applied records none.
#[test]
fn a_generation_names_the_membership_saved_with_it() {
    let f = fixture();
    let at_50 = SnapshotSource::open(&f.store, &f.log, 50).unwrap();
    assert_eq!(at_50.membership(), None);
    drop(at_50);
    f.store
        .put_meta(crate::MEMBERSHIP_KEY, b"membership as of 52")
        .unwrap();
    save(&f.store, 55, 20);
    f.store
        .put_meta(crate::MEMBERSHIP_KEY, b"membership as of 57")
        .unwrap();
    let at_55 = SnapshotSource::open(&f.store, &f.log, 55).unwrap();
    assert_eq!(at_55.membership(), Some(&b"membership as of 52"[..]));
    assert_eq!(
        SnapshotSource::open(&f.store, &f.log, 50)
            .unwrap()
            .membership(),
        None
    );
    drop(at_55);
    save(&f.store, 58, 20);
    let at_58 = SnapshotSource::open(&f.store, &f.log, 58).unwrap();
    assert_eq!(at_58.membership(), Some(&b"membership as of 57"[..]));
}
