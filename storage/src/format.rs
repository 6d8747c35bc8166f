//! The segment file format, reader and writer side by side so they cannot drift apart.
//! docs/storage-format.md ("Segment files") is the byte-level description of this module.

/// Segment header: magic, version, 3 reserved zero bytes, first index (u64 LE).
pub(crate) const SEGMENT_HEADER_LEN: u64 = 16;
pub(crate) const MAGIC: [u8; 4] = *b"QSEG";
pub(crate) const FORMAT_VERSION: u8 = 1;

/// The `len` prefix itself.
pub(crate) const LEN_FIELD: u64 = 4;
/// Bytes counted by `len` besides the payload: crc32c, index, term.
pub(crate) const RECORD_FIXED: u32 = 4 + 8 + 8;
/// Largest payload a u32 `len` can frame.
pub(crate) const MAX_PAYLOAD_LIMIT: u32 = u32::MAX - RECORD_FIXED;

/// The highest index a log holds. `u64::MAX` is reserved so that every caller's `index + 1`
/// and exclusive range end (`..last + 1`) stays in range: the raft log store, the
/// supervisor's cut of an unsynced tail, openraft itself.
pub const HIGHEST_INDEX: u64 = u64::MAX - 1;

/// The index after `index`, or None when `index` is the highest a log holds (or past it).
pub(crate) fn next_index(index: u64) -> Option<u64> {
    index.checked_add(1).filter(|&n| n <= HIGHEST_INDEX)
}

const SUFFIX: &str = ".qlog";
const PREFIX: &str = "seg-";

/// The file name of the segment whose first record has index `first_index`.
pub fn segment_name(first_index: u64) -> String {
    format!("{PREFIX}{first_index:020}{SUFFIX}")
}

/// The first index a segment name claims, or None for files that are not segments.
pub(crate) fn parse_segment_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

pub(crate) fn encode_header(first_index: u64) -> [u8; SEGMENT_HEADER_LEN as usize] {
    let mut h = [0u8; SEGMENT_HEADER_LEN as usize];
    h[0..4].copy_from_slice(&MAGIC);
    h[4] = FORMAT_VERSION;
    h[8..16].copy_from_slice(&first_index.to_le_bytes());
    h
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum HeaderProblem {
    /// Shorter than a header or all zeros: a crash while the segment was being created.
    Torn,
    BadMagic,
    UnsupportedVersion(u8),
    ReservedNotZero,
}

/// Decodes a header read from the start of a file (`bytes` may be shorter than 16 if the file
/// is).
pub(crate) fn decode_header(bytes: &[u8]) -> Result<u64, HeaderProblem> {
    if bytes.len() < SEGMENT_HEADER_LEN as usize || bytes.iter().all(|&b| b == 0) {
        return Err(HeaderProblem::Torn);
    }
    if bytes[0..4] != MAGIC {
        return Err(HeaderProblem::BadMagic);
    }
    if bytes[4] != FORMAT_VERSION {
        return Err(HeaderProblem::UnsupportedVersion(bytes[4]));
    }
    if bytes[5..8] != [0, 0, 0] {
        return Err(HeaderProblem::ReservedNotZero);
    }
    Ok(le_u64(&bytes[8..16]))
}

/// Total on-disk size of a record with this payload length.
pub(crate) fn record_len(payload_len: usize) -> u64 {
    LEN_FIELD + u64::from(RECORD_FIXED) + payload_len as u64
}

/// Appends one encoded record to `out`. The caller has checked `payload.len() <= MAX_PAYLOAD_LIMIT`.
pub(crate) fn encode_record(out: &mut Vec<u8>, index: u64, term: u64, payload: &[u8]) {
    let len = RECORD_FIXED as usize + payload.len();
    out.reserve(LEN_FIELD as usize + len);
    out.extend_from_slice(&(len as u32).to_le_bytes());
    let crc_at = out.len();
    out.extend_from_slice(&[0; 4]);
    let body_at = out.len();
    out.extend_from_slice(&index.to_le_bytes());
    out.extend_from_slice(&term.to_le_bytes());
    out.extend_from_slice(payload);
    let crc = crc32c::crc32c(&out[body_at..]);
    out[crc_at..crc_at + 4].copy_from_slice(&crc.to_le_bytes());
}

/// Checks a length prefix before anything is allocated for the record behind it. `remaining` is
/// the number of file bytes after the prefix. Returns the byte count `len` frames.
pub(crate) fn check_len(len: u32, max_payload: u32, remaining: u64) -> Result<u32, String> {
    if len < RECORD_FIXED {
        return Err(format!(
            "length prefix {len} is below the minimum of {RECORD_FIXED}"
        ));
    }
    if len - RECORD_FIXED > max_payload {
        return Err(format!(
            "length prefix {len} frames a payload of {} bytes, above max_record_bytes {max_payload}",
            len - RECORD_FIXED
        ));
    }
    if u64::from(len) > remaining {
        return Err(format!(
            "length prefix {len} runs past the end of the file ({remaining} bytes left)"
        ));
    }
    Ok(len)
}

pub(crate) struct Record<'a> {
    pub index: u64,
    pub term: u64,
    pub payload: &'a [u8],
}

/// Verifies and splits the `len` bytes after the prefix (`crc | index | term | payload`).
pub(crate) fn decode_body(body: &[u8]) -> Result<Record<'_>, String> {
    if body.len() < RECORD_FIXED as usize {
        return Err(format!("record body of {} bytes is too short", body.len()));
    }
    let stored = le_u32(&body[0..4]);
    let actual = crc32c::crc32c(&body[4..]);
    if stored != actual {
        return Err(format!(
            "crc32c mismatch: stored {stored:#010x}, computed {actual:#010x}"
        ));
    }
    Ok(Record {
        index: le_u64(&body[4..12]),
        term: le_u64(&body[12..20]),
        payload: &body[20..],
    })
}

pub(crate) fn le_u32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    u32::from_le_bytes(a)
}

pub(crate) fn le_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_le_bytes(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_round_trips_and_rejects_strangers() {
        assert_eq!(segment_name(42), "seg-00000000000000000042.qlog");
        assert_eq!(parse_segment_name(&segment_name(u64::MAX)), Some(u64::MAX));
        assert_eq!(parse_segment_name("seg-42.qlog"), None);
        assert_eq!(parse_segment_name("seg-0000000000000000004x.qlog"), None);
        assert_eq!(parse_segment_name("state.redb"), None);
    }

    #[test]
    fn header_round_trips_and_names_its_problem() {
        let h = encode_header(7);
        assert_eq!(decode_header(&h), Ok(7));
        assert_eq!(decode_header(&h[..10]), Err(HeaderProblem::Torn));
        assert_eq!(decode_header(&[0; 16]), Err(HeaderProblem::Torn));
        let mut bad = h;
        bad[4] = 9;
        assert_eq!(
            decode_header(&bad),
            Err(HeaderProblem::UnsupportedVersion(9))
        );
        bad = h;
        bad[0] = b'X';
        assert_eq!(decode_header(&bad), Err(HeaderProblem::BadMagic));
        bad = h;
        bad[6] = 1;
        assert_eq!(decode_header(&bad), Err(HeaderProblem::ReservedNotZero));
    }

    #[test]
    fn record_round_trips_and_detects_a_flipped_bit() {
        let mut buf = Vec::new();
        encode_record(&mut buf, 5, 2, b"hello");
        assert_eq!(buf.len() as u64, record_len(5));
        let len = le_u32(&buf);
        assert_eq!(check_len(len, 100, buf.len() as u64 - 4), Ok(len));
        let r = decode_body(&buf[4..]).unwrap();
        assert_eq!((r.index, r.term, r.payload), (5, 2, &b"hello"[..]));
        buf[10] ^= 1;
        assert!(decode_body(&buf[4..]).is_err());
    }

    #[test]
    fn undersize_length_prefix_is_rejected() {
        assert!(check_len(RECORD_FIXED - 1, 100, 1000)
            .unwrap_err()
            .contains("below"));
    }

    #[test]
    fn oversize_length_prefix_is_rejected() {
        assert!(check_len(RECORD_FIXED + 101, 100, 1000)
            .unwrap_err()
            .contains("max_record_bytes"));
    }

    #[test]
    fn length_prefix_past_eof_is_rejected() {
        assert!(check_len(RECORD_FIXED + 10, 100, 25)
            .unwrap_err()
            .contains("past the end"));
    }
}
