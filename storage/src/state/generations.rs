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
    /// The checkpoint, verified against its length and CRC32C, or why it is unusable.
    pub checkpoint: Result<Checkpoint, StorageError>,
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
