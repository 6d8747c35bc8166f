//! The redb state store: small durable metadata (Raft vote, membership, node identity) and the
//! engine's checkpoint. Message payloads never go here; they live in the segment log.

pub(crate) mod checkpoint;
mod sink;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_crash;

use std::path::Path;

use redb::{Database, ReadableDatabase, TableDefinition};

use crate::StorageError;
pub use checkpoint::Checkpoint;
use checkpoint::CheckpointHead;
/// Rows of a checkpoint in the store: a streamed save holds one in memory.
pub use checkpoint::WRITE_CHUNK_BYTES as CHECKPOINT_CHUNK_BYTES;
pub use sink::StateSink;

const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
/// One row, key `HEAD_KEY`: the checkpoint's header (see `CheckpointHead`).
const CHECKPOINT_HEAD: TableDefinition<&str, &[u8]> = TableDefinition::new("checkpoint_head");
/// The checkpoint state in rows of `WRITE_CHUNK_BYTES` (older checkpoints: up to `CHUNK_BYTES`),
/// keys 0.., so no redb value is huge.
const CHECKPOINT_CHUNKS: TableDefinition<u32, &[u8]> = TableDefinition::new("checkpoint_chunks");
const HEAD_KEY: &str = "current";
/// redb's page cache. Its default (1 GiB) filled with the pages of each checkpoint written
/// (issue 15: a broker's RSS grew by the checkpoint size every interval); the checkpoint is
/// written once and read only at start-up, and the metadata rows are tiny.
/// It is also what a save may hold beyond its chunk (reads and the write buffer together).
pub const STATE_CACHE_BYTES: usize = 16 << 20;
/// The least page cache a store is given (`open_with_cache`): the metadata rows and a few
/// pages of a checkpoint chunk.
pub const STATE_MIN_CACHE_BYTES: usize = 256 << 10;

/// Send + Sync; every write is one redb transaction committed with `Durability::Immediate`
/// (redb's default), so it is fsynced before the call returns.
pub struct StateStore {
    db: Database,
}

impl StateStore {
    /// Opens or creates the database file at `path` (its directory must exist). The directory
    /// is fsynced afterwards, so a newly created file's name is durable before anything is
    /// stored in it.
    pub fn open(path: &Path) -> Result<StateStore, StorageError> {
        StateStore::open_with_cache(path, STATE_CACHE_BYTES)
    }

    /// [`Self::open`] with a page cache of `cache_bytes` (at least [`STATE_MIN_CACHE_BYTES`]): a node
    /// with many groups gives each a slice of its memory budget rather than 16 MiB apiece.
    pub fn open_with_cache(path: &Path, cache_bytes: usize) -> Result<StateStore, StorageError> {
        let db = Database::builder()
            .set_cache_size(cache_bytes.max(STATE_MIN_CACHE_BYTES))
            .create(path)
            .map_err(StorageError::state("open the state store"))?;
        crate::sync_parent(path).map_err(StorageError::io("sync the directory of", path))?;
        StateStore::checked(db, path)
    }

    /// `open` on a file of an in-memory backend, so crash tests can open its images.
    #[cfg(test)]
    pub(crate) fn open_in(dir: &crate::MemBackend, name: &str) -> Result<StateStore, StorageError> {
        use crate::IoBackend;
        let path = dir.locate(name);
        let file = match dir.open(name) {
            Ok(f) => f,
            Err(_) => dir
                .create(name)
                .map_err(StorageError::io("create", &path))?,
        };
        let db = Database::builder()
            .set_cache_size(STATE_CACHE_BYTES)
            .create_with_backend(crate::backend::RedbOnFile::new(file))
            .map_err(StorageError::state("open the state store"))?;
        dir.sync_dir()
            .map_err(StorageError::io("sync the directory of", &path))?;
        StateStore::checked(db, &path)
    }

    /// What every open does once the file is open and its name durable.
    fn checked(mut db: Database, path: &Path) -> Result<StateStore, StorageError> {
        // A damaged page otherwise surfaces later as a panic inside redb's cursor (seen with a
        // flipped byte); its own check verifies every page checksum once, up front.
        match db.check_integrity() {
            Ok(true) => {}
            Ok(false) => tracing::warn!(
                path = %path.display(),
                "the state store failed redb's integrity check; redb repaired it by going back \
                 to its last consistent commit"
            ),
            Err(e) => return Err(StorageError::state("check the state store's integrity")(e)),
        }
        let store = StateStore { db };
        // Creating the tables up front lets readers open them without a missing-table case.
        store.write("create tables", |txn| {
            txn.open_table(META)?;
            txn.open_table(CHECKPOINT_HEAD)?;
            txn.open_table(CHECKPOINT_CHUNKS)?;
            Ok(())
        })?;
        Ok(store)
    }

    /// Durable on return.
    pub fn put_meta(&self, key: &str, value: &[u8]) -> Result<(), StorageError> {
        self.write("write metadata", |txn| {
            txn.open_table(META)?.insert(key, value)?;
            Ok(())
        })
    }

    pub fn get_meta(&self, key: &str) -> Result<Option<Vec<u8>>, StorageError> {
        let err = StorageError::state("read metadata");
        let txn = self.db.begin_read().map_err(err)?;
        let table = txn
            .open_table(META)
            .map_err(StorageError::state("read metadata"))?;
        let value = table
            .get(key)
            .map_err(StorageError::state("read metadata"))?;
        Ok(value.map(|v| v.value().to_vec()))
    }

    /// Replaces the previous checkpoint in one durable transaction: a crash leaves either the
    /// old checkpoint or the new one, never a mix.
    pub fn save_checkpoint(&self, cp: &Checkpoint) -> Result<(), StorageError> {
        CheckpointHead::describe(cp)?;
        self.save_checkpoint_streamed(cp.applied_index, cp.applied_term, |sink| {
            sink.write(&cp.state)
        })
    }

    /// [`Self::save_checkpoint`] for a state that `fill` hands to the sink piece by piece, so
    /// it is never held whole: memory is one chunk plus what `fill` holds.
    pub fn save_checkpoint_streamed(
        &self,
        applied_index: u64,
        applied_term: u64,
        fill: impl FnOnce(&mut StateSink<'_>),
    ) -> Result<(), StorageError> {
        self.write("save the checkpoint", |txn| {
            let mut chunks = txn.open_table(CHECKPOINT_CHUNKS)?;
            chunks.retain(|_, _| false)?;
            let mut sink = StateSink::new(chunks);
            fill(&mut sink);
            let head = sink.finish(applied_index, applied_term)?.encode();
            txn.open_table(CHECKPOINT_HEAD)?
                .insert(HEAD_KEY, head.as_slice())?;
            Ok(())
        })
    }

    /// The last saved checkpoint, verified against its length and CRC32C.
    pub fn load_checkpoint(&self) -> Result<Option<Checkpoint>, StorageError> {
        let op = "load the checkpoint";
        let txn = self.db.begin_read().map_err(StorageError::state(op))?;
        let heads = txn
            .open_table(CHECKPOINT_HEAD)
            .map_err(StorageError::state(op))?;
        let Some(raw) = heads.get(HEAD_KEY).map_err(StorageError::state(op))? else {
            return Ok(None);
        };
        let head = CheckpointHead::decode(raw.value())?;
        let chunks = txn
            .open_table(CHECKPOINT_CHUNKS)
            .map_err(StorageError::state(op))?;
        let mut state = Vec::with_capacity(head.checked_capacity()?);
        for i in 0..head.chunk_count {
            let chunk = chunks
                .get(i)
                .map_err(StorageError::state(op))?
                .ok_or_else(|| StorageError::CorruptCheckpoint {
                    reason: format!("chunk {i} of {} is missing", head.chunk_count),
                })?;
            state.extend_from_slice(chunk.value());
        }
        head.verify(&state)?;
        Ok(Some(Checkpoint {
            applied_index: head.applied_index,
            applied_term: head.applied_term,
            state,
        }))
    }

    fn write(
        &self,
        op: &'static str,
        body: impl FnOnce(&redb::WriteTransaction) -> Result<(), redb::Error>,
    ) -> Result<(), StorageError> {
        let txn = self.db.begin_write().map_err(StorageError::state(op))?;
        body(&txn).map_err(StorageError::state(op))?;
        txn.commit().map_err(StorageError::state(op))
    }
}
