//! TEMPORARY stand-in for `queenmq-storage` while that crate is being written: the exact
//! signatures of `SegmentLog` and `StateStore`, kept in memory. "Disk" is a process-wide map
//! keyed by directory, so reopening the same path in one test process sees what was written,
//! as a restart would. Delete this file once storage/ lands and point `backend` at it.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("append refused: expected index {expected}, got {got}")]
    NonContiguous { expected: u64, got: u64 },
    #[error("the stand-in store lock was poisoned")]
    Poisoned,
}

#[derive(Debug, Clone, Copy)]
pub struct LogOptions {
    pub segment_bytes: u64,
    pub max_record_bytes: u32,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            segment_bytes: 64 * 1024 * 1024,
            max_record_bytes: 256 * 1024 * 1024,
        }
    }
}

#[derive(Debug, Default)]
pub struct RecoveryReport;

type Records = BTreeMap<u64, (u64, Vec<u8>)>;
type Disk<T> = OnceLock<Mutex<HashMap<PathBuf, Arc<Mutex<T>>>>>;

fn disk<T: Default>(map: &'static Disk<T>, path: &Path) -> Arc<Mutex<T>> {
    let map = map.get_or_init(Default::default);
    let mut guard = map.lock().unwrap_or_else(|p| p.into_inner());
    guard.entry(path.to_path_buf()).or_default().clone()
}

fn lock<T>(m: &Mutex<T>) -> Result<MutexGuard<'_, T>, StorageError> {
    m.lock().map_err(|_| StorageError::Poisoned)
}

static LOGS: Disk<Records> = OnceLock::new();
static STATES: Disk<HashMap<String, Vec<u8>>> = OnceLock::new();

pub struct SegmentLog {
    records: Arc<Mutex<Records>>,
}

impl SegmentLog {
    pub fn open(
        dir: &Path,
        _opts: LogOptions,
    ) -> Result<(SegmentLog, RecoveryReport), StorageError> {
        Ok((
            SegmentLog {
                records: disk(&LOGS, dir),
            },
            RecoveryReport,
        ))
    }

    pub fn first_index(&self) -> Option<u64> {
        lock(&self.records).ok()?.keys().next().copied()
    }

    pub fn last(&self) -> Option<(u64, u64)> {
        lock(&self.records)
            .ok()?
            .iter()
            .next_back()
            .map(|(i, (t, _))| (*i, *t))
    }

    pub fn append(&self, index: u64, term: u64, payload: &[u8]) -> Result<(), StorageError> {
        self.append_batch(&[(index, term, payload)])
    }

    pub fn append_batch(&self, records: &[(u64, u64, &[u8])]) -> Result<(), StorageError> {
        let mut r = lock(&self.records)?;
        for (index, term, payload) in records {
            if let Some((&last, _)) = r.iter().next_back() {
                if *index != last + 1 {
                    return Err(StorageError::NonContiguous {
                        expected: last + 1,
                        got: *index,
                    });
                }
            }
            r.insert(*index, (*term, payload.to_vec()));
        }
        Ok(())
    }

    pub fn sync(&self) -> Result<(), StorageError> {
        Ok(())
    }

    pub fn read(&self, index: u64) -> Result<Option<(u64, Vec<u8>)>, StorageError> {
        Ok(lock(&self.records)?.get(&index).cloned())
    }

    pub fn term_of(&self, index: u64) -> Option<u64> {
        lock(&self.records).ok()?.get(&index).map(|(t, _)| *t)
    }

    pub fn truncate_from(&self, index: u64) -> Result<(), StorageError> {
        lock(&self.records)?.split_off(&index);
        Ok(())
    }

    pub fn purge_upto(&self, index: u64) -> Result<(), StorageError> {
        let mut r = lock(&self.records)?;
        let keep = r.split_off(&(index + 1));
        *r = keep;
        Ok(())
    }
}

pub struct Checkpoint {
    pub applied_index: u64,
    pub applied_term: u64,
    pub state: Vec<u8>,
}

pub struct StateStore {
    meta: Arc<Mutex<HashMap<String, Vec<u8>>>>,
}

impl StateStore {
    pub fn open(path: &Path) -> Result<StateStore, StorageError> {
        Ok(StateStore {
            meta: disk(&STATES, path),
        })
    }

    pub fn put_meta(&self, key: &str, value: &[u8]) -> Result<(), StorageError> {
        lock(&self.meta)?.insert(key.to_string(), value.to_vec());
        Ok(())
    }

    pub fn get_meta(&self, key: &str) -> Result<Option<Vec<u8>>, StorageError> {
        Ok(lock(&self.meta)?.get(key).cloned())
    }
}
