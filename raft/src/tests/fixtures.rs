//! Shared pieces of this crate's tests: a recording ApplyHandler and on-disk stores.

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use queenmq_storage::{IoBackend, LogOptions, MemBackend, SegmentFile};

use crate::backend::{SegmentLog, StateStore};
use crate::ApplyHandler;

/// Records every applied entry; its checkpoint is fixed at construction.
pub struct Recorder {
    checkpoint: Option<(u64, u64)>,
    applied: Mutex<Vec<(u64, u64, Vec<u8>)>>,
    /// How often `snapshot` (a full engine encode) was asked for.
    pub snapshots: AtomicU64,
}

impl Recorder {
    pub fn new(checkpoint: Option<(u64, u64)>) -> Arc<Recorder> {
        Arc::new(Recorder {
            checkpoint,
            applied: Mutex::new(Vec::new()),
            snapshots: AtomicU64::new(0),
        })
    }

    pub fn applied(&self) -> Vec<(u64, u64, Vec<u8>)> {
        self.applied.lock().unwrap().clone()
    }
}

impl ApplyHandler for Recorder {
    fn apply(&self, index: u64, term: u64, payload: &[u8]) -> Result<(), String> {
        self.applied
            .lock()
            .unwrap()
            .push((index, term, payload.to_vec()));
        Ok(())
    }

    fn checkpointed(&self) -> Option<(u64, u64)> {
        self.checkpoint
    }

    fn snapshot(&self) -> (Option<(u64, u64)>, Vec<u8>) {
        self.snapshots.fetch_add(1, Ordering::SeqCst);
        let applied = self.applied.lock().unwrap();
        let last = applied.last().map(|(i, t, _)| (*i, *t)).or(self.checkpoint);
        (last, applied.len().to_le_bytes().to_vec())
    }

    fn restore(&self, _index: u64, _term: u64, _bytes: &[u8]) -> Result<(), String> {
        self.applied.lock().unwrap().clear();
        Ok(())
    }
}

/// A single-voter node on a fresh log and store, its handler recording without a checkpoint.
pub async fn start_fresh(log: &Arc<SegmentLog>, store: &Arc<StateStore>) -> crate::RaftNode {
    crate::RaftNode::start_single(
        crate::RaftConfig::default(),
        log.clone(),
        store.clone(),
        Recorder::new(None),
    )
    .await
    .unwrap()
}

/// Proposes 120 application entries of ~200 bytes: several 4 KiB segments
/// (`open_small_segments`), so a reclamation has sealed ones to delete.
pub async fn fill(node: &crate::RaftNode, log: &SegmentLog) {
    for i in 0..120u32 {
        let payload = format!("message {i} {}", "y".repeat(200)).into_bytes();
        node.propose(payload).await.unwrap();
    }
    assert!(log.segment_count() > 4, "{}", log.segment_count());
}

/// `reclaim_upto` from a blocking thread, as the engine calls it.
pub async fn reclaim(node: &crate::RaftNode, upto: u64) -> usize {
    let n = node.clone();
    tokio::task::spawn_blocking(move || n.reclaim_upto(upto))
        .await
        .unwrap()
        .unwrap()
}

/// A single-voter start on existing stores with the given handler.
pub async fn restart_with(
    log: &Arc<SegmentLog>,
    store: &Arc<StateStore>,
    handler: Arc<Recorder>,
) -> crate::RaftNode {
    crate::RaftNode::start_single(
        crate::RaftConfig::default(),
        log.clone(),
        store.clone(),
        handler,
    )
    .await
    .unwrap()
}

/// Opens the segment log and state store under `dir`, as the broker lays them out.
pub fn open_stores(dir: &Path) -> (Arc<SegmentLog>, Arc<StateStore>) {
    let log_dir = dir.join("log");
    std::fs::create_dir_all(&log_dir).unwrap();
    let (log, _report) = SegmentLog::open(&log_dir, LogOptions::default()).unwrap();
    let store = StateStore::open(&dir.join("state.redb")).unwrap();
    (Arc::new(log), Arc::new(store))
}

/// Opens the log with 4 KiB segments (so a few hundred small entries span several) and the
/// state store under `dir`.
pub fn open_small_segments(dir: &Path) -> (Arc<SegmentLog>, Arc<StateStore>) {
    let opts = LogOptions {
        segment_bytes: 4096,
        ..LogOptions::default()
    };
    let (log, _) = SegmentLog::open(&dir.join("log"), opts).unwrap();
    let store = StateStore::open(&dir.join("state.redb")).unwrap();
    (Arc::new(log), Arc::new(store))
}

/// Opens the segment log on an injected backend (crash images, failing fsyncs) and the state
/// store under `dir`.
pub fn open_on(dir: &Path, backend: Arc<dyn IoBackend>) -> (Arc<SegmentLog>, Arc<StateStore>) {
    let (log, _report) = SegmentLog::open_with_backend(backend, LogOptions::default()).unwrap();
    let store = StateStore::open(&dir.join("state.redb")).unwrap();
    (Arc::new(log), Arc::new(store))
}

/// A MemBackend that counts fdatasync calls and makes each take `sync_delay`, like a disk,
/// to see group commit at work; while `hold` is set every fdatasync waits, like a hung disk.
pub struct CountingBackend {
    pub inner: MemBackend,
    pub syncs: Arc<AtomicU64>,
    pub sync_delay: Duration,
    pub hold: Arc<AtomicBool>,
}

struct CountingFile {
    inner: Arc<dyn SegmentFile>,
    syncs: Arc<AtomicU64>,
    sync_delay: Duration,
    hold: Arc<AtomicBool>,
}

impl CountingBackend {
    fn wrap(&self, inner: Arc<dyn SegmentFile>) -> Arc<dyn SegmentFile> {
        Arc::new(CountingFile {
            inner,
            syncs: self.syncs.clone(),
            sync_delay: self.sync_delay,
            hold: self.hold.clone(),
        })
    }
}

impl IoBackend for CountingBackend {
    fn list(&self) -> io::Result<Vec<String>> {
        self.inner.list()
    }
    fn create(&self, name: &str) -> io::Result<Arc<dyn SegmentFile>> {
        Ok(self.wrap(self.inner.create(name)?))
    }
    fn open(&self, name: &str) -> io::Result<Arc<dyn SegmentFile>> {
        Ok(self.wrap(self.inner.open(name)?))
    }
    fn remove(&self, name: &str) -> io::Result<()> {
        self.inner.remove(name)
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        self.inner.rename(from, to)
    }
    fn sync_dir(&self) -> io::Result<()> {
        self.inner.sync_dir()
    }
}

impl SegmentFile for CountingFile {
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.inner.write_at(offset, data)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.syncs.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(self.sync_delay);
        while self.hold.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(5));
        }
        self.inner.sync_data()
    }
}

/// A fresh single voter on small segments under `dir`, filled (`fill`).
pub async fn filled_node(dir: &Path) -> (Arc<SegmentLog>, Arc<StateStore>, crate::RaftNode) {
    let (log, store) = open_small_segments(dir);
    let node = start_fresh(&log, &store).await;
    fill(&node, &log).await;
    (log, store, node)
}

/// `filled_node`, shut down again: the stores of a filled log with no node on them.
pub async fn filled_then_stopped(dir: &Path) -> (Arc<SegmentLog>, Arc<StateStore>) {
    let (log, store, node) = filled_node(dir).await;
    node.shutdown().await.unwrap();
    drop(node);
    (log, store)
}
