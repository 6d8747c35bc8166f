//! The id file format, encoder and decoder side by side so they cannot drift apart.
//! docs/storage-format.md ("Id files") is the byte-level description of this module.
//!
//! A file is 4 KiB blocks, each ending in the CRC32C of its first 4092 bytes: block 0 is the
//! header, blocks 1.. hold (key, offset) pairs sorted ascending, 255 per block but the last.

pub(crate) const BLOCK: usize = 4096;
const CRC_AT: usize = BLOCK - 4;
pub(crate) const MAGIC: [u8; 4] = *b"QIDX";
pub(crate) const VERSION: u8 = 1;
pub(crate) const PAIR: usize = 16;
pub(crate) const PAIRS_PER_BLOCK: usize = 255;
const COUNT_AT: usize = PAIRS_PER_BLOCK * PAIR;
/// A file of more pairs than this would be over 4 PiB: a header claiming more is damaged, and
/// the bound keeps every size computed from it far from overflow.
pub(crate) const MAX_PAIRS: u64 = 1 << 48;
/// Marks `source` as a merge number (high bit set) rather than a segment's first index.
pub(crate) const MERGED_BIT: u64 = 1 << 63;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub pairs: u64,
    pub generation: u64,
    /// The first log index of the segment the pairs come from, or `MERGED_BIT | n` for the
    /// generation's n-th merged file.
    pub source: u64,
}

fn seal(block: &mut [u8; BLOCK]) {
    let crc = crc32c::crc32c(&block[..CRC_AT]);
    block[CRC_AT..].copy_from_slice(&crc.to_le_bytes());
}

fn check_crc(block: &[u8; BLOCK]) -> Result<(), String> {
    let want = le_u32(&block[CRC_AT..]);
    let have = crc32c::crc32c(&block[..CRC_AT]);
    if want != have {
        return Err(format!(
            "CRC32C {have:#010x} does not match the stored {want:#010x}"
        ));
    }
    Ok(())
}

fn le_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_le_bytes(a)
}

fn le_u32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    u32::from_le_bytes(a)
}

/// Data blocks a file of `pairs` pairs has.
pub(crate) fn data_blocks(pairs: u64) -> u64 {
    pairs.div_ceil(PAIRS_PER_BLOCK as u64)
}

/// The exact length of a file of `pairs` pairs (`pairs <= MAX_PAIRS`).
pub(crate) fn file_len(pairs: u64) -> u64 {
    (1 + data_blocks(pairs)) * BLOCK as u64
}

/// Pairs data block `i` (0-based, after the header) of a file of `pairs` pairs holds.
pub(crate) fn pairs_in_block(pairs: u64, i: u64) -> usize {
    let before = i * PAIRS_PER_BLOCK as u64;
    pairs.saturating_sub(before).min(PAIRS_PER_BLOCK as u64) as usize
}

pub(crate) fn encode_header(h: Header) -> [u8; BLOCK] {
    let mut b = [0u8; BLOCK];
    b[0..4].copy_from_slice(&MAGIC);
    b[4] = VERSION;
    b[8..16].copy_from_slice(&h.pairs.to_le_bytes());
    b[16..24].copy_from_slice(&h.generation.to_le_bytes());
    b[24..32].copy_from_slice(&h.source.to_le_bytes());
    seal(&mut b);
    b
}

pub(crate) fn decode_header(b: &[u8; BLOCK]) -> Result<Header, String> {
    check_crc(b)?;
    if b[0..4] != MAGIC {
        return Err("bad magic".to_owned());
    }
    if b[4] != VERSION {
        return Err(format!(
            "format version {}; this build reads only {VERSION}",
            b[4]
        ));
    }
    if b[5..8] != [0; 3] || b[32..CRC_AT].iter().any(|&x| x != 0) {
        return Err("reserved header bytes are not zero".to_owned());
    }
    let h = Header {
        pairs: le_u64(&b[8..16]),
        generation: le_u64(&b[16..24]),
        source: le_u64(&b[24..32]),
    };
    if h.pairs > MAX_PAIRS {
        return Err(format!("claims {} pairs, more than {MAX_PAIRS}", h.pairs));
    }
    Ok(h)
}

/// Encodes up to 255 sorted pairs as one data block.
pub(crate) fn encode_block(pairs: &[(u64, u64)]) -> [u8; BLOCK] {
    debug_assert!(!pairs.is_empty() && pairs.len() <= PAIRS_PER_BLOCK);
    let mut b = [0u8; BLOCK];
    for (i, (k, o)) in pairs.iter().enumerate() {
        b[i * PAIR..i * PAIR + 8].copy_from_slice(&k.to_le_bytes());
        b[i * PAIR + 8..i * PAIR + 16].copy_from_slice(&o.to_le_bytes());
    }
    b[COUNT_AT..COUNT_AT + 2].copy_from_slice(&(pairs.len() as u16).to_le_bytes());
    seal(&mut b);
    b
}

/// Decodes a data block that must hold `expected` pairs, in order, into `out` (cleared first).
pub(crate) fn decode_block(
    b: &[u8; BLOCK],
    expected: usize,
    out: &mut Vec<(u64, u64)>,
) -> Result<(), String> {
    out.clear();
    check_crc(b)?;
    let count = usize::from(u16::from_le_bytes([b[COUNT_AT], b[COUNT_AT + 1]]));
    if count != expected {
        return Err(format!(
            "holds {count} pairs, the header implies {expected}"
        ));
    }
    if b[count * PAIR..COUNT_AT].iter().any(|&x| x != 0)
        || b[COUNT_AT + 2..CRC_AT].iter().any(|&x| x != 0)
    {
        return Err("unused bytes are not zero".to_owned());
    }
    for i in 0..count {
        let pair = (le_u64(&b[i * PAIR..]), le_u64(&b[i * PAIR + 8..]));
        if out.last().is_some_and(|last| *last > pair) {
            return Err(format!("pair {i} is out of order"));
        }
        out.push(pair);
    }
    Ok(())
}

/// What an id file holds the pairs of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum IdSource {
    /// The segment whose first log index this is.
    Segment(u64),
    /// The n-th merge of the generation's files.
    Merged(u64),
}

impl IdSource {
    pub(crate) fn to_field(self) -> Option<u64> {
        match self {
            IdSource::Segment(i) if i & MERGED_BIT == 0 => Some(i),
            IdSource::Merged(n) if n & MERGED_BIT == 0 => Some(n | MERGED_BIT),
            _ => None,
        }
    }

    pub(crate) fn from_field(v: u64) -> IdSource {
        if v & MERGED_BIT == 0 {
            IdSource::Segment(v)
        } else {
            IdSource::Merged(v & !MERGED_BIT)
        }
    }
}

/// `g<generation>-s<first index>.qidx` for a segment's file, `g<generation>-m<n>.qidx` for the
/// generation's n-th merged file; 20 digits each, so names sort by generation. None for a
/// source number of 2^63 or more (log indexes never get there).
pub fn id_file_name(generation: u64, source: IdSource) -> Option<String> {
    source.to_field()?;
    Some(match source {
        IdSource::Segment(i) => format!("g{generation:020}-s{i:020}.qidx"),
        IdSource::Merged(n) => format!("g{generation:020}-m{n:020}.qidx"),
    })
}

fn digits20(s: &str) -> Option<u64> {
    if s.len() != 20 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// (generation, source) of an id file name, None for any other name.
pub fn parse_id_file_name(name: &str) -> Option<(u64, IdSource)> {
    let rest = name.strip_prefix('g')?.strip_suffix(".qidx")?;
    let (generation, source) = rest.split_once('-')?;
    let generation = digits20(generation)?;
    let source = if let Some(n) = source.strip_prefix('m') {
        IdSource::Merged(digits20(n)?)
    } else {
        IdSource::Segment(digits20(source.strip_prefix('s')?)?)
    };
    source.to_field()?;
    Some((generation, source))
}
