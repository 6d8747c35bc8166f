//! Finding valid records past damage in a segment, where the framing is lost and every byte
//! offset could start a record.
//!
//! A CRC32C over a whole candidate record is the expensive check (up to `max_record_bytes`),
//! so it runs last, after checks that cost a few comparisons each and that real records always
//! pass:
//! 1. the length prefix frames a record that fits the file and `max_record_bytes`;
//! 2. the index continues the run: at least the next index expected, and at most that plus one
//!    per `MIN_RECORD` bytes since the last place a record was known to start;
//! 3. the term is at least the last verified record's (Raft terms never decrease in a log);
//! 4. the record is followed by the end of the file, a tail too short for a record, a
//!    zero-filled (never written) header, or a header that passes 1–3 with the next index.
//!
//! Without them a damaged segment whose payloads hold small integers (engine entries do)
//! offers a candidate every few bytes, each CRC'd over kilobytes: hours for a large file.
//! The price of check 4: a valid record directly followed by a second damaged record is not
//! counted. The counts only report what is still readable past the damage and prove that a
//! later segment was whole once; the verdict never depends on one such record alone.

use super::scan::Window;
use crate::format::{decode_body, le_u32, le_u64, LEN_FIELD, RECORD_FIXED};
use crate::StorageError;

/// The smallest record on disk: length prefix plus the fixed fields.
pub(crate) const MIN_RECORD: u64 = LEN_FIELD + RECORD_FIXED as u64;

/// Valid records found past the first problem of a file.
#[derive(Default, Clone, Copy)]
pub(crate) struct After {
    pub count: u64,
    pub last_index: Option<u64>,
}

/// Where the framing was lost: the record that should start at `offset` holds `index`.
#[derive(Clone, Copy)]
pub(crate) struct Break {
    pub offset: u64,
    pub index: u64,
    /// Term of the last verified record before the break (0 if none).
    pub min_term: u64,
}

#[cfg(test)]
thread_local! {
    /// CRC32C computations of candidates on this thread, so a test can bound them.
    pub(crate) static CANDIDATE_CRCS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// One candidate header's fields, read without allocating.
struct Header {
    len: u32,
    index: u64,
    term: u64,
}

impl Header {
    /// The header at `off`, through the window: the scan moves forward byte by byte over
    /// damage, so reading a whole window at a time keeps it to one pread per window instead of
    /// one per offset. The caller guarantees `off + MIN_RECORD` is within the file.
    fn read(window: &mut Window<'_>, off: u64) -> Result<Header, StorageError> {
        Ok(Header::parse(window.get(off, MIN_RECORD)?))
    }

    /// The header at `off` without moving the window (the look-ahead of check 4, which would
    /// otherwise pull the window away from the scan).
    fn peek(window: &mut Window<'_>, off: u64) -> Result<Header, StorageError> {
        let mut h = [0u8; MIN_RECORD as usize];
        window.copy(off, &mut h)?;
        Ok(Header::parse(&h))
    }

    fn parse(h: &[u8]) -> Header {
        Header {
            len: le_u32(&h[0..4]),
            index: le_u64(&h[8..16]),
            term: le_u64(&h[16..24]),
        }
    }

    fn is_zero(&self) -> bool {
        self.len == 0 && self.index == 0 && self.term == 0
    }

    /// Checks 1–3 of the module doc for a header at `off`, `remaining` file bytes after its
    /// length prefix, given the run so far.
    fn plausible(&self, remaining: u64, max_payload: u32, lo: u64, hi: u64, min_term: u64) -> bool {
        self.len >= RECORD_FIXED
            && self.len - RECORD_FIXED <= max_payload
            && u64::from(self.len) <= remaining
            && (lo..=hi).contains(&self.index)
            && self.term >= min_term
    }
}

/// Counts the valid records of a file from `from` on, given the break before it.
pub(crate) fn count_after(
    window: &mut Window<'_>,
    file_len: u64,
    from: u64,
    brk: Break,
    max_payload: u32,
) -> Result<After, StorageError> {
    let mut after = After::default();
    // `base` is where a record holding index `lo` would start if nothing in between was lost.
    let (mut base, mut lo, mut min_term) = (brk.offset, brk.index, brk.min_term);
    let mut off = from;
    while file_len.saturating_sub(off) >= MIN_RECORD {
        let h = Header::read(window, off)?;
        let hi = lo.saturating_add((off - base) / MIN_RECORD);
        let remaining = file_len - off - LEN_FIELD;
        if !h.plausible(remaining, max_payload, lo, hi, min_term)
            || !followed_plausibly(window, file_len, off, &h, max_payload)?
        {
            off += 1;
            continue;
        }
        #[cfg(test)]
        CANDIDATE_CRCS.with(|c| c.set(c.get() + 1));
        let framed = u64::from(h.len);
        if decode_body(window.get(off + LEN_FIELD, framed)?).is_err() {
            off += 1;
            continue;
        }
        after.count += 1;
        after.last_index = Some(h.index);
        off += LEN_FIELD + framed;
        base = off;
        lo = h.index.saturating_add(1);
        min_term = h.term;
    }
    Ok(after)
}

/// Check 4 of the module doc for the candidate `h` at `off`.
fn followed_plausibly(
    window: &mut Window<'_>,
    file_len: u64,
    off: u64,
    h: &Header,
    max_payload: u32,
) -> Result<bool, StorageError> {
    let next = off + LEN_FIELD + u64::from(h.len);
    if file_len.saturating_sub(next) < MIN_RECORD {
        return Ok(true);
    }
    let n = Header::peek(window, next)?;
    let want = h.index.saturating_add(1);
    Ok(n.is_zero() || n.plausible(file_len - next - LEN_FIELD, max_payload, want, want, h.term))
}
