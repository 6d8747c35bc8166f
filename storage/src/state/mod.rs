//! The redb state store: small durable metadata (Raft vote, membership, node identity) and the
//! engine's checkpoint. Message payloads never go here; they live in the segment log.

pub(crate) mod checkpoint;
pub(crate) mod floor_row;
pub(crate) mod generations;
mod install;
pub(crate) mod membership_row;
mod sink;
mod slot_pins;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_crash;
mod view;

use std::path::Path;

use std::sync::Mutex;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use crate::StorageError;
pub use checkpoint::Checkpoint;
use checkpoint::CheckpointHead;
/// Rows of a checkpoint in the store: a streamed save holds one in memory.
pub use checkpoint::WRITE_CHUNK_BYTES as CHECKPOINT_CHUNK_BYTES;
use floor_row::{FloorRow, CHECKPOINT_FLOOR};
use generations::{newest_first, read_head, read_slot, slot_to_overwrite, SLOTS};
pub use generations::{Generation, GenerationHead};
pub use install::{FillState, Installing, INSTALLING_KEY};
pub use membership_row::MEMBERSHIP_KEY;
use membership_row::{CHECKPOINT_MEMBERSHIP, MEMBERSHIP_MAX};
pub use sink::StateSink;
pub use view::{StateView, Streamable};

const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
/// One row per checkpoint generation, keyed by its slot's `head_key`: the header (see
/// `CheckpointHead`). Each slot's state is in its own table of rows of `WRITE_CHUNK_BYTES`
/// (older checkpoints: up to `CHUNK_BYTES`), keys 0.., so no redb value is huge.
pub(crate) const CHECKPOINT_HEAD: TableDefinition<&str, &[u8]> =
    TableDefinition::new("checkpoint_head");
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
    /// The generation the next save must not overwrite: the one the state was loaded from,
    /// then the one last saved. None: the save picks the older or an unusable slot.
    kept: Mutex<Option<usize>>,
    /// Held by a snapshot stage for its whole run: two stages at once could leave one's state
    /// beside the other's `log-incoming` (review s22 snapshot M2).
    staging: Mutex<()>,
    /// The slots snapshot streams are reading (`StateView`), and the saves deferred for them.
    pub(crate) pins: slot_pins::SlotPins,
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
        let store = StateStore {
            db,
            kept: Mutex::new(None),
            staging: Mutex::new(()),
            pins: slot_pins::SlotPins::default(),
        };
        // Creating the tables up front lets readers open them without a missing-table case.
        store.write("create tables", |txn| {
            txn.open_table(META)?;
            txn.open_table(CHECKPOINT_HEAD)?;
            txn.open_table(CHECKPOINT_FLOOR)?;
            txn.open_table(CHECKPOINT_MEMBERSHIP)?;
            for slot in &SLOTS {
                txn.open_table(slot.chunks)?;
            }
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

    /// Saves a checkpoint in one durable transaction over the older of the two generations
    /// kept (never over the one `keep` names or the last saved): a crash leaves either the
    /// old content of that slot or the new checkpoint, never a mix.
    pub fn save_checkpoint(&self, cp: &Checkpoint) -> Result<(), StorageError> {
        CheckpointHead::describe(cp)?;
        self.save_checkpoint_streamed(cp.applied_index, cp.applied_term, |sink| {
            sink.write(&cp.state)
        })
    }

    /// [`Self::save_checkpoint`] for a state that `fill` hands to the sink piece by piece, so
    /// it is never held whole: memory is one chunk plus what `fill` holds. Records no run
    /// floor: a snapshot cannot be streamed from this generation.
    pub fn save_checkpoint_streamed(
        &self,
        applied_index: u64,
        applied_term: u64,
        fill: impl FnOnce(&mut StateSink<'_>),
    ) -> Result<(), StorageError> {
        self.save(applied_index, applied_term, None, fill)
    }

    /// [`Self::save_checkpoint_streamed`] that also records, in the same transaction, the
    /// first record `first_record` (`F`) a snapshot of this generation carries: the run floor
    /// of the state saved, `applied_index + 1` when no run names a record. Refused (nothing
    /// written) when `F` is past `applied_index + 1`.
    pub fn save_checkpoint_with_floor(
        &self,
        applied_index: u64,
        applied_term: u64,
        first_record: u64,
        fill: impl FnOnce(&mut StateSink<'_>),
    ) -> Result<(), StorageError> {
        if first_record > applied_index.saturating_add(1) {
            return Err(StorageError::CheckpointRefused {
                reason: format!(
                    "its run floor {first_record} is past applied index {applied_index} + 1"
                ),
            });
        }
        self.save(applied_index, applied_term, Some(first_record), fill)
    }

    fn save(
        &self,
        applied_index: u64,
        applied_term: u64,
        first_record: Option<u64>,
        fill: impl FnOnce(&mut StateSink<'_>),
    ) -> Result<(), StorageError> {
        let kept = *self.kept.lock().unwrap_or_else(|p| p.into_inner());
        let mut target = 0;
        let mut pending = None;
        self.write("save the checkpoint", |txn| {
            // Read in the save's own transaction: redb serialises writers, so no save can
            // commit between an install's step 3 and the reload that finishes it (review s21
            // M3: an engine not yet reloaded would write its old state over both slots).
            if let Some(row) = txn.open_table(META)?.get(INSTALLING_KEY)? {
                pending = Some(Installing::decode(row.value()).map_or(0, |i| i.applied_index));
                return Ok(());
            }
            let mut heads = txn.open_table(CHECKPOINT_HEAD)?;
            target = match kept {
                Some(k) => 1 - k,
                None => slot_to_overwrite(&heads)?,
            };
            let slot = &SLOTS[target];
            let mut chunks = txn.open_table(slot.chunks)?;
            chunks.retain(|_, _| false)?;
            let mut sink = StateSink::new(chunks);
            fill(&mut sink);
            let head = sink.finish(applied_index, applied_term)?.encode();
            heads.insert(slot.head_key, head.as_slice())?;
            let mut floors = txn.open_table(CHECKPOINT_FLOOR)?;
            // A row left from the slot's previous generation must never describe this one.
            let mut highest = 0;
            for s in &SLOTS {
                if let Some(r) = floors
                    .get(s.head_key)?
                    .and_then(|v| FloorRow::decode(v.value()))
                {
                    highest = highest.max(r.save_number);
                }
            }
            match first_record {
                Some(first_record) => {
                    let row = FloorRow {
                        first_record,
                        save_number: highest.saturating_add(1),
                        head_crc: crc32c::crc32c(&head),
                    };
                    floors.insert(slot.head_key, row.encode().as_slice())?;
                }
                None => {
                    floors.remove(slot.head_key)?;
                }
            }
            drop(floors);
            // The membership applied when the engine's state reached `applied_index` or later,
            // read in this transaction: the Raft crate serves the generation only when that
            // membership's own index is at or below it.
            let membership = txn
                .open_table(META)?
                .get(MEMBERSHIP_KEY)?
                .map(|v| v.value().to_vec())
                .filter(|m| m.len() <= MEMBERSHIP_MAX);
            let mut memberships = txn.open_table(CHECKPOINT_MEMBERSHIP)?;
            match membership {
                Some(m) => {
                    memberships
                        .insert(slot.head_key, membership_row::encode(&head, &m).as_slice())?;
                }
                None => {
                    memberships.remove(slot.head_key)?;
                }
            }
            Ok(())
        })?;
        if let Some(applied_index) = pending {
            return Err(StorageError::InstallPending {
                applied_index,
                refused: "no checkpoint is saved",
            });
        }
        *self.kept.lock().unwrap_or_else(|p| p.into_inner()) = Some(target);
        self.pins.saved();
        Ok(())
    }

    /// Whether the next save should be skipped because it would overwrite the generation a
    /// snapshot stream is reading (review s27 snap M1; `slot_pins`): true at most
    /// `CHECKPOINT_DEFER_MAX` times in a row. The caller skips that save (writes nothing and
    /// reclaims nothing) and tries at its next interval. A stream opened after this answer
    /// may still see its slot overwritten, and fail as before. A redb read.
    /// Never while the save is `pressed` (review s28 snap M3): the disk gate is short, or
    /// the save lets log go, or it is the last one at shutdown. Deferring then would keep a
    /// full node refusing writes for one follower's stream.
    pub fn defer_save(&self, pressed: bool) -> Result<bool, StorageError> {
        if pressed {
            return Ok(false);
        }
        let kept = *self.kept.lock().unwrap_or_else(|p| p.into_inner());
        let target = match kept {
            Some(k) => 1 - k,
            None => {
                let txn = self
                    .db
                    .begin_read()
                    .map_err(StorageError::state("read the checkpoint slots"))?;
                let heads = txn
                    .open_table(CHECKPOINT_HEAD)
                    .map_err(StorageError::state("read the checkpoint slots"))?;
                slot_to_overwrite(&heads)
                    .map_err(StorageError::state("read the checkpoint slots"))?
            }
        };
        Ok(self.pins.defer(target))
    }

    pub(crate) fn pin_slot(&self, slot: usize) {
        self.pins.pin(slot);
    }

    pub(crate) fn unpin_slot(&self, slot: usize) {
        self.pins.unpin(slot);
    }

    /// The newest checkpoint that verifies (its length and CRC32C), which the next save then
    /// keeps; if none does, the newest one's error.
    pub fn load_checkpoint(&self) -> Result<Option<Checkpoint>, StorageError> {
        let mut first_error = None;
        for g in self.load_generations()? {
            match g.checkpoint {
                Ok(cp) => {
                    self.keep(g.slot);
                    return Ok(Some(cp));
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(None), Err)
    }

    /// Every stored checkpoint generation (none, one or two), newest first, each verified or
    /// with the reason it is unusable. A caller that starts from one says so with `keep`.
    pub fn load_generations(&self) -> Result<Vec<Generation>, StorageError> {
        self.generations(true)
    }

    /// The stored generations' headers (none, one or two), newest first (a damaged header
    /// last), no state read.
    pub fn generation_heads(&self) -> Result<Vec<GenerationHead>, StorageError> {
        let op = "load the checkpoint";
        let txn = self.db.begin_read().map_err(StorageError::state(op))?;
        let heads = txn
            .open_table(CHECKPOINT_HEAD)
            .map_err(StorageError::state(op))?;
        let mut found = Vec::new();
        for slot in 0..SLOTS.len() {
            if let Some(h) = read_head(slot, &heads)? {
                found.push(h);
            }
        }
        found.sort_by_key(|h| std::cmp::Reverse(h.applied_index.map(|i| i.saturating_add(1))));
        Ok(found)
    }

    /// The generation in `slot` read whole and verified, as `load_generations` reads each
    /// (None when the slot is empty).
    pub fn load_generation(&self, slot: usize) -> Result<Option<Generation>, StorageError> {
        let op = "load the checkpoint";
        let slot = slot.min(SLOTS.len() - 1);
        let txn = self.db.begin_read().map_err(StorageError::state(op))?;
        let heads = txn
            .open_table(CHECKPOINT_HEAD)
            .map_err(StorageError::state(op))?;
        let chunks = || {
            txn.open_table(SLOTS[slot].chunks)
                .map_err(StorageError::state(op))
        };
        read_slot(slot, &heads, chunks, true)
    }

    /// `load_generations`, with the state verified but not kept when `keep_state` is false
    /// (the checkpoint's `state` is then empty): what a check of which generations are usable
    /// needs without holding a multi-GB state in memory.
    pub(crate) fn generations(&self, keep_state: bool) -> Result<Vec<Generation>, StorageError> {
        let op = "load the checkpoint";
        let txn = self.db.begin_read().map_err(StorageError::state(op))?;
        let heads = txn
            .open_table(CHECKPOINT_HEAD)
            .map_err(StorageError::state(op))?;
        let mut gens = Vec::new();
        for (slot, s) in SLOTS.iter().enumerate() {
            let chunks = || txn.open_table(s.chunks).map_err(StorageError::state(op));
            if let Some(g) = read_slot(slot, &heads, chunks, keep_state)? {
                gens.push(g);
            }
        }
        Ok(newest_first(gens))
    }

    /// The state in memory was loaded from the generation in `slot` (0 or 1): the next save
    /// must not overwrite it.
    pub fn keep(&self, slot: usize) {
        *self.kept.lock().unwrap_or_else(|p| p.into_inner()) = Some(slot.min(1));
    }

    /// A raw write, for tests that damage or hand-craft rows.
    #[cfg(test)]
    pub(crate) fn write_raw(
        &self,
        body: impl FnOnce(&redb::WriteTransaction) -> Result<(), redb::Error>,
    ) -> Result<(), StorageError> {
        self.write("write raw rows", body)
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
