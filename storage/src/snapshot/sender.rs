//! The sending side: the stream of a durable checkpoint generation and the records its runs
//! point at, read at any offset, never held whole (docs/storage-format.md "Raft snapshot").

use std::io::{self, Read, Seek, SeekFrom};
use std::sync::Arc;

use super::header::SnapshotHeader;
use super::ids_part::ENTRY_HEAD;
use super::sender_ids::{open_id_files, IdLinks};
use crate::backend::IoBackend;
use crate::log::{FloorLease, RecordSpan};
use crate::{SegmentLog, StateStore, StateView, StorageError};

/// One snapshot stream: header, the generation's state (a short redb read per chunk), then
/// records `F..=A` read from the segments, which its floor lease keeps on disk. Dropping it
/// ends the lease.
pub struct SnapshotSource {
    head: SnapshotHeader,
    head_bytes: Vec<u8>,
    state: StateView,
    /// The records' spans, each with the stream offset it starts at.
    spans: Vec<(u64, RecordSpan)>,
    /// The id files (version 2), each with the stream offset its entry head starts at.
    ids: Vec<u64>,
    links: Option<IdLinks>,
    /// For `Read` and `Seek`.
    pos: u64,
    /// Held, never read: its drop ends the lease.
    _lease: Option<FloorLease>,
}

impl SnapshotSource {
    /// Opens the stream of the newest streamable generation at `applied_index`, carrying
    /// records `F..=applied_index` where `F` is the run floor recorded with it (`A + 1`: none).
    /// Reads the generation's headers and first chunk only: the state is verified against its
    /// CRC32C as it is streamed. The lease is taken before any record is located; the log must
    /// hold every record and record `A` the generation's term.
    pub fn open(
        store: &Arc<StateStore>,
        log: &SegmentLog,
        applied_index: u64,
    ) -> Result<SnapshotSource, StorageError> {
        Self::open_with_ids(store, log, applied_index, None)
    }

    /// As `open`, and with `ids` (the node's `ids/`) the stream carries every complete id
    /// file there after the records (version 2; version 1 when there is none). The files are
    /// opened after the checkpoint's header is read: an id that left the table before the
    /// checkpoint was taken is in a file made durable before that (docs/storage-format.md
    /// "The id files in the stream").
    pub fn open_with_ids(
        store: &Arc<StateStore>,
        log: &SegmentLog,
        applied_index: u64,
        ids: Option<Arc<dyn IoBackend>>,
    ) -> Result<SnapshotSource, StorageError> {
        let unavailable = |reason: String| StorageError::SnapshotUnavailable { reason };
        let state = StateStore::state_view(store, applied_index)?;
        let floor = state.first_record;
        let carries = floor <= applied_index;
        let lease = carries.then(|| log.lease_floor(floor)).transpose()?;
        let (spans, records_len) = if carries {
            if log.term_of(applied_index) != Some(state.applied_term) {
                return Err(unavailable(format!(
                    "the log holds term {:?} at index {applied_index}, the checkpoint term {}",
                    log.term_of(applied_index),
                    state.applied_term
                )));
            }
            log.record_spans(floor, applied_index).ok_or_else(|| {
                unavailable(format!(
                    "the log does not hold every record {floor}..={applied_index}"
                ))
            })?
        } else {
            (Vec::new(), 0)
        };
        let links = ids.map(open_id_files).transpose()?;
        let files = links.as_ref().map_or(&[][..], |l| &l.entries[..]);
        let ids_len = files
            .iter()
            .try_fold(0u64, |sum, f| sum.checked_add(f.stream_len()))
            .ok_or_else(|| unavailable("the id files' sizes overflow".into()))?;
        let head = SnapshotHeader {
            applied_index,
            applied_term: state.applied_term,
            first_record: floor,
            state_len: state.state_len,
            records_len,
            state_crc: state.state_crc,
            ids_len,
            ids_files: u32::try_from(files.len())
                .map_err(|_| unavailable("too many id files".into()))?,
        };
        // What the receiver would refuse is not sent: a state, log or ids part past the caps.
        SnapshotHeader::decode(&head.encode()).map_err(unavailable)?;
        let mut at = head.header_len() as u64 + head.state_len;
        let spans = spans
            .into_iter()
            .map(|s| {
                let start = at;
                at += s.len;
                (start, s)
            })
            .collect();
        let ids = files
            .iter()
            .map(|f| {
                let start = at;
                at += f.stream_len();
                start
            })
            .collect();
        Ok(SnapshotSource {
            head,
            head_bytes: head.encode(),
            state,
            spans,
            ids,
            links,
            pos: 0,
            _lease: lease,
        })
    }

    /// The `raft/membership` bytes recorded with the generation, if any (the Raft crate
    /// decides whether they name the membership at `A`).
    pub fn membership(&self) -> Option<&[u8]> {
        self.state.membership.as_deref()
    }

    pub fn header(&self) -> &SnapshotHeader {
        &self.head
    }

    /// Fills `buf` from stream offset `offset` as far as the stream goes; the count (0 at or
    /// past the end).
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, StorageError> {
        let mut done = 0;
        let end = self.head.stream_len();
        while done < buf.len() {
            let at = offset + done as u64;
            if at >= end {
                break;
            }
            let out = &mut buf[done..];
            let head_len = self.head_bytes.len() as u64;
            let n = if at < head_len {
                let from = at as usize;
                let n = out.len().min(self.head_bytes.len() - from);
                out[..n].copy_from_slice(&self.head_bytes[from..from + n]);
                n
            } else if at < head_len + self.head.state_len {
                self.state.read_at(at - head_len, out)?
            } else if at < self.head.ids_start() {
                // The state verifies whole before anything after it is sent.
                self.state.verify()?;
                self.read_records(at, out)?
            } else {
                self.state.verify()?;
                self.read_ids(at, out)?
            };
            if n == 0 {
                return Err(StorageError::SnapshotUnavailable {
                    reason: format!("the stream ends early, at byte {at} of {end}"),
                });
            }
            done += n;
        }
        Ok(done)
    }

    fn read_records(&self, at: u64, out: &mut [u8]) -> Result<usize, StorageError> {
        let i = self.spans.partition_point(|(start, _)| *start <= at);
        let Some((start, span)) = i.checked_sub(1).map(|i| &self.spans[i]) else {
            return Ok(0);
        };
        let within = at - start;
        let n = (span.len - within).min(out.len() as u64) as usize;
        span.file
            .read_at(span.offset + within, &mut out[..n])
            .map_err(StorageError::io(
                "read a record for a snapshot from",
                &span.path,
            ))?;
        Ok(n)
    }
}

impl SnapshotSource {
    /// The id files' names in the stream, in order (tests and reports).
    pub fn id_file_names(&self) -> Vec<String> {
        self.links.as_ref().map_or_else(Vec::new, |l| {
            l.entries.iter().map(|f| f.name.clone()).collect()
        })
    }

    fn read_ids(&self, at: u64, out: &mut [u8]) -> Result<usize, StorageError> {
        let i = self.ids.partition_point(|start| *start <= at);
        let (Some(i), Some(links)) = (i.checked_sub(1), self.links.as_ref()) else {
            return Ok(0);
        };
        let (start, entry) = (self.ids[i], &links.entries[i]);
        let within = at - start;
        if within < ENTRY_HEAD as u64 {
            let from = within as usize;
            let n = out.len().min(ENTRY_HEAD - from);
            out[..n].copy_from_slice(&entry.head[from..from + n]);
            return Ok(n);
        }
        let in_file = within - ENTRY_HEAD as u64;
        let n = (entry.len.saturating_sub(in_file)).min(out.len() as u64) as usize;
        links
            .file(i)?
            .read_at(in_file, &mut out[..n])
            .map_err(|e| StorageError::SnapshotUnavailable {
                reason: format!("reading id file {} for a snapshot: {e}", entry.name),
            })?;
        Ok(n)
    }
}

impl Read for SnapshotSource {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.read_at(self.pos, buf).map_err(io::Error::other)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for SnapshotSource {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let base = match to {
            SeekFrom::Start(n) => Some(n),
            SeekFrom::End(d) => self.head.stream_len().checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos = base.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "seek before the stream's start",
            )
        })?;
        Ok(self.pos)
    }
}
