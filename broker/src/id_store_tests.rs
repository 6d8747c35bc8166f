use queenmq_engine::dedup_filter::FilterConfig;
use queenmq_engine::state::{TxnIds, TxnSpill};

use super::*;

const SEC: i64 = 1_000_000;
const KEEP: i64 = 3600 * SEC;

fn filter() -> FilterConfig {
    FilterConfig {
        bytes: 64 << 10,
        ..FilterConfig::default()
    }
}

fn spill_at(dir: &Path, hot: usize) -> TxnSpill {
    let store = DiskIdStore::open(dir).expect("open the id files");
    TxnSpill::open(Box::new(store), hot, filter(), KEEP, 300 * SEC)
}

/// Pushes ids 0..n of partition 1 (offset = hash = i), one a second from 10 s.
fn fill(spill: &mut TxnSpill, n: u64) -> TxnIds {
    let mut ids = TxnIds::default();
    for i in 0..n {
        let t = 10 * SEC + i as i64 * SEC;
        ids.record(t, 1, i, &[i]);
        spill.spill(&mut ids, KEEP, t);
        spill.settle(&mut ids, KEEP);
    }
    ids
}

fn find(spill: &TxnSpill, h: u64) -> Option<u64> {
    spill
        .find(1, h, 300 * SEC, KEEP, &mut |off| off == h)
        .expect("no I/O error")
}

#[test]
fn spilled_ids_are_found_in_real_files_after_a_restart_with_any_bound() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut spill = spill_at(dir.path(), 16);
    let ids = fill(&mut spill, 200);
    let spilled: Vec<u64> = (0..200).filter(|h| ids.get(1, *h).is_none()).collect();
    assert!(spilled.len() > 150);
    drop(spill);
    // Closed buckets were merged into one file each.
    let store = DiskIdStore::open(dir.path()).expect("open");
    let index = store.index();
    assert!(index.len() >= 3);
    // Every bucket but the newest (still taking ids) was merged into one file.
    for (_, sources) in index.iter().rev().skip(1) {
        assert_eq!(sources.len(), 1, "{sources:?}");
    }
    drop(index);
    for hot in [16, 1_000_000] {
        let again = spill_at(dir.path(), hot);
        for h in &spilled {
            assert_eq!(find(&again, *h), Some(*h), "hot {hot}, id {h}");
        }
        assert_eq!(find(&again, 5_000), None);
    }
}

#[test]
fn a_damaged_id_file_is_dropped_and_nothing_else_fails() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut spill = spill_at(dir.path(), 16);
    let ids = fill(&mut spill, 200);
    drop(spill);
    let ids_dir = dir.path().join(IDS_DIR);
    let mut names: Vec<_> = std::fs::read_dir(&ids_dir)
        .expect("list")
        .map(|e| e.expect("entry").path())
        .collect();
    names.sort();
    assert!(names.len() >= 2, "{names:?}");
    // Flip one byte in the data of the oldest file.
    let victim = names[0].clone();
    let mut bytes = std::fs::read(&victim).expect("read");
    bytes[4096 + 3] ^= 0x40;
    std::fs::write(&victim, &bytes).expect("write");
    let store = DiskIdStore::open(dir.path()).expect("open");
    let victim_bucket = store.buckets()[0];
    let again = TxnSpill::open(Box::new(store), 16, filter(), KEEP, 300 * SEC);
    assert!(!victim.exists(), "the damaged file is removed at start");
    let mut lost = 0;
    for h in (0..200).filter(|h| ids.get(1, *h).is_none()) {
        match find(&again, h) {
            Some(off) => assert_eq!(off, h),
            None => {
                lost += 1;
                assert_eq!(
                    queenmq_engine::state::bucket_of(10 * SEC + h as i64 * SEC),
                    victim_bucket,
                    "only the damaged file's ids are lost (id {h})"
                );
            }
        }
    }
    assert!(lost > 0);
}

#[test]
fn a_file_damaged_after_start_is_dropped_by_the_lookup() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut spill = spill_at(dir.path(), 16);
    let ids = fill(&mut spill, 100);
    let h = (0..100)
        .find(|h| ids.get(1, *h).is_none())
        .expect("a spilled id");
    let count = || {
        std::fs::read_dir(dir.path().join(IDS_DIR))
            .expect("list")
            .count()
    };
    let before = count();
    for e in std::fs::read_dir(dir.path().join(IDS_DIR)).expect("list") {
        let p = e.expect("entry").path();
        let mut bytes = std::fs::read(&p).expect("read");
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&p, &bytes).expect("write");
    }
    assert_eq!(
        find(&spill, h),
        None,
        "damage reads as unknown, not as an error"
    );
    assert!(count() < before, "the damaged file met was removed");
}
