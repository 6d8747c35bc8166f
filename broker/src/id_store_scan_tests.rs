//! Review s33 H1: a lookup's search by time (past the filters' hour) of a long-window queue,
//! over real files: bounded per cycle, and out of the cache the filters' hour uses.

use queenmq_engine::state::{bucket_of, id_key, FindError, TxnSpill, BY_TIME_SEARCHES_PER_CYCLE};

use super::tests_support::{filter, SEC};
use super::*;

/// Enough cached files for the hour's 30 and the scan's, so only the LRU's choice matters.
static BUDGET: OpenFileBudget = OpenFileBudget::new(4096);

const WEEK: i64 = 7 * 24 * 3600 * SEC;

/// The store shared with the test, which reads its counts.
struct Shared(Arc<DiskIdStore>);

impl IdStore for Shared {
    fn write(&self, bucket: u64, pairs: &mut [(u64, u64)]) -> Result<(), String> {
        self.0.write(bucket, pairs)
    }
    fn buckets(&self) -> Vec<u64> {
        self.0.buckets()
    }
    fn keys(&self, bucket: u64, each: &mut dyn FnMut(u64)) -> Result<(), String> {
        self.0.keys(bucket, each)
    }
    fn find(
        &self,
        bucket: u64,
        key: u64,
        accept: &mut dyn FnMut(u64) -> bool,
    ) -> Result<Option<u64>, String> {
        self.0.find(bucket, key, accept)
    }
    fn find_uncached(
        &self,
        bucket: u64,
        key: u64,
        accept: &mut dyn FnMut(u64) -> bool,
    ) -> Result<Option<u64>, String> {
        self.0.find_uncached(bucket, key, accept)
    }
    fn merge(&self, bucket: u64) {
        self.0.merge(bucket)
    }
    fn remove_before(&self, bucket: u64) {
        self.0.remove_before(bucket)
    }
}

#[test]
fn a_search_by_time_is_bounded_per_cycle_and_keeps_the_hours_files_cached() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(DiskIdStore::open_with(dir.path(), &BUDGET).expect("open"));
    let now = 3_000 * 60 * SEC;
    let edge = bucket_of(now - 3600 * SEC);
    // 2 000 one-bucket files past the filters' edge (unrelated keys), 30 in the hour.
    for b in edge - 2_000..edge {
        store.write(b, &mut [(b, 1)]).expect("write");
    }
    let hot: Vec<u64> = (0..30).map(|i| 7_000 + i).collect();
    for (i, h) in hot.iter().enumerate() {
        store
            .write(edge + 2 + i as u64, &mut [(id_key(1, *h), *h)])
            .expect("write");
    }
    let spill = TxnSpill::open(Box::new(Shared(store.clone())), 16, filter(), WEEK, now);
    let lookup = |h: u64| {
        let mut left = BY_TIME_SEARCHES_PER_CYCLE;
        spill.find(1, h, now, WEEK, &mut left, &mut |o| o == h)
    };
    for h in &hot {
        assert_eq!(lookup(*h), Ok(Some(*h)), "id {h} of the hour");
    }
    let warm = store.lookup_io().opens;
    // Two cycles' lookups of a new id: each stops at its budget, retryably.
    for _ in 0..2 {
        assert!(matches!(lookup(1), Err(FindError::OverBudget { .. })));
    }
    let scanned = store.lookup_io().opens - warm;
    assert!(
        scanned <= 2 * BY_TIME_SEARCHES_PER_CYCLE as u64,
        "{scanned} opens for two lookups of a new id"
    );
    assert!(store.open_files().len() <= 30, "the scan cached nothing");
    // The hour's files are still open: found again without an open.
    for h in &hot {
        assert_eq!(lookup(*h), Ok(Some(*h)), "id {h} of the hour");
    }
    assert_eq!(
        store.lookup_io().opens - warm,
        scanned,
        "the hour's files were evicted by the scan"
    );
}
