//! Two checkpoint generations. Once the log's prefix is deleted for space, a checkpoint is
//! the only copy of the state before it: one damaged checkpoint must not lose a tenant. So
//! the store keeps the two latest checkpoints in two slots; each save overwrites the slot the
//! state was not loaded from (or last saved to), and a reader falls back to the older one
//! when the newer does not verify. The log is only ever reclaimed up to what the older one
//! still needs (docs/storage-format.md "Space reclamation").

use redb::{ReadableTable, TableDefinition};

use super::checkpoint::{Checkpoint, CheckpointHead};
use crate::StorageError;

/// Where one generation lives: its header row in `checkpoint_head` and its chunk table.
pub(crate) struct Slot {
    pub head_key: &'static str,
    pub chunks: TableDefinition<'static, u32, &'static [u8]>,
}

/// Slot 0 is the layout of builds before two generations (which read only it): a data
/// directory they wrote loads as a store whose slot 1 is empty.
pub(crate) const SLOTS: [Slot; 2] = [
    Slot {
        head_key: "current",
        chunks: TableDefinition::new("checkpoint_chunks"),
    },
    Slot {
        head_key: "second",
        chunks: TableDefinition::new("checkpoint_chunks_2"),
    },
];

/// One generation as found in the store.
#[derive(Debug)]
pub struct Generation {
    /// Which slot it is in (0 or 1): what `StateStore::keep` takes.
    pub slot: usize,
    /// The applied index its header names; None when the header itself is damaged.
    pub applied_index: Option<u64>,
    /// Whether its header is of the version whose own CRC32C covers `applied_index`: a
    /// version 1 header's index may hold a flipped bit nothing detects.
    pub current_version: bool,
    /// The checkpoint, verified against its length and CRC32C, or why it is unusable.
    pub checkpoint: Result<Checkpoint, StorageError>,
}

/// What a generation's header row says, its state not read: enough to choose the one to
/// load and to know what the group acknowledged before reading gigabytes (a start reads the
/// newest state only, and the older one only when the newest fails: session 35, a start
/// read and kept both, the older one for nothing).
#[derive(Debug, Clone, Copy)]
pub struct GenerationHead {
    pub slot: usize,
    /// None when the header itself does not decode.
    pub applied_index: Option<u64>,
    /// A current-version header, its own CRC32C passed: `applied_index` can be trusted
    /// before the state is verified (a version 1 header's cannot).
    pub current_version: bool,
    /// The state's length the header claims (None with `applied_index`).
    pub state_len: Option<u64>,
}

/// The header of the generation in `slot` (None when the slot is empty).
pub(crate) fn read_head(
    slot: usize,
    heads: &impl ReadableTable<&'static str, &'static [u8]>,
) -> Result<Option<GenerationHead>, StorageError> {
    let Some(raw) = heads
        .get(SLOTS[slot].head_key)
        .map_err(StorageError::state("load the checkpoint"))?
    else {
        return Ok(None);
    };
    let raw = raw.value();
    let head = CheckpointHead::decode(raw).ok();
    Ok(Some(GenerationHead {
        slot,
        applied_index: head.as_ref().map(|h| h.applied_index),
        current_version: head.is_some() && CheckpointHead::is_current_version(raw),
        state_len: head.as_ref().map(|h| h.state_len),
    }))
}

/// The generation in `slot` (None when the slot is empty), its state read from the table
/// `chunks` opens, of a read or a write transaction, and verified against the header's length
/// and CRC32C a chunk at a time; kept in the checkpoint only when `keep_state` (otherwise the
/// checkpoint's `state` is empty). Only a failure to read the header row is an `Err`: a
/// damaged generation is one whose `checkpoint` says why.
pub(crate) fn read_slot<C>(
    slot: usize,
    heads: &impl ReadableTable<&'static str, &'static [u8]>,
    chunks: impl FnOnce() -> Result<C, StorageError>,
    keep_state: bool,
) -> Result<Option<Generation>, StorageError>
where
    C: ReadableTable<u32, &'static [u8]>,
{
    let op = "load the checkpoint";
    let Some(raw) = heads
        .get(SLOTS[slot].head_key)
        .map_err(StorageError::state(op))?
    else {
        return Ok(None);
    };
    let raw = raw.value();
    let head = CheckpointHead::decode(raw);
    let applied_index = head.as_ref().ok().map(|h| h.applied_index);
    let checkpoint = head.and_then(|head| {
        let chunks = chunks()?;
        let mut state = Vec::new();
        if keep_state {
            state.reserve_exact(head.checked_capacity()?);
        }
        let (mut len, mut crc) = (0u64, 0u32);
        for i in 0..head.chunk_count {
            let chunk = chunks
                .get(i)
                .map_err(StorageError::state(op))?
                .ok_or_else(|| StorageError::CorruptCheckpoint {
                    reason: format!("chunk {i} of {} is missing", head.chunk_count),
                })?;
            let bytes = chunk.value();
            len = len.saturating_add(bytes.len() as u64);
            crc = crc32c::crc32c_append(crc, bytes);
            if keep_state {
                // Checked before it grows: the header's length bounds the state (and the
                // capacity reserved above).
                if len > head.state_len {
                    break;
                }
                state.extend_from_slice(bytes);
            }
        }
        head.verify_sum(len, crc)?;
        Ok(Checkpoint {
            applied_index: head.applied_index,
            applied_term: head.applied_term,
            state,
        })
    });
    Ok(Some(Generation {
        slot,
        applied_index,
        // A current-version header that decodes passed its own CRC32C.
        current_version: applied_index.is_some() && CheckpointHead::is_current_version(raw),
        checkpoint,
    }))
}

/// Newest first: the higher applied index; a generation whose header is damaged last.
pub(crate) fn newest_first(mut gens: Vec<Generation>) -> Vec<Generation> {
    gens.sort_by_key(|g| std::cmp::Reverse(g.applied_index.map(|i| i.saturating_add(1))));
    gens
}

/// The slot a save overwrites when the store has not been told which one to keep: an empty
/// one, else one with a damaged header, else the older.
pub(crate) fn slot_to_overwrite(
    heads: &impl ReadableTable<&'static str, &'static [u8]>,
) -> Result<usize, redb::Error> {
    let mut best = (0, Some(0u64));
    for (slot, s) in SLOTS.iter().enumerate() {
        let age = heads.get(s.head_key)?.map(|raw| {
            CheckpointHead::decode(raw.value()).map_or(0, |h| h.applied_index.saturating_add(1))
        });
        // None (empty) sorts below every Some: it is taken first.
        if slot == 0 || age < best.1 {
            best = (slot, age);
        }
    }
    Ok(best.0)
}
