//! Reads stored messages back: from the entry being planned, the entry cache, or the log.

use bytes::Bytes;
use thiserror::Error;
use uuid::Uuid;

use crate::cache::EntryCache;
use crate::codec::DecodeError;
use crate::log::{LogError, ReplicatedLog};
use crate::seal::{PayloadSeal, SealError};
use crate::state::frame::{control_marker, is_marker_id, read_frame, skip_frames, FrameRef};
use crate::state::model::{Partition, Run, PENDING_INDEX};

pub struct StoredMessage {
    pub offset: u64,
    pub id: [u8; 16],
    pub trace: Option<[u8; 16]>,
    pub txn: String,
    pub producer: Option<String>,
    pub payload: Bytes,
    pub created_us: i64,
}

impl StoredMessage {
    pub fn id_text(&self) -> String {
        Uuid::from_bytes(self.id).to_string()
    }

    /// A Kafka transaction's control record (never delivered over HTTP).
    pub fn is_control_marker(&self) -> bool {
        is_marker_id(&self.id) && self.txn.is_empty() && self.producer.is_none()
    }
}

/// Why a stored message could not be read back: the log failed, or the state points at bytes
/// that are not there or do not decode (a bug or corruption: the caller answers `Internal`).
#[derive(Debug, Error)]
pub enum ReadError {
    #[error(transparent)]
    Log(#[from] LogError),
    #[error("log entry {index} is missing")]
    Missing { index: u64 },
    #[error("offset {offset} of partition {partition} has no run")]
    NoRun { offset: u64, partition: u64 },
    #[error("run position {pos} past entry end")]
    PastEnd { pos: u32 },
    #[error(transparent)]
    Frame(#[from] DecodeError),
    #[error("message {offset} of partition {partition} is encrypted and this broker has no encryption_key (QUEEN_ENCRYPTION_KEY)")]
    NoKey { offset: u64, partition: u64 },
    #[error("message {offset} of partition {partition} could not be decrypted: {reason}")]
    Sealed {
        offset: u64,
        partition: u64,
        reason: SealError,
    },
}

impl ReadError {
    /// A payload that does not open (no key, another key, changed bytes): a failure of that
    /// one message, which a read covering others reports for it alone.
    pub fn is_unopened(&self) -> bool {
        matches!(self, ReadError::NoKey { .. } | ReadError::Sealed { .. })
    }
}

pub struct MessageReader<'a> {
    pub pending: &'a [u8],
    pub cache: &'a mut EntryCache,
    pub log: &'a dyn ReplicatedLog,
    /// Opens encrypted payloads; None when the broker has no key (an encrypted message then
    /// reads as [`ReadError::NoKey`], never as its envelope).
    pub seal: Option<&'a dyn PayloadSeal>,
}

/// The payload of an encrypted frame, opened; counted in `queen_payload_decrypt_failures_total`
/// when it does not open.
fn open_payload(
    seal: Option<&dyn PayloadSeal>,
    partition: u64,
    offset: u64,
    f: &FrameRef<'_>,
) -> Result<Bytes, ReadError> {
    let opened = match seal {
        None => Err(ReadError::NoKey { offset, partition }),
        Some(s) => s
            .open(&f.id, f.payload)
            .map(Bytes::from)
            .map_err(|reason| ReadError::Sealed {
                offset,
                partition,
                reason,
            }),
    };
    if let Err(e) = &opened {
        metrics::counter!("queen_payload_decrypt_failures_total").increment(1);
        tracing::error!(partition, offset, error = %e, "an encrypted payload did not open");
    }
    opened
}

impl MessageReader<'_> {
    fn entry(&mut self, index: u64) -> Result<Bytes, ReadError> {
        if let Some(e) = self.cache.get(index) {
            return Ok(e);
        }
        let bytes = Bytes::from(self.log.read(index)?.ok_or(ReadError::Missing { index })?);
        self.cache.insert(index, bytes.clone());
        Ok(bytes)
    }

    /// Messages `from..to` of a partition (clamped to what exists), in offset order.
    pub fn read(
        &mut self,
        p: &Partition,
        from: u64,
        to: u64,
    ) -> Result<Vec<StoredMessage>, ReadError> {
        self.read_upto(p, from, to, usize::MAX)
    }

    /// Like [`Self::read`], but stops before the message that would take the payloads read
    /// past `max_bytes` (the first message is read whatever its size): a pop's answer is built
    /// from these, and a cycle's pops together must fit the room answers have.
    pub fn read_upto(
        &mut self,
        p: &Partition,
        from: u64,
        to: u64,
        max_bytes: usize,
    ) -> Result<Vec<StoredMessage>, ReadError> {
        Ok(self
            .read_filtered(p, from, to, max_bytes, false, usize::MAX, false)?
            .0)
    }

    /// What an HTTP reader may deliver of `from..to` (docs/kafka-transactions.md, "HTTP never
    /// delivers"): [`Self::read_upto`] of at most `max_msgs` messages, without the offsets of
    /// `hidden` (ascending disjoint ranges, `KafkaTxns::hidden_ranges`, jumped over unread)
    /// and without Kafka control markers, known by their frame. Also returns where the read
    /// stopped: the offset after the last one it passed, hidden ones included, so a claim of
    /// only hidden offsets can move past them.
    pub fn read_visible(
        &mut self,
        p: &Partition,
        from: u64,
        to: u64,
        max_bytes: usize,
        hidden: &[(u64, u64)],
        max_msgs: usize,
    ) -> Result<(Vec<StoredMessage>, u64), ReadError> {
        let to = to.min(p.next_offset);
        let mut out: Vec<StoredMessage> = Vec::new();
        let mut bytes = 0usize;
        let mut at = from.max(p.low_offset());
        let mut skip = hidden.iter().peekable();
        while at < to && out.len() < max_msgs {
            while skip.peek().is_some_and(|(_, end)| *end <= at) {
                skip.next();
            }
            let seg_end = match skip.peek() {
                Some((start, end)) if *start <= at => {
                    at = (*end).min(to);
                    continue;
                }
                Some((start, _)) => (*start).min(to),
                None => to,
            };
            let first = out.is_empty();
            let (mut got, passed) = self.read_filtered(
                p,
                at,
                seg_end,
                max_bytes.saturating_sub(bytes),
                true,
                max_msgs - out.len(),
                !first,
            )?;
            bytes = got
                .iter()
                .fold(bytes, |b, m| b.saturating_add(m.payload.len()));
            out.append(&mut got);
            at = passed;
            if passed < seg_end {
                break;
            }
        }
        Ok((out, at))
    }

    /// Messages `from..to` within `max_bytes` (the first whatever its size, unless `strict`)
    /// and `max_msgs`, control markers left out when `skip_markers`; and the offset after the
    /// last one passed (below `to` when a bound or an unopened payload stopped it).
    #[allow(clippy::too_many_arguments)]
    fn read_filtered(
        &mut self,
        p: &Partition,
        from: u64,
        to: u64,
        max_bytes: usize,
        skip_markers: bool,
        max_msgs: usize,
        strict: bool,
    ) -> Result<(Vec<StoredMessage>, u64), ReadError> {
        let held_from = from.max(p.low_offset());
        let rows = to.min(p.next_offset).saturating_sub(held_from);
        // The capacity is a guess from the row count; it must not be a client's huge number.
        let mut out = Vec::with_capacity(usize::try_from(rows.min(4096)).unwrap_or(4096));
        let mut bytes = 0usize;
        let mut failed = None;
        let mut stopped = false;
        let mut passed = held_from;
        let seal = self.seal;
        self.visit_frames(p, from, to, |offset, run, f, entry| {
            if skip_markers && control_marker(f).is_some() {
                passed = offset + 1;
                return true;
            }
            if out.len() >= max_msgs
                || ((strict || !out.is_empty())
                    && bytes.saturating_add(f.payload.len()) > max_bytes)
            {
                stopped = true;
                return false;
            }
            bytes = bytes.saturating_add(f.payload.len());
            // Share the cached entry's bytes; frames of the entry being planned are copied.
            let payload = match entry {
                _ if f.encrypted => match open_payload(seal, p.id(), offset, f) {
                    Ok(b) => b,
                    Err(e) => {
                        failed = Some(e);
                        stopped = true;
                        return false;
                    }
                },
                Some(e) => e.slice_ref(f.payload),
                None => Bytes::copy_from_slice(f.payload),
            };
            passed = offset + 1;
            out.push(StoredMessage {
                offset,
                id: f.id,
                trace: f.trace,
                txn: f.txn.to_string(),
                producer: f.producer.map(str::to_string),
                payload,
                created_us: run.created_us,
            });
            true
        })?;
        if !stopped {
            // Nothing stopped the walk: it passed everything that exists below `to`.
            passed = passed.max(to.min(p.next_offset));
        }
        // A payload that does not open fails only when it is the first of the range: the
        // messages before it are served, and the next read starts at it.
        match failed {
            Some(e) if out.is_empty() && !strict => Err(e),
            _ => Ok((out, passed)),
        }
    }

    /// The last offset of `from..to` an HTTP reader may deliver (see [`Self::read_visible`]),
    /// walking back over hidden runs at once (`hidden_start(o)`: the first offset of the
    /// hidden run holding `o`, `KafkaTxns::hidden_run_start`) and over control markers one
    /// frame each.
    pub fn last_visible(
        &mut self,
        p: &Partition,
        from: u64,
        to: u64,
        hidden_start: impl Fn(u64) -> Option<u64>,
    ) -> Result<Option<u64>, ReadError> {
        let mut o = to.min(p.next_offset);
        while o > from {
            let at = o - 1;
            if let Some(start) = hidden_start(at) {
                o = start.max(from);
                continue;
            }
            let mut marker = false;
            self.visit_frames(p, at, o, |_, _, f, _| {
                marker = control_marker(f).is_some();
                false
            })?;
            if !marker {
                return Ok(Some(at));
            }
            o = at;
        }
        Ok(None)
    }

    pub fn read_one(
        &mut self,
        p: &Partition,
        offset: u64,
    ) -> Result<Option<StoredMessage>, ReadError> {
        if offset >= p.next_offset {
            return Ok(None);
        }
        Ok(self.read(p, offset, offset + 1)?.pop())
    }

    /// The id and transaction id of the message at `offset`, from the plain frame header: the
    /// payload is never opened (a dedup check must not cost a decryption, nor fail on one).
    pub fn frame_meta(
        &mut self,
        p: &Partition,
        offset: u64,
    ) -> Result<Option<([u8; 16], String)>, ReadError> {
        if offset >= p.next_offset {
            return Ok(None);
        }
        let mut found = None;
        self.visit_frames(p, offset, offset + 1, |_, _, f, _| {
            found = Some((f.id, f.txn.to_string()));
            false
        })?;
        Ok(found)
    }

    /// Whether the message at `offset` carries transaction id `txn` (no copies made).
    pub fn txn_is(&mut self, p: &Partition, offset: u64, txn: &str) -> bool {
        if offset >= p.next_offset {
            return false;
        }
        let mut found = false;
        let visited = self.visit_frames(p, offset, offset + 1, |_, _, f, _| {
            found = f.txn == txn;
            false
        });
        visited.is_ok() && found
    }

    /// The first offset in `from..to` whose message carries `txn`.
    pub fn find_txn(&mut self, p: &Partition, from: u64, to: u64, txn: &str) -> Option<u64> {
        let mut found = None;
        self.visit_frames(p, from, to, |off, _, f, _| {
            if f.txn == txn {
                found = Some(off);
                return false;
            }
            true
        })
        .ok()?;
        found
    }

    /// Calls `each(offset, run, frame, entry)` for messages `from..to` of a partition (clamped
    /// to what exists), in offset order; `entry` is the cached entry holding the frame, None for
    /// the entry being planned. `each` returns whether to go on.
    fn visit_frames(
        &mut self,
        p: &Partition,
        from: u64,
        to: u64,
        mut each: impl FnMut(u64, &Run, &FrameRef<'_>, Option<&Bytes>) -> bool,
    ) -> Result<(), ReadError> {
        let to = to.min(p.next_offset);
        // Offsets below the first run were forgotten with their lost log records: none to read.
        let mut off = from.max(p.low_offset());
        // The run holding `off` is the last starting at or below it (`Partition::run_of`),
        // found by one walk from the first such run: `run_of` a run would decode up to a
        // sealed block's 128 runs for each (session 35).
        let first = p.runs.partition_point(|r| r.base_offset <= off);
        let mut runs = p.runs.iter_from(first.saturating_sub(1)).peekable();
        let mut held: Option<Run> = None;
        while off < to {
            while let Some(r) = runs.next_if(|r| r.base_offset <= off) {
                held = Some(r);
            }
            let run = held
                .filter(|r| off < r.base_offset + u64::from(r.count))
                .ok_or(ReadError::NoRun {
                    offset: off,
                    partition: p.id(),
                })?;
            let run_end = (run.base_offset + u64::from(run.count)).min(to);
            let holder = if run.index == PENDING_INDEX {
                None
            } else {
                Some(self.entry(run.index)?)
            };
            let buf: &[u8] = holder.as_deref().unwrap_or(self.pending);
            let start = buf
                .get(run.pos as usize..)
                .ok_or(ReadError::PastEnd { pos: run.pos })?;
            let mut rest = skip_frames(start, off - run.base_offset)?;
            while off < run_end {
                let (f, used) = read_frame(rest)?;
                if !each(off, &run, &f, holder.as_ref()) {
                    return Ok(());
                }
                rest = &rest[used..];
                off += 1;
            }
        }
        Ok(())
    }
}
