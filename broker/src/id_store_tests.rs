use queenmq_engine::dedup_filter::FilterConfig;
use queenmq_engine::state::{TxnIds, TxnSpill};

use super::*;

pub(super) const SEC: i64 = 1_000_000;
pub(super) const KEEP: i64 = 3600 * SEC;

pub(super) fn filter() -> FilterConfig {
    FilterConfig {
        bytes: 64 << 10,
        ..FilterConfig::default()
    }
}

pub(super) fn spill_at(dir: &Path, hot: usize) -> TxnSpill {
    let store = DiskIdStore::open(dir).expect("open the id files");
    TxnSpill::open(Box::new(store), hot, filter(), KEEP, 300 * SEC)
}

/// Pushes ids 0..n of partition 1 (offset = hash = i), one a second from 10 s.
pub(super) fn fill(spill: &mut TxnSpill, n: u64) -> TxnIds {
    let mut ids = TxnIds::default();
    for i in 0..n {
        let t = 10 * SEC + i as i64 * SEC;
        ids.record(t, 1, i, &[i]);
        spill.spill(&mut ids, KEEP, t);
        spill.settle(&mut ids, KEEP);
    }
    ids
}

pub(super) fn find(spill: &TxnSpill, h: u64) -> Option<u64> {
    spill
        .find(1, h, 300 * SEC, KEEP, &mut { usize::MAX }, &mut |off| {
            off == h
        })
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

/// `n` ids of partition 1 (offset = hash = i), `per_sec` a second from 10 s, spilled past a
/// table of 512 rows; answers the table and the time of the last push.
fn fill_fast(spill: &mut TxnSpill, n: u64, per_sec: u64) -> (TxnIds, i64) {
    let mut ids = TxnIds::default();
    let mut t = 0;
    for i in 0..n {
        t = 10 * SEC + (i / per_sec) as i64 * SEC;
        ids.record(t, 1, i, &[i]);
        if i % per_sec == per_sec - 1 {
            ids.expire(t - KEEP);
            spill.spill(&mut ids, KEEP, t);
            spill.settle(&mut ids, KEEP);
        }
    }
    (ids, t)
}

#[test]
fn lookups_keep_their_files_open_and_read_one_block_each() {
    // Review s27 B1: no open() per lookup, and once a file's fences are known one block read.
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(DiskIdStore::open(dir.path()).expect("open"));
    let mut pairs: Vec<(u64, u64)> = (0..20_000u64).map(|i| (i * 7, i)).collect();
    store.write(3, &mut pairs).expect("write");
    let mut pairs: Vec<(u64, u64)> = (0..5_000u64).map(|i| (i * 7 + 1, i)).collect();
    store.write(3, &mut pairs).expect("write");
    for i in (0..20_000u64).step_by(3) {
        assert_eq!(store.find(3, i * 7, &mut |o| o == i), Ok(Some(i)));
    }
    let warm = store.lookup_io();
    assert_eq!(warm.opens, 2, "each file opened once");
    let n = (0..20_000u64).step_by(5).count() as u64;
    for i in (0..20_000u64).step_by(5) {
        assert_eq!(store.find(3, i * 7, &mut |o| o == i), Ok(Some(i)));
    }
    let io = store.lookup_io();
    assert_eq!(io.opens, 2, "no open per lookup");
    // The newer file is asked first (one block, or none when the key sorts past its last
    // fence), then one block of the file that holds the key.
    let reads = io.block_reads - warm.block_reads;
    assert!(
        reads >= n && reads <= 2 * n,
        "{reads} block reads for {n} lookups"
    );
    assert!(
        store.cache_bytes() > 0,
        "open files are counted in the dedup pool"
    );
    // A merge closes its inputs; lookups open the output once.
    store.merge(3);
    assert_eq!(store.find(3, 7, &mut |o| o == 1), Ok(Some(1)));
    assert_eq!(store.find(3, 14, &mut |o| o == 2), Ok(Some(2)));
    assert_eq!(store.lookup_io().opens, 3);
    store.remove_before(4);
    assert_eq!(store.cache_bytes(), 0, "removed buckets' files are closed");
}

#[test]
fn a_start_installs_the_saved_filters_and_a_damaged_one_is_rebuilt_from_the_ids() {
    let dir = tempfile::tempdir().expect("tempdir");
    let filter = FilterConfig {
        bytes: 13 * 256 * 64,
        ..FilterConfig::default()
    };
    let open = |now: i64| {
        let store = DiskIdStore::open(dir.path()).expect("open");
        TxnSpill::open(Box::new(store), 512, filter, KEEP, now)
    };
    let mut spill = open(0);
    let (ids, last) = fill_fast(&mut spill, 5 * 5400, 5);
    drop(spill);
    let now = last + SEC;
    let flt: Vec<std::path::PathBuf> = std::fs::read_dir(dir.path().join(IDS_DIR))
        .expect("list")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "qflt"))
        .collect();
    assert!(flt.len() >= 11, "{flt:?}");
    let horizon_bucket = queenmq_engine::state::bucket_of(now - KEEP);
    let check = |again: &TxnSpill| {
        let mut n = 0;
        for h in (0..5 * 5400u64).step_by(11) {
            let t = 10 * SEC + (h / 5) as i64 * SEC;
            if ids.get(1, h).is_none() && queenmq_engine::state::bucket_of(t) > horizon_bucket {
                let got = again
                    .find(1, h, now, KEEP, &mut { usize::MAX }, &mut |o| o == h)
                    .expect("no I/O error");
                assert_eq!(got, Some(h), "id {h}");
                n += 1;
            }
        }
        assert!(n > 1000, "{n}");
    };
    let again = open(now);
    let r = again.restored();
    assert!(r.installed >= 10 && r.buckets_read <= 14, "{r:?}");
    check(&again);
    drop(again);
    // One flipped byte in the middle file: removed, counted, its buckets read from the ids.
    let mut flt = flt;
    flt.sort();
    let victim = flt[flt.len() / 2].clone();
    let mut bytes = std::fs::read(&victim).expect("read");
    bytes[200] ^= 0x10;
    std::fs::write(&victim, &bytes).expect("write");
    let again = open(now);
    let r2 = again.restored();
    assert!(!victim.exists(), "the damaged filter file is removed");
    assert!(r2.buckets_read > r.buckets_read, "{r2:?} against {r:?}");
    check(&again);
}

#[test]
fn cached_files_are_bounded_node_wide_and_lookups_still_answer() {
    // Review s28 finding 3: the bound is one budget for every group of the node, not 256 per
    // group; past it a lookup closes its own least recently used file or reads uncached.
    static BUDGET: OpenFileBudget = OpenFileBudget::new(4);
    let a_dir = tempfile::tempdir().expect("tempdir");
    let b_dir = tempfile::tempdir().expect("tempdir");
    let a = DiskIdStore::open_with(a_dir.path(), &BUDGET).expect("open");
    let b = DiskIdStore::open_with(b_dir.path(), &BUDGET).expect("open");
    for bucket in 0..6u64 {
        let mut pairs: Vec<(u64, u64)> = (0..100u64).map(|i| (bucket * 1000 + i, i)).collect();
        a.write(bucket, &mut pairs).expect("write");
    }
    for bucket in 0..4u64 {
        let mut pairs: Vec<(u64, u64)> = (0..100u64).map(|i| (bucket * 1000 + i, i)).collect();
        b.write(bucket, &mut pairs).expect("write");
    }
    for round in 0..3 {
        for bucket in 0..6u64 {
            for i in (0..100u64).step_by(9) {
                assert_eq!(
                    a.find(bucket, bucket * 1000 + i, &mut |o| o == i),
                    Ok(Some(i))
                );
                assert!(
                    BUDGET.used() <= 4,
                    "round {round}: {} cached",
                    BUDGET.used()
                );
            }
        }
        for bucket in 0..4u64 {
            for i in (0..100u64).step_by(9) {
                assert_eq!(
                    b.find(bucket, bucket * 1000 + i, &mut |o| o == i),
                    Ok(Some(i))
                );
                assert!(
                    BUDGET.used() <= 4,
                    "round {round}: {} cached",
                    BUDGET.used()
                );
            }
            assert_eq!(b.find(bucket, 999_999, &mut |_| true), Ok(None));
        }
    }
    assert_eq!(BUDGET.used(), 4, "the budget is used, not exceeded");
    // The least recently used goes first: a file asked again and again stays open.
    let opens = a.lookup_io().opens;
    for bucket in [0u64, 1, 0, 2, 0, 3, 0, 4, 0, 5] {
        assert_eq!(a.find(bucket, bucket * 1000, &mut |o| o == 0), Ok(Some(0)));
    }
    let reopened = a.lookup_io().opens - opens;
    assert!(reopened <= 6, "{reopened} opens: bucket 0 stayed open");
    drop(a);
    drop(b);
    assert_eq!(BUDGET.used(), 0, "a dropped store gives its files back");
}
