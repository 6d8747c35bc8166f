//! The transaction ids that left the hot table (issue 12, docs/storage-format.md "The
//! transaction-id index off the heap"): past `dedup_hot_ids` rows, the oldest rows of
//! [`TxnIds`] are written to durable id files (through an [`IdStore`]) and added to the window
//! filters, then forgotten by the table. Push dedup and `GET /messages/{p}/{txn}` then ask the
//! table, then the filters, then the files of the buckets the filters name.
//!
//! Why buckets of entry time and not the filters' generation numbers name the files: the
//! numbers restart at 0 with the process, the time does not, so files written before a restart
//! are found after it, whatever the configuration (review s25 H2).
//!
//! Why a writer thread (review s26 H2): the sort, the write, its two fsyncs and the minute's
//! merge took 15 ms to 1 s under the state lock, so every request of the group waited. Now the
//! rows taken stay in the table, still found, until the writer says their file is durable;
//! only then, under the lock, are they given to the filters and forgotten. The writer also
//! merges closed buckets and removes expired ones; the store keeps lookups consistent with
//! that (a lookup never sees a name the writer is about to remove).
//!
//! Exactness: the filters only skip files. Every bucket a filter cannot vouch for (a generation
//! dropped for room while inside the window, review s25 H3; filters that could not be
//! allocated) is searched in its files. A damaged file is the store's to report and drop
//! (H4): its ids are no longer found, nothing else is refused.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Instant;

use super::txn_filter_files::{restore, FilterFileName, Origins, RestoreReport, SavedFilter};
use super::txn_ids::{TxnIds, TxnRow};
use super::txn_searched::Searched;
use crate::dedup_filter::{
    Arena, FilterAllowance, FilterConfig, FilterDraw, GenerationRing, RingError, Want, BLOCK_BYTES,
};

/// Width of one id-file bucket: the `generation` number in an id file's name is
/// `entry time / ID_BUCKET_US`. Fixed, so files of any past configuration keep their meaning.
pub const ID_BUCKET_US: i64 = 60 * 1_000_000;
/// The least `dedup_hot_ids`: a table of fewer rows would write a file per push.
pub const MIN_HOT_IDS: usize = 16;

/// The longest past the filters cover, whatever the longest dedup window (review s27 B3): a
/// queue's window goes up to 7 days, and a ring stretched to it spans 14 h per generation in
/// the bits sized for 1 h, so the filters saturate and every new id of every queue searches
/// files. Past this, a lookup of a longer-window queue searches the id files by time
/// (`TxnSpill::find`); shorter-window queues never pay for it. One hour: the default window,
/// the one `dedup_filter_bytes` is sized for, and generations of 5 min at the default G.
pub const FILTER_WINDOW_MAX_US: i64 = 3600 * 1_000_000;

/// The window the filters cover for a longest dedup window of `keep_us`.
pub fn filter_window_us(keep_us: i64) -> i64 {
    keep_us.clamp(1, FILTER_WINDOW_MAX_US)
}

/// Whether a group whose longest dedup window is `keep_us` may spill ids to files (review
/// s34 d H1): past the filters' hour a spilled id is found only by searching bucket after
/// bucket by time, ~60 a window hour per new id, so such a group keeps its ids in the hot
/// table, bounded by the memory gate (writes refused at the state budget) instead.
pub fn spills_with(keep_us: i64) -> bool {
    keep_us <= FILTER_WINDOW_MAX_US
}

/// Id-file searches by time (past the filters' hour, review s33 H1) that one planner cycle
/// of a group may spend over all its lookups. Each runs under the group's state lock and
/// out of the cache: an open, a header read, ~log2(blocks) + 1 block reads and a close,
/// ~10 syscalls, some 20-50 us on a page-cached disk (reckoned), so 256 hold the lock for
/// ~5-13 ms per cycle at most, about one fsync of the cycle's entry; and they cover ~4 h
/// past the hour even when every minute spilled (a bucket with no file costs nothing).
/// A lookup that needs more is refused retryably, never left holding the lock.
pub const BY_TIME_SEARCHES_PER_CYCLE: usize = 256;

/// Writer threads that may die in a row (each restarted) before a group stops starting them:
/// a panic that a retry may not meet again (one bad job) is survived, a store that panics at
/// every write costs this many threads, not one per spill (review s30 M4).
const MAX_WRITER_DEATHS: u32 = 3;

pub fn bucket_of(at_us: i64) -> u64 {
    (at_us.max(0) / ID_BUCKET_US) as u64
}

/// The key of (partition, xxh3 of the transaction id) in the filters and the id files.
pub fn id_key(pid: u64, hash: u64) -> u64 {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&pid.to_le_bytes());
    b[8..].copy_from_slice(&hash.to_le_bytes());
    xxhash_rust::xxh3::xxh3_64(&b)
}

/// Durable id files by bucket. The broker's is `<data_dir>/ids/` (docs/storage-format.md "Id
/// files"); tests use one in memory. Shared by the engine (lookups, under the state lock) and
/// the spill's writer thread (writes, merges, removals), so every method takes `&self`: a
/// store must let a lookup run while a file is written or merged, and must not show a lookup
/// a file it is removing.
pub trait IdStore: Send + Sync {
    /// Writes the (key, offset) pairs of one spill of `bucket` as a new file, durable with its
    /// name when this returns.
    fn write(&self, bucket: u64, pairs: &mut [(u64, u64)]) -> Result<(), String>;
    /// Buckets that have files, ascending.
    fn buckets(&self) -> Vec<u64>;
    /// Calls `each` with every key of the bucket's files (rebuilding the filters at start). A
    /// damaged file is reported and dropped by the store, not answered. An error: a file that
    /// could not be read at all is kept, and its keys did not all reach `each`.
    fn keys(&self, bucket: u64, each: &mut dyn FnMut(u64)) -> Result<(), String>;
    /// Offers each offset of `key` in the bucket's files to `accept` until it takes one. A
    /// damaged file is reported and skipped; an error means a file could not be read at all,
    /// so the caller cannot tell new from duplicate.
    fn find(
        &self,
        bucket: u64,
        key: u64,
        accept: &mut dyn FnMut(u64) -> bool,
    ) -> Result<Option<u64>, String>;
    /// `find` without keeping the files it opens in the store's cache (a search by time,
    /// review s33 H1: one pass over more files than the cache holds must not evict the
    /// files the filters name). Files already cached are used.
    fn find_uncached(
        &self,
        bucket: u64,
        key: u64,
        accept: &mut dyn FnMut(u64) -> bool,
    ) -> Result<Option<u64>, String> {
        self.find(bucket, key, accept)
    }
    /// Merges a bucket's files into one (no more ids will be written to it).
    fn merge(&self, bucket: u64);
    /// Removes the files of every bucket before `bucket` (and the filter files whose last
    /// bucket is before it).
    fn remove_before(&self, bucket: u64);
    /// Persists a closed filter generation, durable with its name when this returns.
    fn save_filter(&self, _f: &SavedFilter) -> Result<(), String> {
        Err("this store keeps no filter files".into())
    }
    /// The filter files present.
    fn filters(&self) -> Vec<FilterFileName> {
        Vec::new()
    }
    /// Reads one filter file; a damaged one is reported and removed by the store (an error).
    fn load_filter(&self, name: FilterFileName) -> Result<SavedFilter, String> {
        Err(format!("no filter file {name:?}"))
    }
    /// Bytes of RAM the store holds for lookups (open files, block fences), counted in the
    /// `dedup` pool.
    fn cache_bytes(&self) -> usize {
        0
    }
}

/// Work for the writer, in the order it was asked.
enum Job {
    /// Rows taken from the table, oldest first; keys are given times never before `newest_us`.
    Spill {
        rows: Vec<(i64, TxnRow)>,
        newest_us: i64,
        /// The group's first spill: the filters to allocate (for this window), here and not
        /// under the lock, since every page of them is touched (seconds for 256 MiB on a
        /// loaded host).
        ring: Option<(FilterConfig, i64)>,
        /// A bigger arena for the generations to come (review s28 finding 2), drawn already:
        /// allocated here for the same reason.
        grow: Option<(FilterConfig, FilterDraw)>,
    },
    /// The buckets before this one left the longest window.
    RemoveBefore(u64),
    /// A closed generation's bits, to persist (a start then reads them, not its ids).
    SaveFilter(Box<SavedFilter>),
    /// Arenas no generation uses any more: freed here, since unmapping a whole resident arena
    /// under the state lock stalls every push of the group (review s29 M1). Their draws go
    /// back to the allowance when they are dropped.
    Drop(Vec<Arena>),
}

/// A spill's outcome: on success the rows' keys are in durable files.
struct Done {
    written: Result<(), String>,
    /// (time given, key) per row, in the rows' order: what the filters take.
    given: Vec<(i64, u64)>,
    newest_us: i64,
    ring: Option<Result<GenerationRing, RingError>>,
    grown: Option<Result<Arena, RingError>>,
}

/// The writer's own bookkeeping.
#[derive(Default)]
struct WriterState {
    /// The bucket written last and not merged yet.
    open_bucket: Option<u64>,
}

/// Runs one job; `report` gets a spill's outcome as soon as its files are durable, before
/// the merges that follow it.
///
/// `charged` holds the bytes of filters allocated here and not yet taken by the engine side,
/// so the `dedup` pool counts them from their allocation on (review s27 L2).
fn run_job(
    store: &dyn IdStore,
    st: &mut WriterState,
    job: Job,
    charged: &AtomicUsize,
    report: &mut dyn FnMut(Done),
) {
    let (rows, mut newest, ring, grow) = match job {
        Job::RemoveBefore(b) => {
            store.remove_before(b);
            return;
        }
        Job::Drop(arenas) => {
            drop(arenas);
            return;
        }
        Job::SaveFilter(f) => {
            if let Err(e) = store.save_filter(&f) {
                // Only the next start's speed depends on it: it reads those ids instead.
                tracing::warn!(error = %e, "a dedup filter generation could not be saved; the next start reads its id files");
            }
            return;
        }
        Job::Spill {
            rows,
            newest_us,
            ring,
            grow,
        } => (rows, newest_us, ring, grow),
    };
    let ring = ring.map(|(c, window)| {
        let made = GenerationRing::new(c, window);
        if let Ok(r) = &made {
            charged.fetch_add(r.allocated_bytes(), Ordering::AcqRel);
        }
        made
    });
    // A failed allocation drops the draw with the error: its share goes back.
    let grown = grow.map(|(c, draw)| {
        let made = Arena::new(&c).map(|a| a.with_draw(draw));
        if let Ok(a) = &made {
            charged.fetch_add(a.bytes() as usize, Ordering::AcqRel);
        }
        made
    });
    let mut per: BTreeMap<u64, Vec<(u64, u64)>> = BTreeMap::new();
    let mut given: Vec<(i64, u64)> = Vec::with_capacity(rows.len());
    for (t, TxnRow { pid, offset, hash }) in rows {
        newest = newest.max(t);
        let key = id_key(pid, hash);
        per.entry(bucket_of(newest))
            .or_default()
            .push((key, offset));
        given.push((newest, key));
    }
    let mut written = Ok(());
    for (b, pairs) in per.iter_mut() {
        if let Err(e) = store.write(*b, pairs) {
            written = Err(format!("bucket {b}: {e}"));
            break;
        }
    }
    let ok = written.is_ok();
    report(Done {
        written,
        given,
        newest_us: newest,
        ring,
        grown,
    });
    if !ok {
        return;
    }
    // Buckets before the newest written get no more ids: one file each.
    let newest_bucket = bucket_of(newest);
    let closed: Vec<u64> = st
        .open_bucket
        .into_iter()
        .chain(per.keys().copied())
        .filter(|b| *b < newest_bucket)
        .collect();
    for b in closed {
        store.merge(b);
    }
    st.open_bucket = Some(newest_bucket);
}

enum Writer {
    Thread {
        jobs: Option<mpsc::Sender<Job>>,
        done: mpsc::Receiver<Done>,
        handle: Option<JoinHandle<()>>,
    },
    /// No thread could be started: jobs run in the caller, as before session 27.
    /// (`Done` boxed: it holds whole allocations' handles and would size the enum.)
    Inline {
        st: WriterState,
        done: Option<Box<Done>>,
    },
}

impl Writer {
    fn start(store: Arc<dyn IdStore>, charged: Arc<AtomicUsize>) -> Writer {
        let (jobs_tx, jobs_rx) = mpsc::channel::<Job>();
        let (done_tx, done_rx) = mpsc::channel::<Done>();
        let spawned = std::thread::Builder::new()
            .name("queen-dedup-spill".into())
            .spawn(move || {
                let mut st = WriterState::default();
                while let Ok(job) = jobs_rx.recv() {
                    run_job(&*store, &mut st, job, &charged, &mut |d| {
                        // The engine side is gone only when it is dropping: nothing to tell.
                        let _ = done_tx.send(d);
                    });
                }
            });
        match spawned {
            Ok(handle) => Writer::Thread {
                jobs: Some(jobs_tx),
                done: done_rx,
                handle: Some(handle),
            },
            Err(e) => {
                tracing::warn!(error = %e, "no dedup spill writer thread: id files are written under the state lock");
                Writer::Inline {
                    st: WriterState::default(),
                    done: None,
                }
            }
        }
    }

    fn send(&mut self, store: &dyn IdStore, charged: &AtomicUsize, job: Job) {
        match self {
            Writer::Thread { jobs, .. } => {
                let sent = jobs.as_ref().map(|j| j.send(job));
                if !matches!(sent, Some(Ok(()))) {
                    // The thread is gone (it panicked): the job is lost, so a spill's rows
                    // stay in the table; `poll` says so.
                    tracing::error!("the dedup spill writer thread has stopped");
                }
            }
            Writer::Inline { st, done } => {
                run_job(store, st, job, charged, &mut |d| *done = Some(Box::new(d)))
            }
        }
    }

    /// A finished spill, if any; `wait` blocks until the one in flight is done. `Err` when
    /// the writer is gone and will never answer.
    fn poll(&mut self, wait: bool) -> Result<Option<Done>, ()> {
        match self {
            Writer::Thread { done, .. } => {
                let got = if wait {
                    done.recv().map_err(|_| mpsc::TryRecvError::Disconnected)
                } else {
                    done.try_recv()
                };
                match got {
                    Ok(d) => Ok(Some(d)),
                    Err(mpsc::TryRecvError::Empty) => Ok(None),
                    Err(mpsc::TryRecvError::Disconnected) => Err(()),
                }
            }
            Writer::Inline { done, .. } => Ok(done.take().map(|d| *d)),
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        if let Writer::Thread { jobs, handle, .. } = self {
            // Closing the queue ends the thread after its last job: a new incarnation of the
            // group then opens the directory with no writer of the old one still in it.
            jobs.take();
            if let Some(h) = handle.take() {
                let _ = h.join();
            }
        }
    }
}

/// A spill handed to the writer: its rows are still in the table.
struct Pending {
    /// `TxnIds::forgotten` when the rows were taken, and how many: the rows are those with
    /// places `front_at..front_at + n` in the table's history.
    front_at: u64,
    n: usize,
    /// False once the table was replaced (a snapshot install): the rows are not there to
    /// forget, but the keys still go to the filters, since their file exists.
    same_table: bool,
    /// A grow went with the job: whatever comes back (a lost writer brings no arena), it is
    /// no longer asked for, or the group could never grow again (review s29 dedup L2).
    grow_sent: bool,
}

pub struct TxnSpill {
    store: Arc<dyn IdStore>,
    /// Started at the first job (review s27 L1): a group that never spills, and has no id
    /// files, runs no thread and no minute's removal.
    writer: Option<Writer>,
    /// Filters the writer allocated that `collect` has not taken yet (review s27 L2).
    charged: Arc<AtomicUsize>,
    /// Writer threads that died (panicked) since one last answered; at
    /// `MAX_WRITER_DEATHS` no new one is started (review s30 M4).
    writer_deaths: u32,
    pending: Option<Pending>,
    hot_ids: usize,
    /// With an allowance, `filter.bytes` is its total and the ring gets what it draws.
    filter: FilterConfig,
    allowance: Option<&'static FilterAllowance>,
    /// The first arena's draw until the ring holds it.
    draw: Option<FilterDraw>,
    /// A bigger arena drawn for the rate (review s28 finding 2), not sent to the writer yet;
    /// `growing` while it is asked for and not installed, so it is asked once.
    grow_ask: Option<(FilterConfig, FilterDraw)>,
    growing: bool,
    /// Closed generations numbered below this have had their rate weighed.
    rate_checked: u64,
    /// Allocated at the first spill (or at start when files exist): a broker whose ids all
    /// fit the hot table never pays for it.
    ring: Option<GenerationRing>,
    /// Ids at or before this entry time are not all in the ring (`i64::MIN`: the ring is
    /// exact; `i64::MAX`: there is no ring).
    ring_lost_through_us: i64,
    /// The newest time given to the ring: later spills never go back (the ring's own rule),
    /// and a key's bucket is the bucket of the time it was given, so the ring's generation
    /// times name the buckets to search.
    newest_us: i64,
    removed_below: u64,
    /// A failed write is warned about once until one succeeds, and tried again only once
    /// the table holds this many rows (not at every push while the disk refuses).
    failing: bool,
    retry_at_len: usize,
    /// This process's epoch in filter files' names (grows across starts).
    epoch: u64,
    /// Generations installed from filter files: their writers' (epoch, number).
    origins: Origins,
    restored: RestoreReport,
    /// Per id key, the buckets a search by time already covered without a match (review
    /// s34 d H1 (c)): lookups take `&self` (a read answers under a shared borrow of the
    /// state), so it sits behind a lock no one else contends for.
    searched: Mutex<Searched>,
    /// The longest window passed the hour at the last spill call: spilling is held (logged
    /// once per change).
    held_long: bool,
}

impl TxnSpill {
    /// A spill over `store`, its filters rebuilt from the files it holds (buckets older than
    /// `keep_us` before `now_us` are removed first).
    pub fn open(
        store: Box<dyn IdStore>,
        hot_ids: usize,
        filter: FilterConfig,
        keep_us: i64,
        now_us: i64,
    ) -> TxnSpill {
        Self::open_inner(store, hot_ids, filter, None, keep_us, now_us)
    }

    /// `open`, the filters drawn from `allowance` (of `filter.bytes` in all) at the first
    /// spill instead of `filter.bytes` of their own.
    pub fn open_shared(
        store: Box<dyn IdStore>,
        hot_ids: usize,
        filter: FilterConfig,
        allowance: &'static FilterAllowance,
        keep_us: i64,
        now_us: i64,
    ) -> TxnSpill {
        Self::open_inner(store, hot_ids, filter, Some(allowance), keep_us, now_us)
    }

    fn open_inner(
        store: Box<dyn IdStore>,
        hot_ids: usize,
        filter: FilterConfig,
        allowance: Option<&'static FilterAllowance>,
        keep_us: i64,
        now_us: i64,
    ) -> TxnSpill {
        let store: Arc<dyn IdStore> = Arc::from(store);
        let below = bucket_of(now_us.saturating_sub(keep_us));
        store.remove_before(below);
        // Tags name the one bucket a "maybe" searches (review s27 B1).
        let mut filter = filter;
        filter.tag_us = ID_BUCKET_US;
        let epoch = store
            .filters()
            .iter()
            .map(|f| f.epoch.saturating_add(1))
            .max()
            .unwrap_or(0)
            .max(u64::try_from(now_us).unwrap_or(0));
        let mut spill = TxnSpill {
            writer: None,
            charged: Arc::new(AtomicUsize::new(0)),
            writer_deaths: 0,
            store,
            pending: None,
            hot_ids: hot_ids.max(MIN_HOT_IDS),
            filter,
            allowance,
            draw: None,
            grow_ask: None,
            growing: false,
            rate_checked: 0,
            ring: None,
            ring_lost_through_us: i64::MIN,
            newest_us: i64::MIN,
            removed_below: below,
            failing: false,
            retry_at_len: 0,
            epoch,
            origins: Origins::new(),
            restored: RestoreReport::default(),
            searched: Mutex::new(Searched::default()),
            held_long: false,
        };
        let buckets = spill.store.buckets();
        if !buckets.is_empty() {
            // The size the persisted filters were made with, so their bits can be used: of
            // the newest file that loads, so one damaged or unreadable file does not make the
            // start read the whole window (review s28 finding 5).
            let mut names = spill.store.filters();
            names.sort_unstable_by(|a, b| b.cmp(a));
            let want = names
                .into_iter()
                .find_map(|n| spill.store.load_filter(n).ok())
                .map_or(Want::Half, |f| {
                    let g = u64::from(spill.filter.generations) + 1;
                    Want::Exact((f.blocks.len() as u64).saturating_mul(g * BLOCK_BYTES as u64))
                });
            spill.ensure_ring(keep_us, want);
            // Files to merge and expire: the writer runs from the start.
            spill.start_writer();
        }
        if !buckets.is_empty() {
            // Persisted generations where they can be used, the id files of the rest (a key
            // read from its file is given the end of its bucket: never earlier than its entry
            // time, so the ring keeps it at least as long as the window does).
            let mut lost = i64::MIN;
            // Buckets older than the filters cover are searched by time, never put in the ring.
            let from = bucket_of(now_us.saturating_sub(filter_window_us(keep_us)));
            let newest = restore(
                &*spill.store,
                from,
                &mut spill.ring,
                &mut spill.origins,
                &mut spill.restored,
                // The filters cannot vouch for such a bucket: every lookup inside the window
                // searches it, and fails closed while the file cannot be read (review s26 M2).
                &mut |at| lost = lost.max(at),
            );
            spill.ring_lost_through_us = spill.ring_lost_through_us.max(lost);
            spill.newest_us = spill.newest_us.max(newest);
            spill.save_closed();
        }
        for b in buckets {
            // Files of older buckets may be the inputs of an interrupted merge.
            spill.store.merge(b);
        }
        spill.sync_lost();
        spill
    }

    pub fn hot_ids(&self) -> usize {
        self.hot_ids
    }

    /// What the last start read: generations installed from filter files, buckets read from
    /// id files.
    pub fn restored(&self) -> RestoreReport {
        self.restored
    }

    /// Hands the generations the ring closed since the last call to the writer, to persist.
    /// Their bits are copied here, under the caller's lock (a memcpy of one share, about
    /// 20 MiB for the default allowance, every window / G).
    fn save_closed(&mut self) {
        let Some(r) = self.ring.as_mut() else {
            return;
        };
        let closed = r.take_closed();
        let mut jobs = Vec::new();
        for n in closed {
            let (Some(g), Some(bits)) = (r.generation(n), r.bits(n)) else {
                continue;
            };
            if self.origins.contains_key(&n) {
                // Installed from a file that is still there.
                continue;
            }
            if g.opened_us <= self.ring_lost_through_us {
                // Its span may hold a bucket whose keys never reached the ring (unreadable at
                // start, or evicted): saved, it would be trusted as whole by the next start
                // (review s28 finding 1). Left out, the chain breaks here and the next start
                // reads those buckets from the id files.
                continue;
            }
            let origin = |m: u64| self.origins.get(&m).copied().unwrap_or((self.epoch, m));
            let (epoch, number) = origin(n);
            jobs.push(SavedFilter {
                name: FilterFileName {
                    first_bucket: bucket_of(g.opened_us),
                    last_bucket: bucket_of(g.last_us),
                    epoch,
                    number,
                },
                prev: n.checked_sub(1).map(origin),
                opened_us: g.opened_us,
                last_us: g.last_us,
                keys: g.keys,
                tag_us: r.config().tag_us,
                k: r.probes(),
                blocks: bits.to_vec(),
            });
        }
        for f in jobs {
            self.send(Job::SaveFilter(Box::new(f)));
        }
    }

    /// Bytes of the filters' allocation (0 until the first spill), counting filters the
    /// writer allocated that are not installed yet.
    pub fn filter_bytes(&self) -> usize {
        self.ring
            .as_ref()
            .map_or(0, |r| r.allocated_bytes())
            .saturating_add(self.charged.load(Ordering::Acquire))
            .saturating_add(self.store.cache_bytes())
            .saturating_add(self.searched().bytes())
    }

    /// The searched ranges; a poisoned lock (a panic in a lookup) still holds sound ranges,
    /// since each is written whole.
    fn searched(&self) -> MutexGuard<'_, Searched> {
        self.searched.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the writer thread (or its inline stand-in) was started.
    pub fn writer_started(&self) -> bool {
        self.writer.is_some()
    }

    fn start_writer(&mut self) -> &mut Writer {
        let (store, charged) = (self.store.clone(), self.charged.clone());
        self.writer
            .get_or_insert_with(|| Writer::start(store, charged))
    }

    /// Hands the arenas the ring freed (and any grow it replaced) to the writer to drop.
    fn drop_freed(&mut self) {
        let freed = self.ring.as_mut().map(GenerationRing::take_freed);
        if let Some(freed) = freed.filter(|f| !f.is_empty()) {
            self.send(Job::Drop(freed));
        }
    }

    fn send(&mut self, job: Job) {
        if self.writer.is_none() && self.writer_deaths >= MAX_WRITER_DEATHS {
            // Given up on (logged once, in `writer_died`): the job is lost as it would be in
            // a dead thread's queue; a spill's rows stay in the table.
            return;
        }
        let (store, charged) = (self.store.clone(), self.charged.clone());
        self.start_writer().send(&*store, &charged, job);
    }

    /// The writer thread is gone (it panicked). Dropping it joins the dead thread, so a later
    /// job starts a fresh one; before, every later job went to the dead queue and failed, so
    /// no spill ever succeeded again and the hot table grew without bound (review s30 M4).
    /// Nothing the dead thread allocated survived its unwind: `charged` goes to 0, or the
    /// `dedup` pool would count the lost filters for the life of the group (review s30 L4).
    /// A store that panics every time must not cost a thread per spill: after
    /// `MAX_WRITER_DEATHS` in a row no writer is started again.
    fn writer_died(&mut self) {
        self.writer = None;
        self.charged.store(0, Ordering::Release);
        self.writer_deaths = self.writer_deaths.saturating_add(1);
        if self.writer_deaths == MAX_WRITER_DEATHS {
            tracing::error!(
                deaths = self.writer_deaths,
                "the dedup spill writer thread died this many times in a row; no new one is started, so this group's ids stay in memory until it restarts"
            );
        }
    }

    /// What the filters of a group spilling `rows` (oldest first) need for `keep_us` at the
    /// rate the rows show: G + 1 generations at `bits_per_key`, plus a quarter (review s27 B2).
    fn want_for(&self, rows: &[(i64, TxnRow)], keep_us: i64) -> Want {
        let (Some(first), Some(last)) = (rows.first(), rows.last()) else {
            return Want::Half;
        };
        let span = last.0.saturating_sub(first.0);
        if span <= 0 || rows.len() < 2 {
            return Want::Half;
        }
        let g = u128::from(self.filter.generations);
        let covered = filter_window_us(keep_us) as u128;
        let ids = rows.len() as u128 * covered / span as u128 * (g + 1) / g;
        let bytes = ids * u128::from(self.filter.bits_per_key) / 8 * 5 / 4;
        Want::Rate(u64::try_from(bytes).unwrap_or(u64::MAX))
    }

    /// The filters to allocate, when there are none yet (drawing them from the allowance).
    fn ring_request(&mut self, keep_us: i64, want: Want) -> Option<(FilterConfig, i64)> {
        if self.ring.is_some() || self.ring_lost_through_us == i64::MAX {
            return None;
        }
        let mut config = self.filter;
        if let Some(a) = self.allowance {
            if self.draw.is_none() {
                match a.draw_want(config.bytes, config.min_bytes(), want) {
                    Some(d) => self.draw = Some(d),
                    None => {
                        tracing::warn!(
                            total = config.bytes,
                            "the dedup filter allowance is spent by other groups: every spilled id lookup of this group reads the id files"
                        );
                        self.ring_lost_through_us = i64::MAX;
                        return None;
                    }
                }
            }
            config.bytes = self.draw.as_ref().map_or(config.bytes, |d| d.bytes());
        }
        Some((config, filter_window_us(keep_us)))
    }

    fn ensure_ring(&mut self, keep_us: i64, want: Want) {
        if let Some((config, window)) = self.ring_request(keep_us, want) {
            self.install_ring(GenerationRing::new(config, window));
        }
    }

    fn install_ring(&mut self, made: Result<GenerationRing, RingError>) {
        if self.ring.is_some() || self.ring_lost_through_us == i64::MAX {
            return;
        }
        match made {
            Ok(mut r) => {
                // The ring's first arena gives its share back when it is freed (a grow).
                if let Some(d) = self.draw.take() {
                    r.hold_draw(d);
                }
                self.ring = Some(r)
            }
            Err(e) => {
                tracing::warn!(error = %e, "dedup filters not allocated: every spilled id lookup reads the id files");
                self.draw = None;
                self.ring_lost_through_us = i64::MAX;
            }
        }
    }

    /// Review s28 finding 2: a group draws its filters for the rate of its first spill, so a
    /// rate that rises later would overfill them for good (nearly every new id a "maybe"). When
    /// a generation closes holding more ids than the ring's arena is sized for (G + 1 such
    /// generations at `bits_per_key`, plus a quarter, as `want_for`), a bigger arena is drawn
    /// from the allowance now (an atomic, no allocation) and allocated by the writer with the
    /// next spill; the generations opened after it arrives use it, and the old arena's share
    /// goes back when its last generation leaves the window. Only with the node allowance (a
    /// ring of its own has the size it was given), one change in flight at a time, and only
    /// for at least a quarter more than now (no churn on a drifting rate). A shrink is not
    /// built: a group whose rate falls keeps its size until it restarts (a start draws the
    /// size of its newest saved generation).
    fn weigh_rate(&mut self, keep_us: i64) {
        let (Some(a), Some(r)) = (self.allowance, self.ring.as_ref()) else {
            return;
        };
        let Some(g) = r
            .generations()
            .rev()
            .find(|g| g.closed && g.number >= self.rate_checked)
        else {
            return;
        };
        self.rate_checked = g.number.saturating_add(1);
        if self.growing || self.grow_ask.is_some() || r.arenas() > 1 {
            return;
        }
        let gens = u128::from(self.filter.generations) + 1;
        let need = u128::from(g.keys) * gens * u128::from(self.filter.bits_per_key) / 8 * 5 / 4;
        let need = u64::try_from(need).unwrap_or(u64::MAX);
        let now = r.current_bytes();
        let enough = now.saturating_add(now / 4);
        if need < enough {
            return;
        }
        let mut config = self.filter;
        let Some(d) = a.draw_want(config.bytes, config.min_bytes(), Want::Rate(need)) else {
            return;
        };
        if d.bytes() < enough {
            // The allowance cannot give enough more to be worth a second arena: `d` goes back.
            return;
        }
        config.bytes = d.bytes();
        tracing::info!(
            from = now,
            to = config.bytes,
            window_us = keep_us,
            ids = g.keys,
            "this group's dedup filters grow with its rate from the next generation on"
        );
        self.grow_ask = Some((config, d));
        self.growing = true;
    }

    fn sync_lost(&mut self) {
        if let Some(r) = &self.ring {
            self.ring_lost_through_us = self.ring_lost_through_us.max(r.stats().lost_through_us);
        }
    }

    /// After rows were recorded: a finished spill's rows go to the filters and leave the
    /// table; past `hot_ids`, the oldest rows (down to three quarters of the bound) are handed
    /// to the writer, one spill at a time. A failed write keeps them in the table (warned,
    /// counted) and is tried again later: no id is ever dropped. The time this holds the
    /// caller (the state lock) is `queen_dedup_spill_lock_seconds`.
    pub fn spill(&mut self, ids: &mut TxnIds, keep_us: i64, now_us: i64) {
        let started = Instant::now();
        let mut worked = false;
        let below = bucket_of(now_us.saturating_sub(keep_us));
        // No writer yet: no file was written, so none to remove.
        if below > self.removed_below && self.writer.is_some() {
            self.send(Job::RemoveBefore(below));
            self.removed_below = below;
        }
        worked |= self.collect(ids, keep_us, false);
        let may = spills_with(keep_us);
        if may == self.held_long {
            self.held_long = !may;
            if may {
                tracing::info!("every dedup window of this group is an hour or less again: its transaction ids spill past dedup_hot_ids");
            } else {
                tracing::info!(
                    window_s = keep_us / 1_000_000,
                    hot = ids.len(),
                    "a dedup window of this group passes an hour: its transaction ids stay in memory (bounded by the memory budget), none spill to id files"
                );
            }
        }
        if may
            && self.pending.is_none()
            && ids.len() > self.hot_ids
            && ids.len() >= self.retry_at_len
        {
            let n = ids.whole_groups_of(ids.len() - self.hot_ids + self.hot_ids / 4);
            let rows = ids.oldest(n);
            let want = self.want_for(&rows, keep_us);
            ids.seal();
            let ring = self.ring_request(keep_us, want);
            let grow = self.grow_ask.take();
            self.pending = Some(Pending {
                front_at: ids.forgotten(),
                n,
                same_table: true,
                grow_sent: grow.is_some(),
            });
            self.send(Job::Spill {
                rows,
                newest_us: self.newest_us,
                ring,
                grow,
            });
            // Inline, the job is already done.
            self.collect(ids, keep_us, false);
            worked = true;
        }
        if worked {
            metrics::histogram!("queen_dedup_spill_lock_seconds")
                .record(started.elapsed().as_secs_f64());
        }
    }

    /// Waits for the spill in flight, if any, and applies it (tests; a caller that needs the
    /// table at its bound).
    pub fn settle(&mut self, ids: &mut TxnIds, keep_us: i64) {
        self.collect(ids, keep_us, true);
    }

    /// The table was replaced (a snapshot install): the spill in flight forgets nothing.
    pub fn table_replaced(&mut self) {
        if let Some(p) = &mut self.pending {
            p.same_table = false;
        }
        // The new table may hold rows older than the filters' edge, still to be spilled into
        // buckets a recorded range covers.
        self.searched().clear();
    }

    /// Applies a finished spill, if there is one (waiting for it with `wait`). True when one
    /// was applied.
    fn collect(&mut self, ids: &mut TxnIds, keep_us: i64, wait: bool) -> bool {
        if self.pending.is_none() {
            return false;
        }
        let polled = match self.writer.as_mut() {
            Some(w) => w.poll(wait),
            None => Err(()),
        };
        let done = match polled {
            Ok(Some(d)) => {
                self.writer_deaths = 0;
                d
            }
            Ok(None) => return false,
            Err(()) => {
                if self.writer.is_some() {
                    self.writer_died();
                }
                Done {
                    written: Err("the writer thread has stopped".into()),
                    given: Vec::new(),
                    newest_us: self.newest_us,
                    ring: None,
                    grown: None,
                }
            }
        };
        let Some(p) = self.pending.take() else {
            return false;
        };
        if p.grow_sent {
            self.growing = false;
        }
        let allocated = done.ring.is_some() || done.grown.is_some();
        if let Some(made) = done.ring {
            self.install_ring(made);
        }
        if let Some(made) = done.grown {
            match (made, self.ring.as_mut()) {
                (Ok(a), Some(r)) => r.grow(a),
                // No ring to grow (a snapshot, an error): the arena and its draw go back,
                // freed by the writer.
                (Ok(a), None) => self.send(Job::Drop(vec![a])),
                (Err(e), _) => {
                    tracing::warn!(error = %e, "bigger dedup filters for this group's rate could not be allocated; it keeps the ones it has");
                }
            }
        }
        if allocated {
            // Counted by `ring` now, or dropped.
            self.charged.store(0, Ordering::Release);
        }
        // A grow may have replaced one not used yet.
        self.drop_freed();
        if let Err(e) = done.written {
            metrics::counter!("queen_dedup_spill_failures_total").increment(1);
            if !self.failing {
                tracing::warn!(error = %e, "transaction ids could not be written to their id file; they stay in memory until a write succeeds");
                self.failing = true;
            }
            self.retry_at_len = ids.len().saturating_add(self.hot_ids / 4);
            return true;
        }
        self.failing = false;
        self.retry_at_len = 0;
        self.ensure_ring(keep_us, Want::Half);
        if let Some(r) = &mut self.ring {
            r.set_window(filter_window_us(keep_us));
            for (at, key) in done.given {
                r.insert(at, key);
            }
        }
        self.newest_us = self.newest_us.max(done.newest_us);
        self.weigh_rate(keep_us);
        self.save_closed();
        self.sync_lost();
        self.drop_freed();
        if p.same_table {
            // Rows expired while the file was written are already gone.
            let end = p.front_at.saturating_add(p.n as u64);
            let left = end.saturating_sub(ids.forgotten());
            ids.forget_oldest(usize::try_from(left).unwrap_or(usize::MAX));
        }
        metrics::counter!("queen_dedup_spilled_ids_total").increment(p.n as u64);
        true
    }

    /// The offset of a spilled id of `pid` inside `window_us` before `now_us` that `accept`
    /// confirms (against the frame), newest bucket first. A bucket older than the filters
    /// cover costs one unit of `by_time_left` (the caller's cycle budget); with none left and
    /// such a bucket still to search, the lookup stops with `FindError::OverBudget`.
    ///
    /// What it searched by time without a match is remembered for the key's next lookup
    /// (`searched`): `accept` must then answer `true` for a frame it cannot read (the
    /// caller fails closed on it), never `false`, or an unread copy would be skipped for
    /// good. A caller whose check cannot tell uses [`Self::find_unremembered`].
    pub fn find(
        &self,
        pid: u64,
        hash: u64,
        now_us: i64,
        window_us: i64,
        by_time_left: &mut usize,
        accept: &mut dyn FnMut(u64) -> bool,
    ) -> Result<Option<u64>, FindError> {
        self.find_in(pid, hash, now_us, window_us, by_time_left, accept, true)
    }

    /// `find` that leaves the searched ranges as they were: for a check that answers
    /// `false` for a frame it could not read (an ack or trace by id, review s35 d H1: its
    /// negative, remembered, let a later push of the same id skip that copy).
    pub fn find_unremembered(
        &self,
        pid: u64,
        hash: u64,
        now_us: i64,
        window_us: i64,
        by_time_left: &mut usize,
        accept: &mut dyn FnMut(u64) -> bool,
    ) -> Result<Option<u64>, FindError> {
        self.find_in(pid, hash, now_us, window_us, by_time_left, accept, false)
    }

    #[allow(clippy::too_many_arguments)]
    fn find_in(
        &self,
        pid: u64,
        hash: u64,
        now_us: i64,
        window_us: i64,
        by_time_left: &mut usize,
        accept: &mut dyn FnMut(u64) -> bool,
        remember: bool,
    ) -> Result<Option<u64>, FindError> {
        let key = id_key(pid, hash);
        let horizon = now_us.saturating_sub(window_us);
        let lo = bucket_of(horizon);
        // Buckets the filters name or cannot vouch for: searched through the group's cache.
        let mut named: Vec<(u64, u64)> = Vec::new();
        if self.ring_lost_through_us >= horizon {
            named.push((lo, bucket_of(self.ring_lost_through_us.min(now_us))));
        }
        // Older than the filters cover (review s27 B3): the id's bucket is unknown, so every
        // bucket from the queue's horizon to the filters' edge is searched, newest first (its
        // own edge bucket included: a generation whose newest id is just before the edge may
        // have expired). Only a lookup whose own window passes the hour pays it.
        let edge = now_us.saturating_sub(FILTER_WINDOW_MAX_US);
        let by_time = (edge > horizon).then(|| (lo, bucket_of(edge)));
        if let Some(r) = &self.ring {
            // The tags name the bucket of each generation that may hold the key: a "maybe"
            // costs one bucket's files, not the generation's 5-6 (review s27 B1).
            let mut hits = Vec::new();
            r.lookup_tags(key, now_us, window_us, &mut hits);
            for (_, b) in hits {
                if b >= lo {
                    named.push((b, b));
                }
            }
        }
        metrics::counter!("queen_dedup_filter_lookups_total").increment(1);
        // Ring hits (and buckets they cannot vouch for) only, review s33 L2: the by-time
        // searches have their own counter, so this share still shows the filters'
        // saturation beside a long-window queue.
        if !named.is_empty() {
            metrics::counter!("queen_dedup_filter_maybes_total").increment(1);
        }
        if named.is_empty() && by_time.is_none() {
            return Ok(None);
        }
        let within = |r: &(u64, u64), b: u64| r.0 <= b && b <= r.1;
        // What an earlier lookup of this key already searched by time (review s34 d H1 (c)).
        let skip = by_time.and_then(|_| self.searched().get(key));
        let mut buckets: Vec<u64> = self
            .store
            .buckets()
            .into_iter()
            .filter(|b| {
                named.iter().any(|r| within(r, *b)) || by_time.is_some_and(|r| within(&r, *b))
            })
            .collect();
        buckets.reverse();
        for (i, b) in buckets.iter().copied().enumerate() {
            let found = if named.iter().any(|r| within(r, b)) {
                self.store.find(b, key, accept)
            } else {
                if skip.is_some_and(|r| within(&r, b)) {
                    continue;
                }
                if *by_time_left == 0 {
                    // Every bucket from the newest by time down to this one's successor was
                    // searched (now or before) or named: the next try starts below.
                    // Never the horizon's own bucket (review s35 d M1): it also holds ids
                    // older than this window, which a longer window later must not skip.
                    if let Some((oldest, newest)) = by_time.filter(|_| remember) {
                        let from = b.max(oldest).saturating_add(1);
                        if from <= newest {
                            self.searched().record(key, from, newest);
                        }
                    }
                    metrics::counter!("queen_dedup_by_time_refusals_total").increment(1);
                    return Err(FindError::OverBudget {
                        unsearched: buckets.len() - i,
                    });
                }
                *by_time_left -= 1;
                metrics::counter!("queen_dedup_by_time_bucket_searches_total").increment(1);
                // Out of the group's cache (review s33 H1): a scan newest first over more
                // files than the cache holds is its worst case, every file evicting the one
                // the next scan needs, and the hot hour's files with them.
                self.store.find_uncached(b, key, accept)
            };
            if let Some(off) = found.map_err(FindError::Unreadable)? {
                if by_time.is_some() {
                    self.searched().forget(key);
                }
                return Ok(Some(off));
            }
        }
        // A push refused for another item of its batch asks again: this key's window past
        // the hour need not be searched again.
        if let Some((oldest, newest)) = by_time.filter(|_| remember) {
            let from = oldest.saturating_add(1);
            if from <= newest {
                self.searched().record(key, from, newest);
            }
        }
        Ok(None)
    }
}

/// Why a lookup in the id files did not answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FindError {
    /// A file could not be read: the caller cannot tell new from duplicate.
    Unreadable(String),
    /// The cycle's by-time searches (`BY_TIME_SEARCHES_PER_CYCLE`) were spent with these
    /// buckets still to search: retry in a later cycle.
    OverBudget { unsearched: usize },
}

impl std::fmt::Display for FindError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FindError::Unreadable(e) => f.write_str(e),
            FindError::OverBudget { unsearched } => write!(
                f,
                "dedup_search_budget: this cycle's {BY_TIME_SEARCHES_PER_CYCLE} searches of id \
                 files older than an hour are spent, {unsearched} bucket(s) of the queue's \
                 dedup window still to search"
            ),
        }
    }
}

#[cfg(test)]
#[path = "txn_spill_tests.rs"]
mod tests;
