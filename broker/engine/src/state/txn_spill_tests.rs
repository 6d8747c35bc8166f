use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use super::*;

/// One id file's (key, offset) pairs.
type File = Vec<(u64, u64)>;

/// Files by bucket, shared so a "restart" opens the same ones.
#[derive(Clone, Default)]
struct MemStore {
    files: Arc<Mutex<BTreeMap<u64, Vec<File>>>>,
    reads: Arc<Mutex<usize>>,
    fail_writes: Arc<Mutex<bool>>,
    attempts: Arc<Mutex<usize>>,
    fail_keys: Arc<Mutex<bool>>,
    /// While set, a write waits for the test to open the gate (a slow disk).
    gate: Arc<(Mutex<bool>, std::sync::Condvar)>,
    /// Persisted filter generations by name; names in `damaged` fail to load.
    filters: Arc<Mutex<BTreeMap<FilterFileName, SavedFilter>>>,
    damaged: Arc<Mutex<Vec<FilterFileName>>>,
    /// Buckets whose keys were read (`keys`) since the last reset.
    keys_read: Arc<Mutex<usize>>,
    /// While set, a write panics (the writer thread dies with its job).
    panic_writes: Arc<std::sync::atomic::AtomicBool>,
}

impl IdStore for MemStore {
    fn write(&self, bucket: u64, pairs: &mut [(u64, u64)]) -> Result<(), String> {
        *self.attempts.lock().unwrap() += 1;
        if self.panic_writes.load(Ordering::Acquire) {
            panic!("the writer dies (a test)");
        }
        let (shut, cv) = &*self.gate;
        let mut g = shut.lock().unwrap();
        while *g {
            g = cv.wait(g).unwrap();
        }
        drop(g);
        if *self.fail_writes.lock().unwrap() {
            return Err("disk full".into());
        }
        self.files
            .lock()
            .unwrap()
            .entry(bucket)
            .or_default()
            .push(pairs.to_vec());
        Ok(())
    }
    fn buckets(&self) -> Vec<u64> {
        self.files.lock().unwrap().keys().copied().collect()
    }
    fn keys(&self, bucket: u64, each: &mut dyn FnMut(u64)) -> Result<(), String> {
        if *self.fail_keys.lock().unwrap() {
            return Err("EIO".into());
        }
        *self.keys_read.lock().unwrap() += 1;
        for f in self
            .files
            .lock()
            .unwrap()
            .get(&bucket)
            .into_iter()
            .flatten()
        {
            for (k, _) in f {
                each(*k);
            }
        }
        Ok(())
    }
    fn find(
        &self,
        bucket: u64,
        key: u64,
        accept: &mut dyn FnMut(u64) -> bool,
    ) -> Result<Option<u64>, String> {
        *self.reads.lock().unwrap() += 1;
        let files = self.files.lock().unwrap();
        for f in files.get(&bucket).into_iter().flatten() {
            for &(k, off) in f {
                if k == key && accept(off) {
                    return Ok(Some(off));
                }
            }
        }
        Ok(None)
    }
    fn merge(&self, bucket: u64) {
        let mut files = self.files.lock().unwrap();
        if let Some(fs) = files.get_mut(&bucket) {
            let all: Vec<(u64, u64)> = fs.drain(..).flatten().collect();
            fs.push(all);
        }
    }
    fn remove_before(&self, bucket: u64) {
        self.files.lock().unwrap().retain(|b, _| *b >= bucket);
        self.filters
            .lock()
            .unwrap()
            .retain(|n, _| n.last_bucket >= bucket);
    }
    fn save_filter(&self, f: &SavedFilter) -> Result<(), String> {
        self.filters.lock().unwrap().insert(f.name, f.clone());
        Ok(())
    }
    fn filters(&self) -> Vec<FilterFileName> {
        self.filters.lock().unwrap().keys().copied().collect()
    }
    fn load_filter(&self, name: FilterFileName) -> Result<SavedFilter, String> {
        if self.damaged.lock().unwrap().contains(&name) {
            self.filters.lock().unwrap().remove(&name);
            return Err("CRC".into());
        }
        self.filters
            .lock()
            .unwrap()
            .get(&name)
            .cloned()
            .ok_or_else(|| "gone".into())
    }
}

const SEC: i64 = 1_000_000;
const KEEP: i64 = 3600 * SEC;

fn small_filter() -> FilterConfig {
    FilterConfig {
        bytes: 64 << 10,
        ..FilterConfig::default()
    }
}

/// Pushes `n` ids (hash = i, partition 1, offset = i) one per `step_us` from `t0`, spilling.
fn push(ids: &mut TxnIds, spill: &mut TxnSpill, from: u64, n: u64, t0: i64, step_us: i64) {
    for i in from..from + n {
        let t = t0 + (i as i64) * step_us;
        ids.record(t, 1, i, &[i]);
        ids.expire(t - KEEP);
        spill.spill(ids, KEEP, t);
        spill.settle(ids, KEEP);
    }
}

fn found(spill: &TxnSpill, hash: u64, now: i64) -> Option<u64> {
    spill
        .find(1, hash, now, KEEP, &mut { usize::MAX }, &mut |off| {
            off == hash
        })
        .unwrap()
}

#[test]
fn ids_past_the_hot_table_are_found_in_the_files_and_new_ids_read_nothing() {
    let store = MemStore::default();
    let mut spill = TxnSpill::open(Box::new(store.clone()), 100, small_filter(), KEEP, 0);
    let mut ids = TxnIds::default();
    push(&mut ids, &mut spill, 0, 1000, 10 * SEC, SEC);
    assert!(ids.len() <= 100, "the hot table is bounded: {}", ids.len());
    assert!(spill.filter_bytes() > 0);
    let now = 10 * SEC + 1000 * SEC;
    for h in (0..1000).step_by(7) {
        let hot = ids.get(1, h);
        let cold = found(&spill, h, now);
        assert!(hot == Some(h) || cold == Some(h), "id {h} lost");
    }
    *store.reads.lock().unwrap() = 0;
    let misses = (1_000_000..1_001_000)
        .filter(|h| found(&spill, *h, now).is_some())
        .count();
    assert_eq!(misses, 0);
    let reads = *store.reads.lock().unwrap();
    assert!(
        reads < 100,
        "the filters answer most new ids without a file: {reads} reads for 1000"
    );
    // Another partition's id with the same hash is a different key.
    assert_eq!(
        spill
            .find(2, 3, now, KEEP, &mut { usize::MAX }, &mut |_| true)
            .unwrap(),
        None
    );
}

#[test]
fn a_queue_window_and_the_keep_bound_limit_what_is_found() {
    let store = MemStore::default();
    let mut spill = TxnSpill::open(Box::new(store.clone()), 16, small_filter(), KEEP, 0);
    let mut ids = TxnIds::default();
    push(&mut ids, &mut spill, 0, 200, 0, 10 * SEC);
    let now = 200 * 10 * SEC;
    assert_eq!(found(&spill, 5, now), Some(5));
    let mut any = |_| true;
    assert_eq!(
        spill
            .find(1, 5, now, 60 * SEC, &mut { usize::MAX }, &mut any)
            .unwrap(),
        None
    );
    // Two hours on, the buckets left the window and their files are removed.
    push(&mut ids, &mut spill, 200, 40, now + 2 * KEEP, SEC);
    assert!(store.buckets().iter().all(|b| *b >= bucket_of(now + KEEP)));
    assert_eq!(found(&spill, 5, now + 2 * KEEP + 100 * SEC), None);
}

#[test]
fn a_restart_with_any_bound_finds_every_spilled_id() {
    // Review s25 H2: files written before a restart are read after it, whatever the bound.
    let store = MemStore::default();
    let mut spill = TxnSpill::open(Box::new(store.clone()), 50, small_filter(), KEEP, 0);
    let mut ids = TxnIds::default();
    push(&mut ids, &mut spill, 0, 500, SEC, SEC);
    let spilled: Vec<u64> = (0..500).filter(|h| ids.get(1, *h).is_none()).collect();
    assert!(spilled.len() > 400);
    let now = 501 * SEC;
    for bound in [MIN_HOT_IDS, 1_000_000] {
        let again = TxnSpill::open(Box::new(store.clone()), bound, small_filter(), KEEP, now);
        for h in &spilled {
            assert_eq!(found(&again, *h, now), Some(*h), "bound {bound}, id {h}");
        }
    }
}

#[test]
fn generations_dropped_for_room_are_searched_in_their_files() {
    // Review s25 H3: the smallest ring, a burst far past its shares.
    let store = MemStore::default();
    let tiny = FilterConfig {
        bytes: 13 * 2 * 64,
        equal_shares: false,
        ..FilterConfig::default()
    };
    let mut spill = TxnSpill::open(Box::new(store.clone()), 16, tiny, KEEP, 0);
    let mut ids = TxnIds::default();
    push(&mut ids, &mut spill, 0, 20_000, SEC, 1000);
    let ring = spill.ring.as_ref().unwrap();
    assert!(ring.stats().evicted_in_window > 0, "the burst evicted");
    let now = SEC + 20_000 * 1000;
    for h in (0..20_000).step_by(97) {
        if ids.get(1, h).is_none() {
            assert_eq!(found(&spill, h, now), Some(h), "id {h}");
        }
    }
}

#[test]
fn a_failed_write_keeps_the_ids_in_the_table() {
    let store = MemStore::default();
    let mut spill = TxnSpill::open(Box::new(store.clone()), 16, small_filter(), KEEP, 0);
    let mut ids = TxnIds::default();
    *store.fail_writes.lock().unwrap() = true;
    push(&mut ids, &mut spill, 0, 100, SEC, SEC);
    assert_eq!(
        ids.len(),
        100,
        "nothing forgotten while the files cannot be written"
    );
    assert!(store.buckets().is_empty());
    let attempts = *store.attempts.lock().unwrap();
    assert!(
        attempts <= (100 - 16) / 4 + 1,
        "tried again every quarter of the bound, not at every push: {attempts}"
    );
    *store.fail_writes.lock().unwrap() = false;
    push(&mut ids, &mut spill, 100, 5, SEC, SEC);
    assert!(ids.len() <= 16);
    for h in 0..105 {
        assert!(ids.get(1, h) == Some(h) || found(&spill, h, 200 * SEC) == Some(h));
    }
}

#[test]
fn whole_time_groups_are_spilled() {
    let mut ids = TxnIds::default();
    ids.record(1, 1, 0, &[1, 2, 3]);
    ids.record(2, 1, 3, &[4, 5]);
    assert_eq!(ids.whole_groups_of(1), 3);
    assert_eq!(ids.whole_groups_of(4), 5);
    ids.forget_oldest(3);
    assert_eq!(ids.len(), 2);
    assert_eq!(ids.get(1, 1), None);
    assert_eq!(ids.get(1, 4), Some(3));
    assert_eq!(
        ids.oldest(1),
        vec![(
            2,
            TxnRow {
                pid: 1,
                offset: 3,
                hash: 4
            }
        )]
    );
}

#[test]
fn rows_stay_in_the_table_until_their_file_is_durable() {
    // Review s26 H2: the write runs off the caller; until it is done the rows are still found
    // in the table, and nothing is forgotten twice when some expire meanwhile.
    let store = MemStore::default();
    let mut spill = TxnSpill::open(Box::new(store.clone()), 16, small_filter(), KEEP, 0);
    let mut ids = TxnIds::default();
    *store.gate.0.lock().unwrap() = true;
    for i in 0..40u64 {
        let t = SEC + i as i64 * SEC;
        ids.record(t, 1, i, &[i]);
        spill.spill(&mut ids, KEEP, t);
    }
    assert_eq!(ids.len(), 40, "nothing leaves before its file is durable");
    assert!(store.buckets().is_empty());
    for h in 0..40 {
        assert_eq!(ids.get(1, h), Some(h));
    }
    // A row recorded while the write is in flight (the seal itself is tested by
    // `rows_recorded_at_the_time_of_a_group_taken_whole_stay_until_written`).
    let t_last = 40 * SEC;
    ids.record(t_last, 1, 40, &[40]);
    // The two oldest rows expire while the write is in flight.
    ids.expire(3 * SEC);
    assert_eq!(ids.len(), 39);
    {
        let (shut, cv) = &*store.gate;
        *shut.lock().unwrap() = false;
        cv.notify_all();
    }
    spill.settle(&mut ids, KEEP);
    let now = 100 * SEC;
    // The spill started at the 17th row took 17 - 16 + 4 = 5 (ids 0..5), one spill at a
    // time: 2 of them expired, 3 are forgotten now.
    assert_eq!(ids.len(), 39 - 3);
    for h in 5..41 {
        assert_eq!(ids.get(1, h), Some(h), "id {h} still hot");
    }
    for h in 0..5 {
        assert_eq!(ids.get(1, h), None);
        assert_eq!(found(&spill, h, now), Some(h), "id {h} in the files");
    }
}

#[test]
fn a_spill_in_flight_over_a_replaced_table_forgets_nothing_there() {
    let store = MemStore::default();
    let mut spill = TxnSpill::open(Box::new(store.clone()), 16, small_filter(), KEEP, 0);
    let mut ids = TxnIds::default();
    *store.gate.0.lock().unwrap() = true;
    for i in 0..20u64 {
        ids.record(SEC + i as i64, 1, i, &[i]);
        spill.spill(&mut ids, KEEP, SEC + i as i64);
    }
    let mut installed = TxnIds::default();
    installed.record(2 * SEC, 2, 0, &[7]);
    spill.table_replaced();
    {
        let (shut, cv) = &*store.gate;
        *shut.lock().unwrap() = false;
        cv.notify_all();
    }
    spill.settle(&mut installed, KEEP);
    assert_eq!(installed.get(2, 7), Some(0));
    assert_eq!(
        found(&spill, 0, 3 * SEC),
        Some(0),
        "the file's ids reach the filters"
    );
}

#[test]
fn a_file_unreadable_at_start_is_searched_by_every_lookup() {
    // Review s26 M2: its keys never reached the filters, so the filters cannot skip it.
    let store = MemStore::default();
    let mut spill = TxnSpill::open(Box::new(store.clone()), 16, small_filter(), KEEP, 0);
    let mut ids = TxnIds::default();
    push(&mut ids, &mut spill, 0, 100, SEC, SEC);
    drop(spill);
    *store.fail_keys.lock().unwrap() = true;
    let now = 200 * SEC;
    let again = TxnSpill::open(Box::new(store.clone()), 16, small_filter(), KEEP, now);
    *store.reads.lock().unwrap() = 0;
    assert_eq!(found(&again, 3, now), Some(3));
    assert_eq!(found(&again, 1_000_000, now), None);
    assert!(
        *store.reads.lock().unwrap() > 1,
        "a new id searched the files too"
    );
}

#[test]
fn a_group_that_never_spills_starts_no_writer() {
    // Review s27 L1: under today's default nothing spills, so no thread and no minute job.
    let store = MemStore::default();
    let mut spill = TxnSpill::open(Box::new(store.clone()), 1000, small_filter(), KEEP, 0);
    let mut ids = TxnIds::default();
    push(&mut ids, &mut spill, 0, 500, SEC, 10 * SEC);
    assert!(!spill.writer_started());
    assert_eq!(spill.filter_bytes(), 0);
    push(&mut ids, &mut spill, 500, 1200, 6000 * SEC, SEC);
    assert!(spill.writer_started(), "the first spill starts it");
    drop(spill);
    // Files at open: the writer runs from the start, to merge and expire them.
    let again = TxnSpill::open(
        Box::new(store.clone()),
        1000,
        small_filter(),
        KEEP,
        7700 * SEC,
    );
    assert!(again.writer_started());
}

#[test]
fn filters_the_writer_allocated_are_counted_before_they_are_installed() {
    // Review s27 L2: the first spill's filters wait for the engine side (the group's next
    // push); the `dedup` pool counts them from their allocation on.
    let store = MemStore::default();
    let mut spill = TxnSpill::open(Box::new(store.clone()), 16, small_filter(), KEEP, 0);
    let mut ids = TxnIds::default();
    *store.gate.0.lock().unwrap() = true;
    for i in 0..17u64 {
        ids.record(SEC + i as i64, 1, i, &[i]);
        spill.spill(&mut ids, KEEP, SEC + i as i64);
    }
    // The writer allocates before it writes: once the write has started, the filters exist.
    while *store.attempts.lock().unwrap() == 0 {
        std::thread::yield_now();
    }
    assert!(spill.ring.is_none(), "not installed yet");
    let charged = spill.filter_bytes();
    assert!(charged >= 64 << 10, "counted while in flight: {charged}");
    {
        let (shut, cv) = &*store.gate;
        *shut.lock().unwrap() = false;
        cv.notify_all();
    }
    spill.settle(&mut ids, KEEP);
    assert!(spill.ring.is_some());
    assert_eq!(spill.filter_bytes(), charged, "counted once when installed");
}

#[test]
fn rows_recorded_at_the_time_of_a_group_taken_whole_stay_until_written() {
    // Review s27 M2: a spill that takes the newest time group whole must not forget rows
    // recorded at that same time while the file is written (`TxnIds::seal`).
    let store = MemStore::default();
    let mut spill = TxnSpill::open(Box::new(store.clone()), 16, small_filter(), KEEP, 0);
    let mut ids = TxnIds::default();
    *store.gate.0.lock().unwrap() = true;
    let t = 5 * SEC;
    for i in 0..17u64 {
        ids.record(t, 1, i, &[i]);
        spill.spill(&mut ids, KEEP, t);
    }
    // All 17 rows share one time group: the spill took it whole. One more at that time.
    ids.record(t, 1, 17, &[17]);
    spill.spill(&mut ids, KEEP, t);
    {
        let (shut, cv) = &*store.gate;
        *shut.lock().unwrap() = false;
        cv.notify_all();
    }
    spill.settle(&mut ids, KEEP);
    for h in 0..17 {
        assert_eq!(ids.get(1, h), None, "id {h} left with its file");
        assert_eq!(found(&spill, h, t), Some(h));
    }
    assert_eq!(
        ids.get(1, 17),
        Some(17),
        "the row written after the take stays"
    );
}

/// 1 h window, G = 12: generations of 5 min span 5-6 one-minute buckets. Ids at `per_sec` a
/// second for `secs` from `t0`, spilled past a hot table of 64.
fn an_hour_and_more(
    store: &MemStore,
    bytes: u64,
    secs: i64,
    per_sec: u64,
) -> (TxnSpill, TxnIds, i64) {
    let filter = FilterConfig {
        bytes,
        ..FilterConfig::default()
    };
    let mut spill = TxnSpill::open(Box::new(store.clone()), 64, filter, KEEP, 0);
    let mut ids = TxnIds::default();
    let t0 = 100 * SEC;
    let mut h = 0;
    for s in 0..secs {
        let t = t0 + s * SEC;
        for _ in 0..per_sec {
            ids.record(t, 1, h, &[h]);
            h += 1;
        }
        ids.expire(t - KEEP);
        spill.spill(&mut ids, KEEP, t);
        spill.settle(&mut ids, KEEP);
    }
    (spill, ids, t0 + secs * SEC)
}

#[test]
fn a_maybe_searches_one_bucket_not_the_generations_span() {
    // Review s27 B1: tags name the bucket inside the generation.
    let store = MemStore::default();
    let (spill, ids, now) = an_hour_and_more(&store, 13 * 12 * 64, 3600, 2);
    let ring = spill.ring.as_ref().unwrap();
    assert!(ring.generations().count() >= 12);
    assert!(
        store.buckets().len() >= 55,
        "{} buckets",
        store.buckets().len()
    );
    let mut maybes = 0;
    *store.reads.lock().unwrap() = 0;
    for h in 10_000_000..10_020_000u64 {
        let key = id_key(1, h);
        let gens = ring.lookup(key, now, KEEP).count();
        let before = *store.reads.lock().unwrap();
        assert_eq!(found(&spill, h, now), None);
        let searched = *store.reads.lock().unwrap() - before;
        maybes += gens;
        // A generation that may hold the key names its buckets by tag: one each (rarely
        // more, when a block is nearly full), not its whole span of 5-6.
        assert!(
            searched <= 6 * gens,
            "{searched} buckets for {gens} generations"
        );
    }
    let searched = *store.reads.lock().unwrap();
    eprintln!("20000 new ids: {maybes} generation maybes, {searched} bucket searches");
    assert!(maybes > 100, "the test reaches the files: {maybes}");
    assert!(
        (searched as f64) < 1.2 * maybes as f64,
        "{searched} bucket searches for {maybes} generation maybes"
    );
    // Spilled ids are found, each in its one bucket (plus rare false positives).
    *store.reads.lock().unwrap() = 0;
    let mut n = 0;
    for h in (0..7200u64).step_by(13) {
        if ids.get(1, h).is_none()
            && bucket_of(100 * SEC + (h as i64 / 2) * SEC) > bucket_of(now - KEEP)
        {
            assert_eq!(found(&spill, h, now), Some(h), "id {h}");
            n += 1;
        }
    }
    let searched = *store.reads.lock().unwrap();
    // Its own bucket, plus the false positives of newer generations asked before it.
    assert!(
        searched < 2 * n,
        "{searched} bucket searches for {n} spilled ids"
    );
}

#[test]
fn a_start_reads_the_persisted_filters_not_the_id_files() {
    // Review s27 "Restart": closed generations' bits are saved; a start installs them and
    // reads only the buckets none covers (the open generation's, a partial last one).
    let store = MemStore::default();
    let (spill, ids, now) = an_hour_and_more(&store, 13 * 64 * 64, 5400, 1);
    drop(spill);
    let saved = store.filters.lock().unwrap().len();
    assert!(saved >= 12, "{saved} generations saved");
    let buckets = store.buckets().len();
    let spilled: Vec<u64> = (0..5400).filter(|h| ids.get(1, *h).is_none()).collect();
    let filter = FilterConfig {
        bytes: 13 * 64 * 64,
        ..FilterConfig::default()
    };
    let check = |again: &TxnSpill| {
        let horizon = now - KEEP;
        let mut n = 0;
        for &h in &spilled {
            // Ids whose bucket is wholly inside the window (the oldest may have left).
            if bucket_of(100 * SEC + h as i64 * SEC) > bucket_of(horizon) {
                assert_eq!(found(again, h, now), Some(h), "id {h}");
                n += 1;
            }
        }
        assert!(n > 3000, "{n} ids checked");
    };
    *store.keys_read.lock().unwrap() = 0;
    let again = TxnSpill::open(Box::new(store.clone()), 64, filter, KEEP, now);
    let r = again.restored();
    assert!(r.installed >= 11, "{r:?}");
    assert!(r.buckets_read <= 14, "{r:?} of {buckets} buckets");
    // Plus, at most, the first bucket of the first installed generation.
    assert!(*store.keys_read.lock().unwrap() as u64 <= r.buckets_read + 1);
    check(&again);
    // New ids are still mostly answered without a file.
    *store.reads.lock().unwrap() = 0;
    for h in 50_000_000..50_002_000 {
        assert_eq!(found(&again, h, now), None);
    }
    assert!(*store.reads.lock().unwrap() < 400);
    drop(again);

    // A damaged filter file is not trusted: its buckets are read from the id files.
    let names: Vec<FilterFileName> = store.filters.lock().unwrap().keys().copied().collect();
    store.damaged.lock().unwrap().push(names[names.len() / 2]);
    let again = TxnSpill::open(Box::new(store.clone()), 64, filter, KEEP, now);
    let r2 = again.restored();
    assert!(r2.buckets_read > r.buckets_read, "{r2:?} against {r:?}");
    assert!(r2.installed >= 5, "{r2:?}");
    check(&again);
    drop(again);

    // Filters made for another size are not used; the id files are read, nothing lost.
    let other = FilterConfig {
        bytes: 13 * 128 * 64,
        ..FilterConfig::default()
    };
    let again = TxnSpill::open(Box::new(store.clone()), 64, other, KEEP, now);
    assert_eq!(again.restored().installed, 0);
    check(&again);
}

#[test]
fn a_start_after_another_start_chains_the_generations() {
    // Generations saved by the second process follow those installed from the first.
    let store = MemStore::default();
    let (spill, mut ids, now) = an_hour_and_more(&store, 13 * 64 * 64, 1800, 1);
    drop(spill);
    let filter = FilterConfig {
        bytes: 13 * 64 * 64,
        ..FilterConfig::default()
    };
    let mut spill = TxnSpill::open(Box::new(store.clone()), 64, filter, KEEP, now);
    for s in 0..1800 {
        let t = now + s * SEC;
        let h = 1800 + s as u64;
        ids.record(t, 1, h, &[h]);
        ids.expire(t - KEEP);
        spill.spill(&mut ids, KEEP, t);
        spill.settle(&mut ids, KEEP);
    }
    drop(spill);
    let end = now + 1800 * SEC;
    let again = TxnSpill::open(Box::new(store.clone()), 64, filter, KEEP, end);
    let r = again.restored();
    assert!(r.installed >= 11 && r.buckets_read <= 14, "{r:?}");
    for h in (0..3600u64).step_by(3) {
        if ids.get(1, h).is_none() {
            assert_eq!(found(&again, h, end), Some(h), "id {h}");
        }
    }
}

#[test]
fn a_slow_group_draws_filters_for_its_rate() {
    // Review s27 B2: a group that spills one id a second draws what an hour of that needs,
    // not half the allowance.
    static A: crate::dedup_filter::FilterAllowance = crate::dedup_filter::FilterAllowance::new();
    let store = MemStore::default();
    let total = 64 << 20;
    let filter = FilterConfig {
        bytes: total,
        ..FilterConfig::default()
    };
    let mut spill = TxnSpill::open_shared(Box::new(store.clone()), 64, filter, &A, KEEP, 0);
    let mut ids = TxnIds::default();
    push(&mut ids, &mut spill, 0, 200, SEC, SEC);
    let drawn = A.drawn();
    // 3600 ids × 13/12 × 10 bits / 8 × 5/4 ≈ 6 KiB, at least the ring's minimum.
    assert!(drawn > 0 && drawn < 64 << 10, "drew {drawn}");
    assert_eq!(spill.filter_bytes() as u64, drawn);
    drop(spill);
    assert_eq!(A.drawn(), 0);
}

#[test]
fn a_bucket_unreadable_at_start_is_never_saved_as_covered() {
    // Review s28 finding 1: a generation built while a bucket could not be read lacks its
    // keys; saved and chained, the next start would read that bucket nowhere.
    let store = MemStore::default();
    let (spill, mut ids, now) = an_hour_and_more(&store, 13 * 64 * 64, 1800, 1);
    drop(spill);
    let filter = FilterConfig {
        bytes: 13 * 64 * 64,
        ..FilterConfig::default()
    };
    *store.fail_keys.lock().unwrap() = true;
    let mut spill = TxnSpill::open(Box::new(store.clone()), 64, filter, KEEP, now);
    assert!(spill.restored().installed >= 4, "{:?}", spill.restored());
    *store.fail_keys.lock().unwrap() = false;
    // More than one generation's span, so the one open at the start closes and is offered
    // for saving.
    for s in 0..900 {
        let t = now + s * SEC;
        let h = 1800 + s as u64;
        ids.record(t, 1, h, &[h]);
        ids.expire(t - KEEP);
        spill.spill(&mut ids, KEEP, t);
        spill.settle(&mut ids, KEEP);
    }
    drop(spill);
    let end = now + 900 * SEC;
    let again = TxnSpill::open(Box::new(store.clone()), 64, filter, KEEP, end);
    for h in 0..2700u64 {
        if ids.get(1, h).is_none() {
            assert_eq!(found(&again, h, end), Some(h), "id {h}");
        }
    }
}

#[test]
fn a_damaged_newest_filter_file_costs_its_own_buckets_only() {
    // Review s28 finding 5: the ring's size comes from the newest file that loads; from the
    // damaged newest one it fell back to half the allowance, and no file of a group that drew
    // for its rate matched.
    static A: crate::dedup_filter::FilterAllowance = crate::dedup_filter::FilterAllowance::new();
    let store = MemStore::default();
    let filter = FilterConfig {
        bytes: 64 << 20,
        ..FilterConfig::default()
    };
    let mut spill = TxnSpill::open_shared(Box::new(store.clone()), 64, filter, &A, KEEP, 0);
    let mut ids = TxnIds::default();
    push(&mut ids, &mut spill, 0, 5400, 100 * SEC, SEC);
    drop(spill);
    let now = 100 * SEC + 5400 * SEC;
    let newest = store.filters().into_iter().max().unwrap();
    store.damaged.lock().unwrap().push(newest);
    let again = TxnSpill::open_shared(Box::new(store.clone()), 64, filter, &A, KEEP, now);
    let r = again.restored();
    assert!(r.installed >= 10, "{r:?}");
    assert!(A.drawn() < 1 << 20, "drew {} for its rate again", A.drawn());
    let mut n = 0;
    for h in 0..5400u64 {
        if ids.get(1, h).is_none() && bucket_of(100 * SEC + h as i64 * SEC) > bucket_of(now - KEEP)
        {
            assert_eq!(found(&again, h, now), Some(h), "id {h}");
            n += 1;
        }
    }
    assert!(n > 3000, "{n} ids checked");
}

/// Bucket searches per lookup of `n` new ids (none of them pushed).
fn searches_per_new_id(store: &MemStore, spill: &TxnSpill, now: i64, n: u64) -> f64 {
    *store.reads.lock().unwrap() = 0;
    for h in 900_000_000..900_000_000 + n {
        assert_eq!(found(spill, h, now), None);
    }
    *store.reads.lock().unwrap() as f64 / n as f64
}

#[test]
fn a_group_whose_rate_rises_grows_its_filters_and_a_start_keeps_the_grown_size() {
    // Review s28 finding 2: a group drew its filters for the rate of its first spill and kept
    // them whatever its rate became; a start kept the size of its files for good.
    static A: crate::dedup_filter::FilterAllowance = crate::dedup_filter::FilterAllowance::new();
    static B: crate::dedup_filter::FilterAllowance = crate::dedup_filter::FilterAllowance::new();
    let filter = FilterConfig {
        bytes: 64 << 20,
        ..FilterConfig::default()
    };
    let (slow, fast) = (SEC, SEC / 20);
    let t0 = 100 * SEC;
    // The group under test: 1 id a second for 15 min, then 20 a second for 2 h.
    let store = MemStore::default();
    let mut spill = TxnSpill::open_shared(Box::new(store.clone()), 256, filter, &A, KEEP, 0);
    let mut ids = TxnIds::default();
    push(&mut ids, &mut spill, 0, 900, t0, slow);
    let first = spill.ring.as_ref().unwrap().current_bytes();
    let t1 = t0 + 900 * SEC;
    let n_fast = 20 * 7200;
    // This thread stands for the state lock's holder: the old arena must not be freed here.
    let dropped_here = crate::dedup_filter::DROPPED_HERE.with(|d| d.get());
    for i in 0..n_fast {
        let (h, t) = (900 + i, t1 + i as i64 * fast);
        ids.record(t, 1, h, &[h]);
        ids.expire(t - KEEP);
        spill.spill(&mut ids, KEEP, t);
        spill.settle(&mut ids, KEEP);
    }
    let now = t1 + n_fast as i64 * fast;
    // The same 20 a second from its first spill: the ring drawn for that rate (the target).
    let store_b = MemStore::default();
    let mut spill_b = TxnSpill::open_shared(Box::new(store_b.clone()), 256, filter, &B, KEEP, 0);
    let mut ids_b = TxnIds::default();
    for i in 0..n_fast {
        let t = t1 + i as i64 * fast;
        ids_b.record(t, 1, i, &[i]);
        ids_b.expire(t - KEEP);
        spill_b.spill(&mut ids_b, KEEP, t);
        spill_b.settle(&mut ids_b, KEEP);
    }
    let ring = spill.ring.as_ref().unwrap();
    let grown = ring.current_bytes();
    let target = spill_b.ring.as_ref().unwrap().current_bytes();
    let got = searches_per_new_id(&store, &spill, now, 20_000);
    let want = searches_per_new_id(&store_b, &spill_b, now, 20_000);
    eprintln!(
        "filters {first} -> {grown} bytes (drawn for the fast rate: {target}); bucket searches per new id {got:.3}, drawn for the rate {want:.3}"
    );
    assert!(grown >= 10 * first, "grew from {first} to {grown} bytes");
    assert_eq!(ring.arenas(), 1, "the old arena left with its window");
    assert_eq!(
        crate::dedup_filter::DROPPED_HERE.with(|d| d.get()),
        dropped_here,
        "the old arena was freed under the lock, not by the writer (review s29 M1)"
    );
    assert_eq!(A.drawn(), grown, "the old share went back");
    assert!(
        got <= 1.5 * want + 0.05,
        "{got} searches per new id, {want} at the target"
    );
    // Spilled ids are found.
    let horizon = now - KEEP;
    let mut n = 0;
    for h in (900..900 + n_fast).step_by(97) {
        let t = t1 + (h - 900) as i64 * fast;
        if ids.get(1, h).is_none() && bucket_of(t) > bucket_of(horizon) {
            assert_eq!(found(&spill, h, now), Some(h), "id {h}");
            n += 1;
        }
    }
    assert!(n > 500, "{n} ids checked");
    let share = ring.equal_share_blocks();
    drop(spill);
    assert_eq!(A.drawn(), 0);
    // A start draws the grown size (its newest saved generations') and installs them.
    let again = TxnSpill::open_shared(Box::new(store.clone()), 256, filter, &A, KEEP, now);
    let r = again.ring.as_ref().unwrap();
    assert_eq!(r.equal_share_blocks(), share);
    assert!(again.restored().installed >= 10, "{:?}", again.restored());
    let after = searches_per_new_id(&store, &again, now, 20_000);
    assert!(
        after <= 1.5 * want + 0.05,
        "{after} searches per new id after a start"
    );
}

#[test]
fn growing_groups_stay_inside_the_allowance_and_a_start_mid_change_finds_every_id() {
    // Findings 2 and 6 together: grows draw from the same total as first draws, the old arena
    // is held until its generations leave, and a start while generations of two sizes are
    // saved installs those of the newest size and reads the others' buckets from the id files.
    static A: crate::dedup_filter::FilterAllowance = crate::dedup_filter::FilterAllowance::new();
    let total = 192 << 10;
    let filter = FilterConfig {
        bytes: total,
        ..FilterConfig::default()
    };
    let (sx, sy) = (MemStore::default(), MemStore::default());
    let mut x = TxnSpill::open_shared(Box::new(sx.clone()), 256, filter, &A, KEEP, 0);
    let mut y = TxnSpill::open_shared(Box::new(sy.clone()), 256, filter, &A, KEEP, 0);
    let (mut ix, mut iy) = (TxnIds::default(), TxnIds::default());
    let t0 = 100 * SEC;
    push(&mut ix, &mut x, 0, 900, t0, SEC);
    let first = x.ring.as_ref().unwrap().current_bytes();
    let t1 = t0 + 900 * SEC;
    let fast = SEC / 20;
    let n = 20 * 2400u64;
    let within = |x: &TxnSpill, y: &TxnSpill| {
        let held = x.filter_bytes() + y.filter_bytes();
        assert!(
            held as u64 <= total,
            "{held} bytes of filters, {total} allowed"
        );
        assert!(A.drawn() <= total, "{} drawn of {total}", A.drawn());
    };
    for i in 0..n {
        let t = t1 + i as i64 * fast;
        let h = 900 + i;
        ix.record(t, 1, h, &[h]);
        iy.record(t, 1, i, &[i]);
        ix.expire(t - KEEP);
        iy.expire(t - KEEP);
        x.spill(&mut ix, KEEP, t);
        x.settle(&mut ix, KEEP);
        y.spill(&mut iy, KEEP, t);
        y.settle(&mut iy, KEEP);
        within(&x, &y);
    }
    let now = t1 + n as i64 * fast;
    let r = x.ring.as_ref().unwrap();
    let grown = r.current_bytes();
    let share = r.equal_share_blocks();
    assert!(
        grown > 4 * first,
        "grew from {first} to {grown} inside the total"
    );
    assert_eq!(
        r.arenas(),
        2,
        "generations of the first size are still in the window"
    );
    let sizes: std::collections::BTreeSet<usize> = sx
        .filters
        .lock()
        .unwrap()
        .values()
        .map(|f| f.blocks.len())
        .collect();
    assert!(
        sizes.len() >= 2,
        "saved generations of both sizes: {sizes:?}"
    );
    // While both arenas are live, every spilled id inside the window is found through the
    // filters of both sizes (review s29 dedup L3). `find` also reads the id files of buckets
    // the ring lost, so each id's own bucket must be named by the filters' tags, or a broken
    // lookup in either arena would pass through that fallback (review s30 L5).
    let mut live = 0;
    let mut hits = Vec::new();
    for h in 0..900 + n {
        let t = if h < 900 {
            t0 + h as i64 * SEC
        } else {
            t1 + (h - 900) as i64 * fast
        };
        if ix.get(1, h).is_none() && bucket_of(t) > bucket_of(now - KEEP) {
            hits.clear();
            r.lookup_tags(id_key(1, h), now, KEEP, &mut hits);
            assert!(
                hits.iter().any(|&(_, b)| b == bucket_of(t)),
                "id {h}: the filters do not name its bucket {} ({hits:?})",
                bucket_of(t)
            );
            assert_eq!(found(&x, h, now), Some(h), "id {h} before the restart");
            live += 1;
        }
    }
    assert!(live > 40_000, "{live} ids checked");
    drop(x);
    let again = TxnSpill::open_shared(Box::new(sx.clone()), 256, filter, &A, KEEP, now);
    within(&again, &y);
    assert_eq!(again.ring.as_ref().unwrap().equal_share_blocks(), share);
    assert!(again.restored().installed >= 3, "{:?}", again.restored());
    let mut checked = 0;
    for h in 0..900 + n {
        let t = if h < 900 {
            t0 + h as i64 * SEC
        } else {
            t1 + (h - 900) as i64 * fast
        };
        if ix.get(1, h).is_none() && bucket_of(t) > bucket_of(now - KEEP) {
            assert_eq!(found(&again, h, now), Some(h), "id {h}");
            checked += 1;
        }
    }
    assert!(checked > 40_000, "{checked} ids checked");
}

/// Review s29 dedup L2: a grow sent with a job the writer never answers (it died) is no
/// longer asked for. Before, `growing` stayed set and the group could never grow again.
#[test]
fn a_grow_lost_with_the_writer_can_be_asked_again() {
    static A: crate::dedup_filter::FilterAllowance = crate::dedup_filter::FilterAllowance::new();
    let filter = FilterConfig {
        bytes: 64 << 20,
        ..FilterConfig::default()
    };
    let store = MemStore::default();
    let mut spill = TxnSpill::open_shared(Box::new(store.clone()), 256, filter, &A, KEEP, 0);
    let mut ids = TxnIds::default();
    let t0 = 100 * SEC;
    push(&mut ids, &mut spill, 0, 900, t0, SEC);
    let t1 = t0 + 900 * SEC;
    let fast = SEC / 20;
    let mut h = 900u64;
    let mut t = t1;
    let step = |ids: &mut TxnIds, spill: &mut TxnSpill, h: &mut u64, t: &mut i64| {
        ids.record(*t, 1, *h, &[*h]);
        ids.expire(*t - KEEP);
        spill.spill(ids, KEEP, *t);
        spill.settle(ids, KEEP);
        *h += 1;
        *t += fast;
    };
    while spill.grow_ask.is_none() {
        assert!(h < 900 + 20 * 3600, "no grow asked for");
        step(&mut ids, &mut spill, &mut h, &mut t);
    }
    assert!(spill.growing);
    let drawn = A.drawn();
    store.panic_writes.store(true, Ordering::Release);
    let sent_by = h + 10_000;
    while spill.grow_ask.is_some() {
        assert!(h < sent_by, "the grow was never sent");
        step(&mut ids, &mut spill, &mut h, &mut t);
    }
    assert!(spill.pending.is_none(), "the lost spill was collected");
    assert!(!spill.growing, "the lost grow is still taken as asked for");
    assert!(A.drawn() < drawn, "the lost grow's draw went back");
    // Review s30 L4: the grow the dead writer allocated went with its unwind, so the `dedup`
    // pool no longer counts it.
    let ring_bytes = spill.ring.as_ref().unwrap().allocated_bytes();
    assert_eq!(
        spill.filter_bytes(),
        ring_bytes + spill.store.cache_bytes(),
        "the lost grow's bytes are still counted"
    );
    // Review s30 M4: the next spill starts a fresh writer, so the table comes back under its
    // bound and the group's own rate asks for the grow again (no hand call of `weigh_rate`).
    store.panic_writes.store(false, Ordering::Release);
    let written = store.attempts.lock().unwrap().to_owned();
    let asked_by = h + 20 * 3600;
    while spill.grow_ask.is_none() {
        assert!(h < asked_by, "no grow asked for after the writer died");
        step(&mut ids, &mut spill, &mut h, &mut t);
    }
    assert!(spill.growing);
    assert!(
        *store.attempts.lock().unwrap() > written,
        "no write after the death"
    );
    assert!(ids.len() <= 256, "{} rows in a table of 256", ids.len());
    assert_eq!(spill.writer_deaths, 0, "a live writer answered");
    // Every spilled id inside the window is still found.
    let now = t - fast;
    for k in (900..h).step_by(53) {
        let at = t1 + (k - 900) as i64 * fast;
        if ids.get(1, k).is_none() && bucket_of(at) > bucket_of(now - KEEP) {
            assert_eq!(found(&spill, k, now), Some(k), "id {k}");
        }
    }
}

/// Review s30 M4: a store whose every write panics kills every writer; a group restarts one a
/// bounded number of times, then starts no more (no thread per spill) and keeps every id.
#[test]
fn a_writer_that_always_dies_is_restarted_a_bounded_number_of_times() {
    let store = MemStore::default();
    store.panic_writes.store(true, Ordering::Release);
    let mut spill = TxnSpill::open(Box::new(store.clone()), 16, small_filter(), KEEP, 0);
    let mut ids = TxnIds::default();
    let n = 2000;
    push(&mut ids, &mut spill, 0, n, 100 * SEC, SEC / 10);
    let attempts = *store.attempts.lock().unwrap();
    assert_eq!(
        attempts, MAX_WRITER_DEATHS as usize,
        "writes (each in a thread that died)"
    );
    assert_eq!(spill.writer_deaths, MAX_WRITER_DEATHS);
    assert!(!spill.writer_started(), "no writer after giving up");
    assert_eq!(spill.filter_bytes(), 0, "nothing allocated is counted");
    for k in 0..n {
        assert!(ids.get(1, k).is_some(), "id {k} was dropped");
    }
}

/// Pushes `secs` seconds of `per_sec` ids a second from `t0`, the longest window `keep`,
/// spilling as the engine does at each append; ids (= offsets) go on from `*h`. The time
/// after the last.
#[allow(clippy::too_many_arguments)]
fn feed(
    spill: &mut TxnSpill,
    ids: &mut TxnIds,
    keep: i64,
    t0: i64,
    secs: i64,
    per_sec: u64,
    h: &mut u64,
) -> i64 {
    for s in 0..secs {
        let t = t0 + s * SEC;
        for _ in 0..per_sec {
            ids.record(t, 1, *h, &[*h]);
            *h += 1;
        }
        ids.expire(t - keep);
        spill.spill(ids, keep, t);
        spill.settle(ids, keep);
    }
    t0 + secs * SEC
}

#[test]
fn a_group_holding_a_window_past_the_hour_keeps_its_ids_in_memory() {
    // Review s34 d H1: past the filters' hour a spilled id is found only by searching its
    // window bucket by bucket, so a bound turned such a group's new ids into refusals. Such
    // a group now spills nothing; its hot table holds the window (the memory gate bounds it).
    const WEEK: i64 = 7 * 24 * 3600 * SEC;
    let store = MemStore::default();
    let mut spill = TxnSpill::open(Box::new(store.clone()), 64, small_filter(), WEEK, 0);
    let mut ids = TxnIds::default();
    let mut h = 0;
    let now = feed(&mut spill, &mut ids, WEEK, 100 * SEC, 3600, 2, &mut h);
    assert_eq!(ids.len(), 7200, "every id of the window is in the table");
    assert!(!spill.writer_started(), "no writer, no file");
    assert!(store.buckets().is_empty());
    assert_eq!(spill.filter_bytes(), 0, "no filters drawn");
    // Every window back within the hour: the group spills down to its bound again.
    feed(&mut spill, &mut ids, KEEP, now, 60, 2, &mut h);
    assert!(ids.len() <= 64, "{} rows in the table", ids.len());
    assert!(!store.buckets().is_empty());
    for k in (h - 7000..h).step_by(71) {
        assert!(
            ids.get(1, k).is_some() || found(&spill, k, now + 60 * SEC).is_some(),
            "id {k} lost when the group began to spill again"
        );
    }
}

#[test]
fn ids_spilled_before_a_window_passed_the_hour_are_found_by_time_for_the_rest_of_it() {
    // A group that spilled under 1 h windows, then a queue's window set to a day: nothing
    // spills from then on, and the files already written stay, searched by time once past
    // the filters' edge: at most the ~61 buckets the last hour left, inside one cycle's
    // budget, and found after a restart too.
    const DAY: i64 = 24 * 3600 * SEC;
    let store = MemStore::default();
    let mut spill = TxnSpill::open(Box::new(store.clone()), 64, small_filter(), KEEP, 0);
    let mut ids = TxnIds::default();
    let mut h = 0;
    let changed = feed(&mut spill, &mut ids, KEEP, 100 * SEC, 2 * 3600, 1, &mut h);
    let files = store.buckets();
    assert!(files.len() <= 62, "{} buckets of files", files.len());
    let now = feed(&mut spill, &mut ids, DAY, changed, 2 * 3600, 1, &mut h);
    assert_eq!(
        store.buckets(),
        files,
        "nothing spilled after the change, nothing removed"
    );
    let day = |s: &TxnSpill, k: u64, left: &mut usize| {
        s.find(1, k, now, DAY, left, &mut |o| o == k).unwrap()
    };
    // Ids 3 700..7 000 were pushed 2-3 h ago, in the files of the hour before the change.
    for k in (3_700..7_000u64).step_by(97) {
        let mut left = BY_TIME_SEARCHES_PER_CYCLE;
        assert_eq!(day(&spill, k, &mut left), Some(k), "id {k}");
        assert_eq!(
            found(&spill, k, now),
            None,
            "id {k} is past a 1 h queue's window"
        );
    }
    let mut left = BY_TIME_SEARCHES_PER_CYCLE;
    assert_eq!(day(&spill, 900_000_000, &mut left), None);
    let searched = BY_TIME_SEARCHES_PER_CYCLE - left;
    assert!(searched <= 62, "{searched} searches by time for a new id");
    drop(spill);
    let again = TxnSpill::open(Box::new(store.clone()), 64, small_filter(), DAY, now);
    for k in (3_700..7_000u64).step_by(89) {
        let mut left = BY_TIME_SEARCHES_PER_CYCLE;
        assert_eq!(day(&again, k, &mut left), Some(k), "id {k} after a restart");
    }
}
