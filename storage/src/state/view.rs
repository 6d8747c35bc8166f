//! One checkpoint generation read piece by piece for a snapshot stream: the state is never
//! loaded whole (docs/storage-format.md "Never whole in memory"), and no redb read
//! transaction outlives one chunk's read, so the saves that go on meanwhile reuse their freed
//! pages (review s20 H2).

use std::sync::{Arc, Mutex};

use redb::{ReadOnlyTable, ReadTransaction, ReadableDatabase};

use super::checkpoint::{CheckpointHead, CHUNK_BYTES};
use super::floor_row::{FloorRow, CHECKPOINT_FLOOR};
use super::generations::SLOTS;
use super::membership_row::{self, CHECKPOINT_MEMBERSHIP};
use super::{StateStore, CHECKPOINT_HEAD};
use crate::sync::lock;
use crate::StorageError;

const OPEN: &str = "open the checkpoint for a snapshot";
const READ: &str = "read the checkpoint for a snapshot";

/// A generation as it was when opened. Every read checks, in its own transaction, that the
/// slot still holds exactly that generation (its header and floor row bytes, the row carrying
/// the save number), and fails otherwise: the stream must then be opened afresh.
pub struct StateView {
    pub applied_index: u64,
    pub applied_term: u64,
    pub state_len: u64,
    pub state_crc: u32,
    /// `F`, as recorded with the generation.
    pub first_record: u64,
    /// The bytes of `raft/membership` recorded with the generation (`membership_row`), None
    /// when none was (builds before the row, or no membership applied yet).
    pub membership: Option<Vec<u8>>,
    store: Arc<StateStore>,
    slot: usize,
    head_raw: Vec<u8>,
    row_raw: Vec<u8>,
    chunk_count: u32,
    /// Every chunk but the last holds this many bytes.
    chunk_len: u64,
    /// The CRC32C of the state's bytes `0..through`, extended as reads pass `through`; the
    /// read that would deliver the last state byte is refused unless it matches the header.
    crc: Mutex<RunningCrc>,
}

/// A slot holding a streamable generation at the index asked for.
struct Candidate {
    row: FloorRow,
    slot: usize,
    head: CheckpointHead,
    head_raw: Vec<u8>,
    row_raw: Vec<u8>,
}

#[derive(Clone, Copy)]
struct RunningCrc {
    through: u64,
    crc: u32,
}

impl StateStore {
    /// The newest generation whose applied index is `applied_index` and which a snapshot can
    /// carry: a version-2 header and a floor row saved with it. Reads the headers, the rows
    /// and the first chunk only; the state is verified as it is streamed.
    pub fn state_view(
        store: &Arc<StateStore>,
        applied_index: u64,
    ) -> Result<StateView, StorageError> {
        let txn = store.db.begin_read().map_err(StorageError::state(OPEN))?;
        let found = slots_of(&txn)?;
        let unusable: Vec<&str> = found
            .iter()
            .filter_map(|f| f.as_ref().err())
            .filter(|u| u.applied_index == applied_index)
            .map(|u| u.why)
            .collect();
        let best = found
            .into_iter()
            .flatten()
            .filter(|c| c.head.applied_index == applied_index)
            .max_by_key(|c| c.row.save_number);
        let Some(Candidate {
            row,
            slot,
            head,
            head_raw,
            row_raw,
        }) = best
        else {
            let why = if unusable.is_empty() {
                String::new()
            } else {
                format!(" that can be streamed (found {})", unusable.join(", "))
            };
            return Err(StorageError::SnapshotUnavailable {
                reason: format!(
                    "no checkpoint generation is at applied index {applied_index}{why}"
                ),
            });
        };
        if row.first_record > applied_index.saturating_add(1) {
            return Err(StorageError::CorruptCheckpoint {
                reason: format!(
                    "the generation at index {applied_index} records run floor {} past it",
                    row.first_record
                ),
            });
        }
        let membership = membership_of(&txn, slot, &head_raw)?;
        let chunks = txn
            .open_table(SLOTS[slot].chunks)
            .map_err(StorageError::state(OPEN))?;
        let chunk_len = match chunks.get(0).map_err(StorageError::state(OPEN))? {
            Some(c) => c.value().len() as u64,
            None => 0,
        };
        let n = u64::from(head.chunk_count);
        // Every chunk full but the last, which holds 1..=chunk_len bytes.
        let laid_out = if n == 0 {
            head.state_len == 0
        } else {
            chunk_len > 0
                && chunk_len <= CHUNK_BYTES as u64
                && (n - 1) * chunk_len < head.state_len
                && head.state_len <= n * chunk_len
        };
        if !laid_out {
            return Err(StorageError::CorruptCheckpoint {
                reason: format!(
                    "the generation at index {applied_index} claims {} bytes in {} chunks, the \
                     first of {chunk_len} bytes",
                    head.state_len, head.chunk_count
                ),
            });
        }
        // Pinned from here to the view's drop: a save into this slot is deferred meanwhile.
        store.pin_slot(slot);
        Ok(StateView {
            applied_index,
            applied_term: head.applied_term,
            state_len: head.state_len,
            state_crc: head.crc,
            first_record: row.first_record,
            membership,
            store: store.clone(),
            slot,
            head_raw,
            row_raw,
            chunk_count: head.chunk_count,
            chunk_len,
            crc: Mutex::new(RunningCrc { through: 0, crc: 0 }),
        })
    }
}

/// Every slot holding a decodable header, as a candidate or, when a snapshot cannot carry it,
/// the reason why (a version-1 header, no floor row saved with it). Empty or undecodable
/// slots are left out: they hold no generation.
fn slots_of(txn: &ReadTransaction) -> Result<Vec<Result<Candidate, Unusable>>, StorageError> {
    let heads = txn
        .open_table(CHECKPOINT_HEAD)
        .map_err(StorageError::state(OPEN))?;
    let floors = txn
        .open_table(CHECKPOINT_FLOOR)
        .map_err(StorageError::state(OPEN))?;
    let mut found = Vec::with_capacity(SLOTS.len());
    for (slot, s) in SLOTS.iter().enumerate() {
        let Some(raw) = heads.get(s.head_key).map_err(StorageError::state(OPEN))? else {
            continue;
        };
        let head_raw = raw.value().to_vec();
        let Ok(head) = CheckpointHead::decode(&head_raw) else {
            continue;
        };
        if !CheckpointHead::is_current_version(&head_raw) {
            found.push(Err(Unusable {
                applied_index: head.applied_index,
                why: "a version-1 header, whose applied term no CRC covers",
            }));
            continue;
        }
        let row_raw = floors
            .get(s.head_key)
            .map_err(StorageError::state(OPEN))?
            .map(|v| v.value().to_vec());
        let Some((row, row_raw)) =
            row_raw.and_then(|raw| FloorRow::of_head(&raw, &head_raw).map(|r| (r, raw)))
        else {
            found.push(Err(Unusable {
                applied_index: head.applied_index,
                why: "no run floor recorded with it",
            }));
            continue;
        };
        found.push(Ok(Candidate {
            row,
            slot,
            head,
            head_raw,
            row_raw,
        }));
    }
    Ok(found)
}

/// A generation a snapshot cannot carry, and why.
struct Unusable {
    applied_index: u64,
    why: &'static str,
}

/// The bytes of `raft/membership` recorded with the generation in `slot`, if any.
fn membership_of(
    txn: &ReadTransaction,
    slot: usize,
    head_raw: &[u8],
) -> Result<Option<Vec<u8>>, StorageError> {
    Ok(txn
        .open_table(CHECKPOINT_MEMBERSHIP)
        .map_err(StorageError::state(OPEN))?
        .get(SLOTS[slot].head_key)
        .map_err(StorageError::state(OPEN))?
        .and_then(|v| membership_row::of_head(v.value(), head_raw).map(<[u8]>::to_vec)))
}

/// What a snapshot of a generation says of itself, read from its header and rows alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Streamable {
    pub applied_index: u64,
    pub applied_term: u64,
    /// `F`, as recorded with the generation.
    pub first_record: u64,
    pub state_crc: u32,
    /// The bytes of `raft/membership` recorded with the generation, if any.
    pub membership: Option<Vec<u8>>,
}

impl StateStore {
    /// The newest generation (highest save number) a snapshot can carry: a version-2 header
    /// and a floor row saved with it. Headers and rows only, no state byte: the state is
    /// verified as it is streamed (`state_view`). None when no generation qualifies.
    pub fn newest_streamable(&self) -> Result<Option<Streamable>, StorageError> {
        let txn = self.db.begin_read().map_err(StorageError::state(OPEN))?;
        let best = slots_of(&txn)?
            .into_iter()
            .flatten()
            .max_by_key(|c| c.row.save_number);
        let Some(Candidate {
            row,
            slot,
            head,
            head_raw,
            ..
        }) = best
        else {
            return Ok(None);
        };
        let membership = membership_of(&txn, slot, &head_raw)?;
        Ok(Some(Streamable {
            applied_index: head.applied_index,
            applied_term: head.applied_term,
            first_record: row.first_record,
            state_crc: head.crc,
            membership,
        }))
    }
}

impl Drop for StateView {
    fn drop(&mut self) {
        self.store.unpin_slot(self.slot);
    }
}

impl StateView {
    /// Copies state bytes from `offset` into `buf`; the count copied (0 at the end). Fails when
    /// the slot was saved over since the view was opened, and on the read that would deliver
    /// the last byte when the state does not match its CRC32C.
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, StorageError> {
        let mut done = 0;
        let mut at = offset;
        while done < buf.len() && at < self.state_len {
            let i = at / self.chunk_len;
            let start = i * self.chunk_len;
            let n = self.with_chunk(i, |bytes| {
                let from = (at - start) as usize;
                let n = (bytes.len() - from).min(buf.len() - done);
                buf[done..done + n].copy_from_slice(&bytes[from..from + n]);
                self.extend_crc(at, &bytes[from..from + n]);
                n
            })?;
            done += n;
            at += n as u64;
        }
        if at == self.state_len && done > 0 {
            self.verify()?;
        }
        if done > 0 {
            self.store.pins.progressed();
        }
        Ok(done)
    }

    /// Checks the whole state against the header's CRC32C, reading whatever the stream's
    /// reads have not passed in order. Idempotent; fails while it does not match.
    pub fn verify(&self) -> Result<(), StorageError> {
        loop {
            let seen = *lock(&self.crc);
            if seen.through >= self.state_len {
                break;
            }
            let i = seen.through / self.chunk_len;
            let start = i * self.chunk_len;
            self.with_chunk(i, |bytes| {
                self.extend_crc(seen.through, &bytes[(seen.through - start) as usize..]);
            })?;
        }
        let crc = lock(&self.crc).crc;
        if crc != self.state_crc {
            return Err(StorageError::CorruptCheckpoint {
                reason: format!(
                    "the generation at index {} reads with crc32c {crc:#010x}; its header says \
                     {:#010x}: it is not sent",
                    self.applied_index, self.state_crc
                ),
            });
        }
        Ok(())
    }

    /// Runs `f` over chunk `i` inside a read transaction of its own, after checking the slot
    /// still holds this generation and the chunk has the length its place promises.
    fn with_chunk<T>(&self, i: u64, f: impl FnOnce(&[u8]) -> T) -> Result<T, StorageError> {
        let txn = self
            .store
            .db
            .begin_read()
            .map_err(StorageError::state(READ))?;
        self.still_the_same(&txn)?;
        let chunks: ReadOnlyTable<u32, &[u8]> = txn
            .open_table(SLOTS[self.slot].chunks)
            .map_err(StorageError::state(READ))?;
        let index = u32::try_from(i).ok().filter(|&i| i < self.chunk_count);
        let chunk = index
            .map(|i| chunks.get(i))
            .transpose()
            .map_err(StorageError::state(READ))?
            .flatten()
            .ok_or_else(|| StorageError::CorruptCheckpoint {
                reason: format!(
                    "chunk {i} of the generation at index {} is missing",
                    self.applied_index
                ),
            })?;
        let bytes = chunk.value();
        let want = if i + 1 == u64::from(self.chunk_count) {
            self.state_len - i * self.chunk_len
        } else {
            self.chunk_len
        };
        if bytes.len() as u64 != want {
            return Err(StorageError::CorruptCheckpoint {
                reason: format!(
                    "chunk {i} of the generation at index {} holds {} bytes, its place {want}",
                    self.applied_index,
                    bytes.len()
                ),
            });
        }
        Ok(f(bytes))
    }

    fn still_the_same(&self, txn: &ReadTransaction) -> Result<(), StorageError> {
        let key = SLOTS[self.slot].head_key;
        let head = txn
            .open_table(CHECKPOINT_HEAD)
            .map_err(StorageError::state(READ))?
            .get(key)
            .map_err(StorageError::state(READ))?
            .map(|v| v.value() == self.head_raw.as_slice());
        let row = txn
            .open_table(CHECKPOINT_FLOOR)
            .map_err(StorageError::state(READ))?
            .get(key)
            .map_err(StorageError::state(READ))?
            .map(|v| v.value() == self.row_raw.as_slice());
        if head != Some(true) || row != Some(true) {
            return Err(StorageError::SnapshotUnavailable {
                reason: format!(
                    "the checkpoint generation at index {} was saved over while its snapshot \
                     was streamed; a snapshot of a newer one must be sent",
                    self.applied_index
                ),
            });
        }
        Ok(())
    }

    /// Takes `bytes`, the state from `at`, into the running CRC where they continue it.
    fn extend_crc(&self, at: u64, bytes: &[u8]) {
        let mut c = lock(&self.crc);
        let end = at + bytes.len() as u64;
        if at <= c.through && c.through < end {
            let from = (c.through - at) as usize;
            c.crc = crc32c::crc32c_append(c.crc, &bytes[from..]);
            c.through = end;
        }
    }
}
