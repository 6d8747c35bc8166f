//! The receiver's running verdict on a snapshot stream, fed byte ranges in order. It holds a
//! few dozen bytes whatever the stream's size: the state and payloads are checked by running
//! CRCs, never buffered, and no length is trusted before it is checked.

use super::header::{header_len_of, SnapshotHeader, SNAPSHOT_HEADER_V2_LEN};
use super::ids_part::IdsCheck;
use crate::format::{check_len, le_u32, le_u64, record_len, LEN_FIELD};

/// Judges a header before anything past it is written: the free-space check.
pub type AdmitFn = dyn Fn(&SnapshotHeader) -> Result<(), String> + Send + Sync;

/// A record's fixed bytes: length prefix, CRC32C, index, term.
const RECORD_HEAD: usize = 24;

#[derive(Clone, Debug)]
pub(crate) struct StreamCheck {
    max_record_bytes: u32,
    /// Stream bytes judged so far.
    pos: u64,
    phase: Phase,
}

#[derive(Clone, Debug)]
enum Phase {
    Header {
        buf: [u8; SNAPSHOT_HEADER_V2_LEN],
    },
    State {
        head: SnapshotHeader,
        left: u64,
        crc: u32,
    },
    Records {
        head: SnapshotHeader,
        /// Bytes of `records_len` not yet seen.
        left: u64,
        next_index: u64,
        prev_term: u64,
        rec: RecordHead,
    },
    Ids {
        head: SnapshotHeader,
        ids: Box<IdsCheck>,
    },
    Done {
        head: SnapshotHeader,
    },
}

/// What follows the last record (or the state, when none is carried): the ids part of a
/// version-2 stream, or the end.
fn after_records(head: SnapshotHeader) -> Phase {
    if head.ids_files == 0 {
        Phase::Done { head }
    } else {
        Phase::Ids {
            head,
            ids: Box::new(IdsCheck::new(head.ids_len, head.ids_files)),
        }
    }
}

/// The record being read: its fixed bytes, then how much payload is still to come.
#[derive(Clone, Debug)]
struct RecordHead {
    buf: [u8; RECORD_HEAD],
    have: usize,
    payload_left: u64,
    crc: u32,
}

impl RecordHead {
    fn new() -> RecordHead {
        RecordHead {
            buf: [0; RECORD_HEAD],
            have: 0,
            payload_left: 0,
            crc: 0,
        }
    }
}

/// Where the stream went wrong and why.
pub(crate) struct Refusal {
    pub offset: u64,
    pub reason: String,
}

impl StreamCheck {
    pub fn new(max_record_bytes: u32) -> StreamCheck {
        StreamCheck {
            max_record_bytes,
            pos: 0,
            phase: Phase::Header {
                buf: [0; SNAPSHOT_HEADER_V2_LEN],
            },
        }
    }

    pub fn max_record_bytes(&self) -> u32 {
        self.max_record_bytes
    }

    pub fn pos(&self) -> u64 {
        self.pos
    }

    /// The header once the whole stream has been judged good.
    pub fn done(&self) -> Option<SnapshotHeader> {
        match self.phase {
            Phase::Done { head } => Some(head),
            _ => None,
        }
    }

    /// Judges the next bytes of the stream.
    pub fn feed(&mut self, mut data: &[u8], admit: &AdmitFn) -> Result<(), Refusal> {
        while !data.is_empty() {
            let n = self.step(data, admit).map_err(|reason| Refusal {
                offset: self.pos,
                reason,
            })?;
            self.pos += n as u64;
            data = &data[n..];
        }
        Ok(())
    }

    /// Consumes a prefix of `data` (at least one byte) and returns its length.
    fn step(&mut self, data: &[u8], admit: &AdmitFn) -> Result<usize, String> {
        let max_record = self.max_record_bytes;
        match &mut self.phase {
            Phase::Header { buf } => {
                let have = self.pos as usize;
                // The version (byte 4) tells the header's length: read up to it first.
                let want = if have < 5 {
                    5
                } else {
                    header_len_of(buf[4]).ok_or_else(|| {
                        SnapshotHeader::decode(&buf[..5])
                            .err()
                            .unwrap_or_else(|| "unknown header version".into())
                    })?
                };
                let n = data.len().min(want - have);
                buf[have..have + n].copy_from_slice(&data[..n]);
                if have + n == want && want > 5 {
                    let head = SnapshotHeader::decode(&buf[..want])?;
                    let most = head
                        .record_count()
                        .checked_mul(record_len(max_record as usize));
                    if most.is_some_and(|most| head.records_len > most) {
                        return Err(format!(
                            "records length {} is more than {} records of max_record_bytes {max_record} can take",
                            head.records_len,
                            head.record_count()
                        ));
                    }
                    admit(&head)?;
                    self.phase = Phase::State {
                        head,
                        left: head.state_len,
                        crc: 0,
                    };
                    self.settle();
                    self.state_verdict()?;
                }
                Ok(n)
            }
            Phase::State { left, crc, .. } => {
                let n = data.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
                *crc = crc32c::crc32c_append(*crc, &data[..n]);
                *left -= n as u64;
                self.settle();
                self.state_verdict()?;
                Ok(n)
            }
            Phase::Records {
                head,
                left,
                next_index,
                prev_term,
                rec,
            } => {
                if rec.have < RECORD_HEAD {
                    let n = data.len().min(RECORD_HEAD - rec.have);
                    if rec.have == 0 && *left < RECORD_HEAD as u64 {
                        return Err(format!(
                            "records length leaves {left} bytes for record {next_index}, less than \
                             a record's fixed {RECORD_HEAD}"
                        ));
                    }
                    rec.buf[rec.have..rec.have + n].copy_from_slice(&data[..n]);
                    rec.have += n;
                    *left -= n as u64;
                    if rec.have >= LEN_FIELD as usize && rec.have - n < LEN_FIELD as usize {
                        // The length prefix is complete: judge it before anything it frames.
                        let len = le_u32(&rec.buf);
                        let after_prefix = *left + (rec.have - LEN_FIELD as usize) as u64;
                        check_len(len, max_record, after_prefix)?;
                        rec.payload_left = u64::from(len) - (RECORD_HEAD as u64 - LEN_FIELD);
                    }
                    if rec.have == RECORD_HEAD {
                        let index = le_u64(&rec.buf[8..]);
                        let term = le_u64(&rec.buf[16..]);
                        if index != *next_index {
                            return Err(format!(
                                "record holds index {index} where {next_index} was expected"
                            ));
                        }
                        if term < *prev_term || term > head.applied_term {
                            return Err(format!(
                                "record {index} has term {term}, outside {prev_term}..={} (terms \
                                 never fall and end at the applied term)",
                                head.applied_term
                            ));
                        }
                        *prev_term = term;
                        rec.crc = crc32c::crc32c(&rec.buf[8..]);
                    }
                    self.record_verdict()?;
                    return Ok(n);
                }
                let n = data
                    .len()
                    .min(usize::try_from(rec.payload_left).unwrap_or(usize::MAX));
                rec.crc = crc32c::crc32c_append(rec.crc, &data[..n]);
                rec.payload_left -= n as u64;
                *left -= n as u64;
                self.record_verdict()?;
                Ok(n)
            }
            Phase::Ids { head, ids } => {
                let n = ids.step(data)?;
                if ids.is_done() {
                    self.phase = Phase::Done { head: *head };
                }
                Ok(n)
            }
            Phase::Done { head } => Err(format!(
                "a byte follows record {} (the stream is {} bytes, its end)",
                head.applied_index,
                head.stream_len()
            )),
        }
    }

    /// A state with nothing left to read moves on (to the records, or to the end).
    fn settle(&mut self) {
        if let Phase::State { head, left: 0, crc } = self.phase {
            if crc != head.state_crc {
                return;
            }
            self.phase = if head.record_count() == 0 {
                after_records(head)
            } else {
                Phase::Records {
                    head,
                    left: head.records_len,
                    next_index: head.first_record,
                    prev_term: 0,
                    rec: RecordHead::new(),
                }
            };
        }
    }

    /// A state read whole whose CRC32C differs is refused.
    fn state_verdict(&self) -> Result<(), String> {
        match &self.phase {
            Phase::State { head, left: 0, crc } => Err(format!(
                "state crc32c {crc:#010x} does not match the header's {:#010x}",
                head.state_crc
            )),
            _ => Ok(()),
        }
    }

    /// A record read whole is checked against its CRC32C; the last one ends the stream.
    fn record_verdict(&mut self) -> Result<(), String> {
        let Phase::Records {
            head,
            left,
            next_index,
            rec,
            ..
        } = &mut self.phase
        else {
            return Ok(());
        };
        if rec.have < RECORD_HEAD || rec.payload_left > 0 {
            return Ok(());
        }
        let stored = le_u32(&rec.buf[4..]);
        if stored != rec.crc {
            return Err(format!(
                "record {next_index}: crc32c mismatch: stored {stored:#010x}, computed {:#010x}",
                rec.crc
            ));
        }
        if *next_index == head.applied_index {
            if *left != 0 {
                return Err(format!(
                    "records length leaves {left} bytes after record {next_index}, the last"
                ));
            }
            if le_u64(&rec.buf[16..]) != head.applied_term {
                return Err(format!(
                    "record {next_index} has term {}, not the applied term {}",
                    le_u64(&rec.buf[16..]),
                    head.applied_term
                ));
            }
            let head = *head;
            self.phase = after_records(head);
        } else {
            *next_index += 1;
            *rec = RecordHead::new();
        }
        Ok(())
    }
}
