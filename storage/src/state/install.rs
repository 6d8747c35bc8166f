//! Step 3 of a snapshot install: one redb transaction that puts the snapshot's state into
//! both checkpoint slots, writes the Raft rows the caller gives and the `raft/installing`
//! record, and that record's reader for the start-up that finishes steps 4 and 5
//! (docs/storage-format.md "Install on the receiver").

use redb::{ReadableDatabase, ReadableTable};

use super::checkpoint::CheckpointHead;
use super::floor_row::{FloorRow, CHECKPOINT_FLOOR};
use super::generations::{read_slot, SLOTS};
use super::membership_row::{self, CHECKPOINT_MEMBERSHIP, MEMBERSHIP_KEY, MEMBERSHIP_MAX};
use super::{StateSink, StateStore, CHECKPOINT_HEAD, META};
use crate::format::{le_u32, le_u64};
use crate::StorageError;

/// The meta key of the record an install in progress leaves from step 3 to step 5.
pub const INSTALLING_KEY: &str = "raft/installing";
const INSTALLING_LEN: usize = 29;

/// What step 3 committed: the snapshot's `(A, term)`, its `F`, and whether step 2 built
/// `log-incoming` (which step 4 then puts in place of `log`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Installing {
    pub applied_index: u64,
    pub applied_term: u64,
    pub first_record: u64,
    pub switch: bool,
}

impl Installing {
    /// A u64 | term u64 | F u64 | switch u8 | crc32c of bytes 0..25 u32, little-endian.
    fn encode(&self) -> [u8; INSTALLING_LEN] {
        let mut b = [0u8; INSTALLING_LEN];
        b[0..8].copy_from_slice(&self.applied_index.to_le_bytes());
        b[8..16].copy_from_slice(&self.applied_term.to_le_bytes());
        b[16..24].copy_from_slice(&self.first_record.to_le_bytes());
        b[24] = u8::from(self.switch);
        let crc = crc32c::crc32c(&b[..25]);
        b[25..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    pub(super) fn decode(b: &[u8]) -> Result<Installing, StorageError> {
        let bad = |why: &str| StorageError::CorruptCheckpoint {
            reason: format!(
                "meta {INSTALLING_KEY} {why}; the install it records cannot be finished"
            ),
        };
        if b.len() != INSTALLING_LEN {
            return Err(bad(&format!("is {} bytes, not {INSTALLING_LEN}", b.len())));
        }
        if le_u32(&b[25..]) != crc32c::crc32c(&b[..25]) || b[24] > 1 {
            return Err(bad("does not verify"));
        }
        Ok(Installing {
            applied_index: le_u64(&b[0..]),
            applied_term: le_u64(&b[8..]),
            first_record: le_u64(&b[16..]),
            switch: b[24] == 1,
        })
    }
}

/// The applied index of the newest generation at or past `a` that a node could start from
/// (a current-version header, its state verified). Headers decide first: only a slot whose
/// header names an index at or past `a` has its state read, so the usual answer (no such
/// slot) reads no state at all (review s24 snap M2).
fn usable_at_or_past<H, C>(
    heads: &H,
    chunks: impl Fn(usize) -> Result<C, StorageError>,
    a: u64,
) -> Result<Option<u64>, StorageError>
where
    H: ReadableTable<&'static str, &'static [u8]>,
    C: ReadableTable<u32, &'static [u8]>,
{
    let op = "read the checkpoint headers";
    let mut newest = None;
    for (slot, s) in SLOTS.iter().enumerate() {
        let high = heads
            .get(s.head_key)
            .map_err(StorageError::state(op))?
            .and_then(|raw| CheckpointHead::decode(raw.value()).ok())
            .is_some_and(|h| h.applied_index >= a);
        if !high {
            continue;
        }
        if let Some(g) = read_slot(slot, heads, || chunks(slot), false)? {
            if g.current_version && g.checkpoint.is_ok() {
                newest = newest.max(g.applied_index);
            }
        }
    }
    Ok(newest)
}

/// Feeds the state, once per slot, into the sink it is given.
pub type FillState<'f> = dyn FnMut(&mut StateSink<'_>) -> Result<(), StorageError> + 'f;

impl StateStore {
    /// Step 3: the state `fill` gives into both slots, verified against `state_len` and
    /// `state_crc` before anything commits, with floor rows naming `install.first_record`,
    /// `meta` (the Raft rows: purge horizon, membership) and the `raft/installing` record,
    /// all in one durable transaction. Nothing is committed on any error.
    pub fn commit_install(
        &self,
        install: &Installing,
        state_len: u64,
        state_crc: u32,
        fill: &mut FillState<'_>,
        meta: &[(&str, &[u8])],
    ) -> Result<(), StorageError> {
        let op = "install a snapshot's state";
        let txn = self.db.begin_write().map_err(StorageError::state(op))?;
        // An earlier install's `log-incoming` and rows would be overwritten half-finished
        // (review s21 M1): it is finished by a reopen first.
        let pending = txn
            .open_table(META)
            .map_err(StorageError::state(op))?
            .get(INSTALLING_KEY)
            .map_err(StorageError::state(op))?
            .map(|row| Installing::decode(row.value()).map_or(0, |i| i.applied_index));
        if let Some(applied_index) = pending {
            return Err(StorageError::InstallPending {
                applied_index,
                refused: "no other snapshot is installed",
            });
        }
        // Checked again in this transaction: a save that committed since the stage's own check
        // (the engine applies on while the stage runs) would otherwise be overwritten with
        // the older state of the snapshot (review s23 M3).
        let heads = txn
            .open_table(CHECKPOINT_HEAD)
            .map_err(StorageError::state(op))?;
        let chunks = |slot: usize| {
            txn.open_table(SLOTS[slot].chunks)
                .map_err(StorageError::state(op))
        };
        let usable = usable_at_or_past(&heads, chunks, install.applied_index)?;
        drop(heads);
        if let Some(at) = usable {
            return Err(StorageError::SnapshotRefused {
                offset: 0,
                reason: format!(
                    "this node's checkpoint is at index {at}, at or past the snapshot's last \
                     index {}",
                    install.applied_index
                ),
            });
        }
        let mut highest = 0;
        {
            let floors = txn
                .open_table(CHECKPOINT_FLOOR)
                .map_err(StorageError::state(op))?;
            for s in &SLOTS {
                let row = floors.get(s.head_key).map_err(StorageError::state(op))?;
                if let Some(r) = row.and_then(|v| FloorRow::decode(v.value())) {
                    highest = highest.max(r.save_number);
                }
            }
        }
        for (n, slot) in SLOTS.iter().enumerate() {
            let mut chunks = txn
                .open_table(slot.chunks)
                .map_err(StorageError::state(op))?;
            chunks
                .retain(|_, _| false)
                .map_err(StorageError::state(op))?;
            let mut sink = StateSink::new(chunks);
            fill(&mut sink)?;
            let head = sink
                .finish(install.applied_index, install.applied_term)
                .map_err(StorageError::state(op))?;
            if head.state_len != state_len || head.crc != state_crc {
                // Dropped uncommitted: the store is as it was.
                return Err(StorageError::SnapshotRefused {
                    offset: 0,
                    reason: format!(
                        "the state read back from the file holds {} bytes with crc32c {:#010x}; \
                         its header says {state_len}, {state_crc:#010x}",
                        head.state_len, head.crc
                    ),
                });
            }
            let head = head.encode();
            txn.open_table(CHECKPOINT_HEAD)
                .map_err(StorageError::state(op))?
                .insert(slot.head_key, head.as_slice())
                .map_err(StorageError::state(op))?;
            let row = FloorRow {
                first_record: install.first_record,
                save_number: highest + 1 + n as u64,
                head_crc: crc32c::crc32c(&head),
            };
            txn.open_table(CHECKPOINT_FLOOR)
                .map_err(StorageError::state(op))?
                .insert(slot.head_key, row.encode().as_slice())
                .map_err(StorageError::state(op))?;
            // The snapshot's membership is the one at its A: recorded with both generations,
            // so this node can send the installed snapshot on.
            let mut memberships = txn
                .open_table(CHECKPOINT_MEMBERSHIP)
                .map_err(StorageError::state(op))?;
            let given = meta
                .iter()
                .find(|(key, _)| *key == MEMBERSHIP_KEY)
                .map(|(_, m)| *m)
                .filter(|m| m.len() <= MEMBERSHIP_MAX);
            match given {
                Some(m) => {
                    memberships.insert(slot.head_key, membership_row::encode(&head, m).as_slice())
                }
                None => memberships.remove(slot.head_key),
            }
            .map_err(StorageError::state(op))?;
        }
        {
            let mut t = txn.open_table(META).map_err(StorageError::state(op))?;
            for (key, value) in meta {
                t.insert(*key, *value).map_err(StorageError::state(op))?;
            }
            t.insert(INSTALLING_KEY, install.encode().as_slice())
                .map_err(StorageError::state(op))?;
        }
        txn.commit().map_err(StorageError::state(op))?;
        // Both slots hold it: the next save goes over slot 0 and keeps slot 1.
        self.keep(1);
        Ok(())
    }

    /// Writes `rows` into the meta table in one transaction, unless an install is staged
    /// (`raft/installing` set): its commit wrote the rows the reopen must find, and the
    /// replaced incarnation, still applying its old log until the group closes, must not
    /// write over them (review s29 snap H1: a membership applied there after the stage
    /// replaced the snapshot's, and the reopen ran on it). Whether the rows were written.
    pub fn put_meta_unless_installing(&self, rows: &[(&str, &[u8])]) -> Result<bool, StorageError> {
        let op = "write metadata";
        let txn = self.db.begin_write().map_err(StorageError::state(op))?;
        {
            let mut t = txn.open_table(META).map_err(StorageError::state(op))?;
            if t.get(INSTALLING_KEY)
                .map_err(StorageError::state(op))?
                .is_some()
            {
                return Ok(false);
            }
            for (key, value) in rows {
                t.insert(*key, *value).map_err(StorageError::state(op))?;
            }
        }
        txn.commit().map_err(StorageError::state(op))?;
        Ok(true)
    }

    /// The install a crash interrupted after its step 3, if any.
    pub fn installing(&self) -> Result<Option<Installing>, StorageError> {
        self.get_meta(INSTALLING_KEY)?
            .map(|b| Installing::decode(&b))
            .transpose()
    }

    /// The applied index of the newest generation at or past `a` this node could start from:
    /// its header of the current version (whose own CRC32C covers the index) and its state
    /// verified. A snapshot at `a` is not worth installing past it. A generation that decodes
    /// but does not verify, or a version 1 header, would refuse every snapshot up to an index
    /// the node does not run from (review s23 L3). Only the states of slots whose header is
    /// at or past `a` are read, a chunk at a time, keeping none (review s24 snap M2).
    pub fn usable_checkpoint_at_or_past(&self, a: u64) -> Result<Option<u64>, StorageError> {
        let op = "read the checkpoint headers";
        let txn = self.db.begin_read().map_err(StorageError::state(op))?;
        let heads = txn
            .open_table(CHECKPOINT_HEAD)
            .map_err(StorageError::state(op))?;
        let chunks = |slot: usize| {
            txn.open_table(SLOTS[slot].chunks)
                .map_err(StorageError::state(op))
        };
        usable_at_or_past(&heads, chunks, a)
    }

    /// Taken by a stage for its whole run, so stages run one at a time (review s22 M2).
    pub(crate) fn stage_lock(&self) -> std::sync::MutexGuard<'_, ()> {
        // Guards no data: a panicked stage leaves nothing the next one must repair here.
        self.staging.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The last step of an install: durable on return.
    pub fn clear_installing(&self) -> Result<(), StorageError> {
        self.write("finish a snapshot install", |txn| {
            txn.open_table(META)?.remove(INSTALLING_KEY)?;
            Ok(())
        })
    }
}
