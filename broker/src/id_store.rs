//! The broker's id files (`<data_dir>/ids/`, docs/storage-format.md "Id files"): the durable
//! half of the transaction-id index that the engine's hot table spills to
//! (`queenmq_engine::state::TxnSpill`).
//!
//! A damaged file never stops anything (review s25 H4): it is removed, warned about once and
//! counted in `queen_dedup_id_files_damaged_total`; the dedup of its ids is lost, no
//! acknowledged message is. Only a file that cannot be read at all (an I/O error) makes a
//! lookup fail, and the push then fails closed (retry), as an unreadable frame does.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock};

use queenmq_engine::dedup_filter::Block;
use queenmq_engine::state::{FilterFileName, IdStore, SavedFilter};
use queenmq_storage::{
    FileBackend, FilterFile, FilterName, IdFileReader, IdFiles, IdSource, IoBackend, StorageError,
    NO_PREV_FILTER,
};

/// Open id files one group keeps for lookups (review s27 B1): a window's buckets (60 for 1 h)
/// plus the unmerged files of the open bucket fit; past it the least recently used is closed.
const MAX_OPEN_FILES: usize = 256;
/// What one open file costs besides its fences (the reader, its fd, the map entry).
const OPEN_FILE_BYTES: usize = 256;
/// The node-wide bound on cached id files when the descriptor limit cannot be read; with it,
/// at most a quarter of the soft limit (review s28 finding 3: 256 per group × 4096 groups
/// would pass any limit, and an exhausted limit fails accepts, segments and lookups).
const NODE_OPEN_FILES_MAX: usize = 1024;
/// Pauses between the reads of an id file at start that failed with an I/O error (review s27
/// M1): a transient error (EMFILE, an EIO the device retries) must not cost the file, and a
/// dead sector must not hold the start for long (60 ms per such file).
const READ_RETRY_PAUSES_MS: [u64; 2] = [10, 50];

/// Cached open id files of every group on the node, bounded together. A lookup that finds
/// the budget spent closes its own least recently used file, or reads with a file it closes
/// right after: it answers, it only reads more.
pub struct OpenFileBudget {
    /// 0: a quarter of the soft descriptor limit, at most `NODE_OPEN_FILES_MAX`.
    fixed: usize,
    limit: OnceLock<usize>,
    used: AtomicUsize,
}

impl OpenFileBudget {
    pub const fn new(fixed: usize) -> OpenFileBudget {
        OpenFileBudget {
            fixed,
            limit: OnceLock::new(),
            used: AtomicUsize::new(0),
        }
    }

    pub fn limit(&self) -> usize {
        *self.limit.get_or_init(|| {
            if self.fixed > 0 {
                return self.fixed;
            }
            soft_nofile().map_or(NODE_OPEN_FILES_MAX / 4, |n| {
                (n / 4).clamp(1, NODE_OPEN_FILES_MAX)
            })
        })
    }

    /// Cached files held by every store on this budget.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }

    fn try_take(&self) -> bool {
        let limit = self.limit();
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                (u < limit).then_some(u + 1)
            })
            .is_ok()
    }

    fn give_back(&self, n: usize) {
        if n > 0 {
            self.used.fetch_sub(n, Ordering::AcqRel);
        }
    }
}

/// The node's budget, shared by every group's `DiskIdStore`.
pub static NODE_OPEN_FILES: OpenFileBudget = OpenFileBudget::new(0);

/// The soft limit on open descriptors (Linux: /proc/self/limits, "Max open files").
fn soft_nofile() -> Option<usize> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    match line.split_whitespace().nth(3)? {
        "unlimited" => Some(usize::MAX),
        n => n.parse().ok(),
    }
}

/// Whether the process (EMFILE) or the system (ENFILE) is out of descriptors.
fn out_of_descriptors(e: &StorageError) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            if matches!(io.raw_os_error(), Some(23 | 24)) {
                return true;
            }
        }
        cause = c.source();
    }
    false
}

/// An open id file and the last key of each of its blocks, learnt as lookups read them.
struct OpenFile {
    reader: IdFileReader,
    fences: Mutex<Vec<Option<u64>>>,
    /// The store's lookup count at its last use, for closing the least recently used.
    used_at: AtomicU64,
}

impl OpenFile {
    fn bytes(&self) -> usize {
        OPEN_FILE_BYTES + self.reader.data_blocks() as usize * std::mem::size_of::<Option<u64>>()
    }
}

/// Counts of the store's I/O for lookups (tests and the measurements of issue 12).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LookupIo {
    pub opens: u64,
    pub block_reads: u64,
}

/// The subdirectory of a data dir holding the id files (the one a snapshot install replaces).
pub const IDS_DIR: &str = queenmq_storage::IDS_DIR;

pub struct DiskIdStore {
    files: IdFiles,
    /// The files by bucket, so a lookup lists no directory; behind a lock because a lookup
    /// (`&self`) drops the damaged files it meets.
    index: Mutex<BTreeMap<u64, Vec<IdSource>>>,
    /// The next spill's source number: one past the highest seen, so a name is never reused.
    next: AtomicU64,
    /// Held shared by a lookup while it opens a bucket's files, exclusively by the writer
    /// while it takes names out of `index` that it is about to remove (a merge's inputs,
    /// expired buckets): after that no lookup can be on its way to one of them.
    names: RwLock<()>,
    /// Open files by (bucket, source), bounded by `MAX_OPEN_FILES` and `budget`; each
    /// holds one unit of `budget`.
    open: Mutex<HashMap<(u64, IdSource), Arc<OpenFile>>>,
    budget: &'static OpenFileBudget,
    uses: AtomicU64,
    open_bytes: AtomicU64,
    opens: AtomicU64,
    block_reads: AtomicU64,
}

fn damaged(bucket: u64, source: IdSource, e: &StorageError) {
    metrics::counter!("queen_dedup_id_files_damaged_total").increment(1);
    tracing::warn!(
        bucket,
        source = ?source,
        error = %e,
        "a damaged id file was removed: transaction ids in it are no longer deduplicated \
         (no stored message is affected)"
    );
}

impl DiskIdStore {
    /// Opens (creating it durably) `<data_dir>/ids`, its cached files counted in the node's
    /// budget.
    pub fn open(data_dir: &Path) -> Result<DiskIdStore, StorageError> {
        DiskIdStore::open_with(data_dir, &NODE_OPEN_FILES)
    }

    /// `open` with cached files counted in `budget`.
    pub fn open_with(
        data_dir: &Path,
        budget: &'static OpenFileBudget,
    ) -> Result<DiskIdStore, StorageError> {
        let dir = data_dir.join(IDS_DIR);
        let backend = FileBackend::new(&dir).map_err(|e| StorageError::Io {
            op: "create the id file directory",
            path: dir.clone(),
            source: e,
        })?;
        DiskIdStore::open_on(Arc::new(backend), budget)
    }

    /// `open_with` over any backend of the id directory (tests inject failing I/O).
    pub(crate) fn open_on(
        backend: Arc<dyn IoBackend>,
        budget: &'static OpenFileBudget,
    ) -> Result<DiskIdStore, StorageError> {
        let files = IdFiles::new(backend);
        let mut index: BTreeMap<u64, Vec<IdSource>> = BTreeMap::new();
        let mut next = 0;
        for (b, s) in files.list()? {
            if let IdSource::Segment(n) = s {
                next = next.max(n + 1);
            }
            index.entry(b).or_default().push(s);
        }
        Ok(DiskIdStore {
            files,
            index: Mutex::new(index),
            next: AtomicU64::new(next),
            names: RwLock::new(()),
            open: Mutex::new(HashMap::new()),
            budget,
            uses: AtomicU64::new(0),
            open_bytes: AtomicU64::new(0),
            opens: AtomicU64::new(0),
            block_reads: AtomicU64::new(0),
        })
    }

    /// Opens and block reads done by lookups since the store was opened.
    pub fn lookup_io(&self) -> LookupIo {
        LookupIo {
            opens: self.opens.load(Ordering::Relaxed),
            block_reads: self.block_reads.load(Ordering::Relaxed),
        }
    }

    fn open_files(&self) -> std::sync::MutexGuard<'_, HashMap<(u64, IdSource), Arc<OpenFile>>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn recount_open(&self, open: &HashMap<(u64, IdSource), Arc<OpenFile>>) {
        let bytes: usize = open.values().map(|f| f.bytes()).sum();
        self.open_bytes.store(bytes as u64, Ordering::Relaxed);
    }

    /// Forgets open files that `keep` rejects (merged away, removed, damaged).
    fn close_where(&self, mut drop_it: impl FnMut(u64, IdSource) -> bool) {
        let mut open = self.open_files();
        let before = open.len();
        open.retain(|(b, s), _| !drop_it(*b, *s));
        self.budget.give_back(before - open.len());
        self.recount_open(&open);
    }

    /// Opens an id file; out of descriptors, closes this store's cached files and tries once
    /// more, so a full table costs speed before it costs a lookup or a bucket at start.
    fn open_reader(&self, bucket: u64, source: IdSource) -> Result<IdFileReader, StorageError> {
        match self.files.open(bucket, source) {
            Err(e) if out_of_descriptors(&e) => {
                metrics::counter!("queen_dedup_id_file_descriptors_exhausted_total").increment(1);
                tracing::warn!(
                    bucket,
                    error = %e,
                    cached = self.open_files().len(),
                    node_cached = self.budget.used(),
                    "out of file descriptors opening an id file: this group's cached id \
                     files are closed and the open is tried again (raise the open-files limit)"
                );
                self.close_where(|_, _| true);
                self.files.open(bucket, source)
            }
            r => r,
        }
    }

    /// The open file of (bucket, source), opening it when it is not. With `cache`, it is
    /// kept while the store's bound and the node's budget allow, else in place of this
    /// store's least recently used file; else (or without `cache`) closed once the caller
    /// drops it. Without `cache` a cached file is used but not made more recent: a scan by
    /// time does not push the files the filters name out of the cache (review s33 H1).
    fn opened(
        &self,
        bucket: u64,
        source: IdSource,
        cache: bool,
    ) -> Result<Arc<OpenFile>, StorageError> {
        let now = self.uses.fetch_add(1, Ordering::Relaxed);
        if let Some(f) = self.open_files().get(&(bucket, source)) {
            if cache {
                f.used_at.store(now, Ordering::Relaxed);
            }
            return Ok(f.clone());
        }
        let reader = self.open_reader(bucket, source)?;
        self.opens.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("queen_dedup_id_file_opens_total").increment(1);
        let f = Arc::new(OpenFile {
            fences: Mutex::new(vec![None; reader.data_blocks() as usize]),
            reader,
            used_at: AtomicU64::new(now),
        });
        if !cache {
            return Ok(f);
        }
        let mut open = self.open_files();
        if let Some(other) = open.get(&(bucket, source)) {
            // Another lookup opened it meanwhile.
            return Ok(other.clone());
        }
        let keep = (open.len() < MAX_OPEN_FILES && self.budget.try_take()) || {
            // Its slot is handed over to the new file.
            let lru = open
                .iter()
                .min_by_key(|(_, f)| f.used_at.load(Ordering::Relaxed))
                .map(|(k, _)| *k);
            lru.and_then(|k| open.remove(&k)).is_some()
        };
        if keep {
            open.insert((bucket, source), f.clone());
            self.recount_open(&open);
        }
        Ok(f)
    }

    fn index(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Vec<IdSource>>> {
        self.index.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn sources(&self, bucket: u64) -> Vec<IdSource> {
        self.index().get(&bucket).cloned().unwrap_or_default()
    }

    /// Removes a damaged file from the directory and the index.
    fn drop_damaged(&self, bucket: u64, source: IdSource, e: &StorageError) {
        damaged(bucket, source, e);
        self.close_where(|b, s| b == bucket && s == source);
        if let Err(re) = self.files.remove(bucket, source) {
            tracing::warn!(bucket, error = %re, "a damaged id file could not be removed");
        }
        if let Some(v) = self.index().get_mut(&bucket) {
            v.retain(|s| *s != source);
        }
    }

    /// Moves a file that kept failing to read at start aside (review s27 M1), so the filters
    /// vouch for its bucket again instead of every push with a transaction id to this group
    /// failing closed until the bucket leaves the window. What it costs: its ids are in
    /// neither the filters nor the files, so a repeat of one of them inside the window is
    /// stored as new, as with a CRC-damaged file (counted in the same metric).
    fn quarantine(&self, bucket: u64, source: IdSource, e: &StorageError) -> Result<(), String> {
        {
            let _names = self.names.write().unwrap_or_else(PoisonError::into_inner);
            self.close_where(|b, s| b == bucket && s == source);
            let at = match self.files.quarantine(bucket, source) {
                Ok(at) => Some(at),
                Err(q) => {
                    // The rename may have held with only the directory's fsync failing
                    // (review s33 A2): the index then follows the directory, or every lookup
                    // of the bucket would open a name that is gone and fail closed.
                    self.relist(bucket);
                    if self.sources(bucket).contains(&source) {
                        return Err(q.to_string());
                    }
                    tracing::warn!(bucket, error = %q, "an id file was moved aside but the directory fsync failed: after a crash it may be back under its name, and is moved aside again at that start");
                    None
                }
            };
            if let Some(v) = self.index().get_mut(&bucket) {
                v.retain(|s| *s != source);
            }
            metrics::counter!("queen_dedup_id_files_damaged_total").increment(1);
            tracing::error!(
                bucket,
                source = ?source,
                error = %e,
                moved_to = ?at,
                "an id file could not be read at start and was moved aside: a repeat of one of \
                 its transaction ids inside the dedup window may be stored as a new message \
                 (replace the disk if this repeats)"
            );
        }
        Ok(())
    }

    /// `IdStore::find`, the files it opens kept in the cache or not (`opened`).
    fn search(
        &self,
        bucket: u64,
        key: u64,
        accept: &mut dyn FnMut(u64) -> bool,
        cache: bool,
    ) -> Result<Option<u64>, String> {
        let _names = self.names.read().unwrap_or_else(PoisonError::into_inner);
        for s in self.sources(bucket).into_iter().rev() {
            let found = self.opened(bucket, s, cache).and_then(|f| {
                let mut fences = f.fences.lock().unwrap_or_else(PoisonError::into_inner);
                let mut reads = 0;
                let r = f
                    .reader
                    .find_fenced(key, &mut fences, &mut reads, &mut *accept);
                self.block_reads.fetch_add(reads, Ordering::Relaxed);
                metrics::counter!("queen_dedup_id_file_reads_total").increment(reads);
                r
            });
            match found {
                Ok(Some(off)) => return Ok(Some(off)),
                Ok(None) => {}
                Err(e @ StorageError::CorruptIdFile { .. }) => self.drop_damaged(bucket, s, &e),
                Err(e) => return Err(e.to_string()),
            }
        }
        Ok(None)
    }

    /// Rereads the bucket's files from the directory (after a merge changed them).
    fn relist(&self, bucket: u64) {
        let Ok(all) = self.files.list() else {
            return;
        };
        let now: Vec<IdSource> = all
            .into_iter()
            .filter(|(b, _)| *b == bucket)
            .map(|(_, s)| s)
            .collect();
        let mut index = self.index();
        if now.is_empty() {
            index.remove(&bucket);
        } else {
            index.insert(bucket, now);
        }
    }
}

impl IdStore for DiskIdStore {
    fn write(&self, bucket: u64, pairs: &mut [(u64, u64)]) -> Result<(), String> {
        // One writer (the spill's thread, or the open before it starts): no race on `next`.
        let source = self.next.load(Ordering::Relaxed);
        self.files
            .write_segment(bucket, source, pairs)
            .map_err(|e| e.to_string())?;
        self.next.store(source + 1, Ordering::Relaxed);
        self.index()
            .entry(bucket)
            .or_default()
            .push(IdSource::Segment(source));
        Ok(())
    }

    fn buckets(&self) -> Vec<u64> {
        self.index().keys().copied().collect()
    }

    fn keys(&self, bucket: u64, each: &mut dyn FnMut(u64)) -> Result<(), String> {
        let mut unread = Ok(());
        for s in self.sources(bucket) {
            let mut pauses = READ_RETRY_PAUSES_MS.iter();
            let read = loop {
                let read = self.open_reader(bucket, s).and_then(|r| {
                    // The whole file is checked before any key is given: a damaged file adds
                    // nothing, not half of itself. (A read failing after the check may give
                    // some keys twice with the retry: the filters' bits are the same.)
                    r.verify()?;
                    let mut c = r.cursor();
                    while let Some((k, _)) = c.next_pair()? {
                        each(k);
                    }
                    Ok(())
                });
                match (&read, pauses.next()) {
                    (Err(e), Some(ms)) if !matches!(e, StorageError::CorruptIdFile { .. }) => {
                        tracing::info!(bucket, source = ?s, error = %e, "an id file could not be read at start; trying again");
                        std::thread::sleep(std::time::Duration::from_millis(*ms));
                    }
                    _ => break read,
                }
            };
            match read {
                Ok(()) => {}
                Err(e @ StorageError::CorruptIdFile { .. }) => self.drop_damaged(bucket, s, &e),
                // Out of descriptors is the process's state, not the file's: kept, and its
                // bucket searched by every lookup (failing closed while it lasts), rather than
                // a healthy file given up.
                Err(e) if out_of_descriptors(&e) => unread = Err(format!("{s:?}: {e}")),
                Err(e) => {
                    if let Err(q) = self.quarantine(bucket, s, &e) {
                        // Still under its name: its bucket is searched by every lookup, which
                        // fails closed while the file stays unreadable (the state before M1).
                        unread = Err(format!("{s:?}: {e}; not quarantined: {q}"));
                    }
                }
            }
        }
        unread
    }

    fn find(
        &self,
        bucket: u64,
        key: u64,
        accept: &mut dyn FnMut(u64) -> bool,
    ) -> Result<Option<u64>, String> {
        self.search(bucket, key, accept, true)
    }

    fn find_uncached(
        &self,
        bucket: u64,
        key: u64,
        accept: &mut dyn FnMut(u64) -> bool,
    ) -> Result<Option<u64>, String> {
        self.search(bucket, key, accept, false)
    }

    fn merge(&self, bucket: u64) {
        if self.sources(bucket).len() < 2 {
            return;
        }
        let swap = &mut |out: IdSource, inputs: &[IdSource]| {
            let _names = self.names.write().unwrap_or_else(PoisonError::into_inner);
            let mut index = self.index();
            let v = index.entry(bucket).or_default();
            v.retain(|s| !inputs.contains(s));
            v.push(out);
            v.sort_unstable();
            self.close_where(|b, s| b == bucket && inputs.contains(&s));
        };
        if let Err(e) = self.files.merge_generation_then(bucket, swap) {
            // Merging is only for speed; a damaged input is found and dropped here, the
            // rest merged at the next close or start.
            tracing::warn!(bucket, error = %e, "id files of a bucket could not be merged");
            for s in self.sources(bucket) {
                if let Err(e @ StorageError::CorruptIdFile { .. }) =
                    self.files.open(bucket, s).and_then(|r| r.verify())
                {
                    self.drop_damaged(bucket, s, &e);
                }
            }
        }
        self.relist(bucket);
    }

    fn remove_before(&self, bucket: u64) {
        {
            let _names = self.names.write().unwrap_or_else(PoisonError::into_inner);
            self.index().retain(|b, _| *b >= bucket);
            self.close_where(|b, _| b < bucket);
        }
        if let Err(e) = self.files.remove_before(bucket) {
            // Left on disk, out of the index: listed again (and removed) at the next start.
            tracing::warn!(error = %e, "id files out of the window could not be removed");
        }
    }

    fn save_filter(&self, f: &SavedFilter) -> Result<(), String> {
        let file = FilterFile {
            epoch: f.name.epoch,
            number: f.name.number,
            prev_epoch: f.prev.map_or(NO_PREV_FILTER, |p| p.0),
            prev_number: f.prev.map_or(NO_PREV_FILTER, |p| p.1),
            first_bucket: f.name.first_bucket,
            last_bucket: f.name.last_bucket,
            opened_us: f.opened_us,
            last_us: f.last_us,
            keys: f.keys,
            tag_us: f.tag_us,
            k: f.k,
            words: f.blocks.iter().flatten().copied().collect(),
        };
        self.files.save_filter(&file).map_err(|e| e.to_string())
    }

    fn filters(&self) -> Vec<FilterFileName> {
        match self.files.list_filters() {
            Ok(v) => v
                .into_iter()
                .map(|n| FilterFileName {
                    first_bucket: n.first_bucket,
                    last_bucket: n.last_bucket,
                    epoch: n.epoch,
                    number: n.number,
                })
                .collect(),
            Err(e) => {
                tracing::warn!(error = %e, "dedup filter files could not be listed; the id files are read instead");
                Vec::new()
            }
        }
    }

    fn load_filter(&self, name: FilterFileName) -> Result<SavedFilter, String> {
        let n = FilterName {
            first_bucket: name.first_bucket,
            last_bucket: name.last_bucket,
            epoch: name.epoch,
            number: name.number,
        };
        let f = match self.files.load_filter(n) {
            Ok(f) => f,
            Err(e @ StorageError::CorruptIdFile { .. }) => {
                // Never trusted: removed, and its buckets read from the id files.
                metrics::counter!("queen_dedup_id_files_damaged_total").increment(1);
                tracing::warn!(error = %e, "a damaged dedup filter file was removed; its buckets are read from the id files");
                if let Err(re) = self.files.remove_filter(n) {
                    tracing::warn!(error = %re, "a damaged dedup filter file could not be removed");
                }
                return Err(e.to_string());
            }
            Err(e) => return Err(e.to_string()),
        };
        let prev = (f.prev_epoch != NO_PREV_FILTER || f.prev_number != NO_PREV_FILTER)
            .then_some((f.prev_epoch, f.prev_number));
        let blocks: Vec<Block> = f
            .words
            .chunks_exact(8)
            .map(|c| {
                let mut b = [0u64; 8];
                b.copy_from_slice(c);
                b
            })
            .collect();
        Ok(SavedFilter {
            name,
            prev,
            opened_us: f.opened_us,
            last_us: f.last_us,
            keys: f.keys,
            tag_us: f.tag_us,
            k: f.k,
            blocks,
        })
    }

    fn cache_bytes(&self) -> usize {
        self.open_bytes.load(Ordering::Relaxed) as usize
    }
}

impl Drop for DiskIdStore {
    fn drop(&mut self) {
        self.close_where(|_, _| true);
    }
}

#[cfg(test)]
#[path = "id_store_tests.rs"]
mod tests;

#[cfg(test)]
use tests as tests_support;

#[cfg(test)]
#[path = "id_store_unreadable_tests.rs"]
mod unreadable_tests;

#[cfg(test)]
#[path = "id_store_snapshot_tests.rs"]
mod snapshot_tests;

#[cfg(test)]
#[path = "id_store_scan_tests.rs"]
mod scan_tests;
