//! The state store on the strict in-memory backend (through redb's `StorageBackend`): a power
//! cut after any single write or fsync of a checkpoint or metadata commit leaves exactly the
//! old or the new content, and the new one from the moment the call returned.

use crate::{Checkpoint, MemBackend, StateStore};

const FILE: &str = "state.redb";

fn checkpoint(index: u64, len: usize) -> Checkpoint {
    Checkpoint {
        applied_index: index,
        applied_term: 2,
        state: (0..len).map(|i| (i as u64 * 7 + index) as u8).collect(),
    }
}

/// Opens every image and checks its checkpoint is one of `allowed`, and exactly `acked` from
/// the image at `acked_at` (steps recorded when the call returned) on.
fn check(images: Vec<MemBackend>, allowed: &[Option<Checkpoint>], acked_at: usize) {
    assert!(images.len() > 2, "a commit takes several steps");
    for (i, image) in images.into_iter().enumerate() {
        let store = StateStore::open_in(&image, FILE).unwrap_or_else(|e| panic!("step {i}: {e}"));
        let got = store
            .load_checkpoint()
            .unwrap_or_else(|e| panic!("step {i}: {e}"));
        assert!(
            allowed.contains(&got),
            "step {i}: a checkpoint that was never saved"
        );
        if i + 1 >= acked_at {
            assert_eq!(
                &got,
                allowed.last().unwrap(),
                "step {i}: the saved one is gone"
            );
        }
    }
}

#[test]
fn a_crash_after_any_step_of_creating_the_store_and_its_first_checkpoint_keeps_what_returned() {
    let dir = MemBackend::new();
    dir.record_steps();
    let store = StateStore::open_in(&dir, FILE).unwrap();
    let created = dir.steps_recorded();
    let first = checkpoint(10, 3000);
    store.save_checkpoint(&first).unwrap();
    let saved = dir.steps_recorded();
    let images = dir.take_steps();
    // Before the store's open returned, an image may hold no file at all: a fresh start.
    for (i, image) in images[..created].iter().enumerate() {
        let store = StateStore::open_in(image, FILE).unwrap_or_else(|e| panic!("step {i}: {e}"));
        assert_eq!(store.load_checkpoint().unwrap(), None, "step {i}");
    }
    check(
        images[created..].to_vec(),
        &[None, Some(first)],
        saved - created,
    );
}

#[test]
fn a_crash_after_any_step_of_replacing_a_checkpoint_leaves_the_old_or_the_new_one() {
    let dir = MemBackend::new();
    let store = StateStore::open_in(&dir, FILE).unwrap();
    let old = checkpoint(10, 5000);
    store.save_checkpoint(&old).unwrap();
    dir.record_steps();
    let new = checkpoint(20, 7000);
    store.save_checkpoint(&new).unwrap();
    let saved = dir.steps_recorded();
    // A metadata commit after it must not disturb it either.
    store.put_meta("raft/vote", b"v").unwrap();
    let voted = dir.steps_recorded();
    let images = dir.take_steps();
    for (i, image) in images.iter().enumerate().skip(voted - 1) {
        let store = StateStore::open_in(image, FILE).unwrap();
        assert_eq!(
            store.get_meta("raft/vote").unwrap(),
            Some(b"v".to_vec()),
            "step {i}"
        );
    }
    check(images, &[Some(old), Some(new)], saved);
}
