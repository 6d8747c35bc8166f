//! Review s27 M1: an id file that cannot be read at start (an I/O error, not a failed check).

use std::collections::HashMap;
use std::path::PathBuf;

use queenmq_engine::state::{bucket_of, TxnIds, TxnSpill};
use queenmq_storage::SegmentFile;

use super::tests_support::{fill, filter, find, spill_at, KEEP, SEC};
use super::*;

static BUDGET: OpenFileBudget = OpenFileBudget::new(64);

/// Reads of a file kept failing for good (a dead sector).
const FOR_GOOD: usize = usize::MAX;

/// The real directory, whose `open` of chosen names fails with EIO a set number of times
/// (`FOR_GOOD`: always), and whose renames fail with EIO when `renames_fail`.
struct Flaky {
    inner: FileBackend,
    fail: Mutex<HashMap<String, usize>>,
    renames_fail: bool,
    /// Set: the directory fsync after a rename that held fails.
    syncs_fail_after_rename: bool,
    renamed: std::sync::atomic::AtomicBool,
}

impl Flaky {
    fn over(dir: &Path, name: &str, times: usize, renames_fail: bool) -> Flaky {
        Flaky {
            inner: FileBackend::new(&dir.join(IDS_DIR)).unwrap(),
            fail: Mutex::new(HashMap::from([(name.to_owned(), times)])),
            renames_fail,
            syncs_fail_after_rename: false,
            renamed: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

impl IoBackend for Flaky {
    fn list(&self) -> std::io::Result<Vec<String>> {
        self.inner.list()
    }
    fn create(&self, name: &str) -> std::io::Result<Arc<dyn SegmentFile>> {
        self.inner.create(name)
    }
    fn open(&self, name: &str) -> std::io::Result<Arc<dyn SegmentFile>> {
        let mut fail = self.fail.lock().unwrap();
        if let Some(n) = fail.get_mut(name).filter(|n| **n > 0) {
            if *n != FOR_GOOD {
                *n -= 1;
            }
            return Err(std::io::Error::from_raw_os_error(5));
        }
        drop(fail);
        self.inner.open(name)
    }
    fn remove(&self, name: &str) -> std::io::Result<()> {
        self.inner.remove(name)
    }
    fn rename(&self, from: &str, to: &str) -> std::io::Result<()> {
        if self.renames_fail {
            return Err(std::io::Error::from_raw_os_error(5));
        }
        self.inner.rename(from, to)?;
        self.renamed.store(true, Ordering::SeqCst);
        Ok(())
    }
    fn sync_dir(&self) -> std::io::Result<()> {
        if self.syncs_fail_after_rename && self.renamed.swap(false, Ordering::SeqCst) {
            return Err(std::io::Error::from_raw_os_error(5));
        }
        self.inner.sync_dir()
    }
    fn locate(&self, name: &str) -> PathBuf {
        self.inner.locate(name)
    }
}

/// The file name of `path`.
fn name_of(path: &Path) -> String {
    path.file_name().unwrap().to_string_lossy().into_owned()
}

/// The id files of `dir`, oldest bucket first.
fn id_files(dir: &Path) -> Vec<PathBuf> {
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir.join(IDS_DIR))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "qidx"))
        .collect();
    names.sort();
    names
}

/// Ids 0..200 spilled (one a second from 10 s), the spill dropped.
fn spilled(dir: &Path) -> (TxnIds, Vec<u64>) {
    let mut spill = spill_at(dir, 16);
    let ids = fill(&mut spill, 200);
    drop(spill);
    let cold = (0..200).filter(|h| ids.get(1, *h).is_none()).collect();
    (ids, cold)
}

#[test]
fn a_file_unreadable_at_start_is_quarantined_and_the_window_vouched_for_again() {
    let dir = tempfile::tempdir().unwrap();
    let (_, cold) = spilled(dir.path());
    // Every open of the oldest file fails with EIO (a dead sector).
    let victim = id_files(dir.path())[0].clone();
    let backend = Flaky::over(dir.path(), &name_of(&victim), FOR_GOOD, false);
    let store = DiskIdStore::open_on(Arc::new(backend), &BUDGET).unwrap();
    let victim_bucket = store.buckets()[0];
    let again = TxnSpill::open(Box::new(store), 16, filter(), KEEP, 300 * SEC);
    assert!(!victim.exists(), "moved aside at start");
    let aside = PathBuf::from(format!("{}.quarantined", victim.display()));
    assert!(aside.exists(), "kept for inspection at {aside:?}");
    // New ids are answered: before, every one of them searched the unreadable bucket and
    // failed closed (a 503) until it left the window.
    for h in 1_000_000..1_000_200 {
        assert_eq!(find(&again, h), None, "new id {h}");
    }
    // Ids of the other buckets are still found; the quarantined file's are the price.
    for &h in &cold {
        let b = bucket_of(10 * SEC + h as i64 * SEC);
        let got = find(&again, h);
        if b == victim_bucket {
            assert_eq!(got, None, "id {h} of the quarantined file");
        } else {
            assert_eq!(got, Some(h), "id {h}");
        }
    }
    // Left with its bucket, not kept for good.
    drop(again);
    let store = DiskIdStore::open_with(dir.path(), &BUDGET).unwrap();
    store.remove_before(victim_bucket + 1);
    assert!(!aside.exists());
}

#[test]
fn a_file_that_fails_to_read_once_at_start_is_read_again_not_given_up() {
    let dir = tempfile::tempdir().unwrap();
    let (_, cold) = spilled(dir.path());
    let victim = id_files(dir.path())[0].clone();
    let backend = Flaky::over(dir.path(), &name_of(&victim), 2, false);
    let store = DiskIdStore::open_on(Arc::new(backend), &BUDGET).unwrap();
    let again = TxnSpill::open(Box::new(store), 16, filter(), KEEP, 300 * SEC);
    assert!(victim.exists(), "a transient error does not cost the file");
    for &h in &cold {
        assert_eq!(find(&again, h), Some(h), "id {h}");
    }
    for h in 1_000_000..1_000_200 {
        assert_eq!(find(&again, h), None, "new id {h}");
    }
}

#[test]
fn a_file_that_cannot_be_moved_aside_still_fails_closed() {
    // Quarantine needs a rename; where even that fails, the file keeps its name and its
    // bucket is searched by every lookup: refused (a retry), never answered as new.
    let dir = tempfile::tempdir().unwrap();
    spilled(dir.path());
    let victim = id_files(dir.path())[0].clone();
    let backend = Flaky::over(dir.path(), &name_of(&victim), FOR_GOOD, true);
    let store = DiskIdStore::open_on(Arc::new(backend), &BUDGET).unwrap();
    let again = TxnSpill::open(Box::new(store), 16, filter(), KEEP, 300 * SEC);
    assert!(victim.exists());
    assert!(again
        .find(
            1,
            1_000_000,
            300 * SEC,
            KEEP,
            &mut { usize::MAX },
            &mut |_| false
        )
        .is_err());
}

#[test]
fn a_file_moved_aside_whose_directory_fsync_failed_is_out_of_the_index() {
    // Review s33 A2: the rename held, only the fsync after it failed; the bucket must not
    // keep naming a file that is gone (every lookup would fail closed for the window).
    let dir = tempfile::tempdir().unwrap();
    spilled(dir.path());
    let victim = id_files(dir.path())[0].clone();
    let mut backend = Flaky::over(dir.path(), &name_of(&victim), FOR_GOOD, false);
    backend.syncs_fail_after_rename = true;
    let store = DiskIdStore::open_on(Arc::new(backend), &BUDGET).unwrap();
    let again = TxnSpill::open(Box::new(store), 16, filter(), KEEP, 300 * SEC);
    assert!(!victim.exists(), "moved aside");
    for h in 1_000_000..1_000_200 {
        assert_eq!(find(&again, h), None, "new id {h}");
    }
}
