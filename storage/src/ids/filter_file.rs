//! A closed window-filter generation's bits, persisted beside the id files (review s27
//! "Restart"): a start reads these instead of every id of the window. docs/storage-format.md
//! ("Filter files") has the layout. A file is written whole under a temporary name, made
//! durable, then renamed, so a name always holds a complete file; a damaged one is refused
//! (`CorruptIdFile`) and its generation rebuilt from the id files by the caller, never used.

use crate::backend::IoBackend;
use crate::StorageError;

const MAGIC_FILTER: &[u8; 4] = b"QFLT";
const CRC_LEN: usize = 4;
/// Fixed header bytes before the bits.
pub const FILTER_HEADER: usize = 104;
/// The most 64-byte blocks a file may claim (1 TiB of bits, the filters' own bound).
const MAX_BLOCKS: u64 = 1 << 34;
const SUFFIX: &str = ".qflt";
const TMP_SUFFIX: &str = ".qflt.tmp";

/// "No predecessor" in `prev_epoch` / `prev_number`.
pub const NO_PREV: u64 = u64::MAX;

/// The name of a filter file: what `remove_before` and a start need without opening it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FilterName {
    pub first_bucket: u64,
    pub last_bucket: u64,
    pub epoch: u64,
    pub number: u64,
}

impl FilterName {
    pub fn file_name(&self) -> String {
        format!(
            "f{:020}-{:020}-{:020}-{:020}{SUFFIX}",
            self.first_bucket, self.last_bucket, self.epoch, self.number
        )
    }

    pub fn parse(name: &str) -> Option<FilterName> {
        let body = name.strip_prefix('f')?.strip_suffix(SUFFIX)?;
        let mut parts = body.split('-');
        let mut num = || -> Option<u64> {
            let p = parts.next()?;
            if p.len() != 20 || !p.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            p.parse().ok()
        };
        let (first_bucket, last_bucket, epoch, number) = (num()?, num()?, num()?, num()?);
        if parts.next().is_some() {
            return None;
        }
        Some(FilterName {
            first_bucket,
            last_bucket,
            epoch,
            number,
        })
    }
}

/// One generation's filter as persisted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilterFile {
    /// Who wrote it: the writing process's epoch and its generation number there.
    pub epoch: u64,
    pub number: u64,
    /// The generation before it in that ring (`NO_PREV`: none).
    pub prev_epoch: u64,
    pub prev_number: u64,
    pub first_bucket: u64,
    pub last_bucket: u64,
    pub opened_us: i64,
    pub last_us: i64,
    pub keys: u64,
    pub tag_us: i64,
    pub k: u32,
    /// The bits, 8 words per 64-byte block.
    pub words: Vec<u64>,
}

impl FilterFile {
    pub fn name(&self) -> FilterName {
        FilterName {
            first_bucket: self.first_bucket,
            last_bucket: self.last_bucket,
            epoch: self.epoch,
            number: self.number,
        }
    }

    fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(FILTER_HEADER + self.words.len() * 8 + CRC_LEN);
        b.extend_from_slice(MAGIC_FILTER);
        b.push(1);
        b.extend_from_slice(&[0; 3]);
        for v in [
            self.epoch,
            self.number,
            self.prev_epoch,
            self.prev_number,
            self.first_bucket,
            self.last_bucket,
            self.opened_us as u64,
            self.last_us as u64,
            self.keys,
            self.tag_us as u64,
        ] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&self.k.to_le_bytes());
        b.extend_from_slice(&[0; 4]);
        b.extend_from_slice(&((self.words.len() / 8) as u64).to_le_bytes());
        debug_assert_eq!(b.len(), FILTER_HEADER);
        for w in &self.words {
            b.extend_from_slice(&w.to_le_bytes());
        }
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

fn corrupt(backend: &dyn IoBackend, name: &str, reason: String) -> StorageError {
    StorageError::CorruptIdFile {
        path: backend.locate(name),
        block: 0,
        reason,
    }
}

/// Writes `f` durably: temporary name, data, `fdatasync`, rename, directory fsync.
pub(crate) fn save(backend: &dyn IoBackend, f: &FilterFile) -> Result<(), StorageError> {
    if !f.words.len().is_multiple_of(8) {
        return Err(StorageError::InvalidOptions {
            reason: format!(
                "{} filter words are not whole 64-byte blocks",
                f.words.len()
            ),
        });
    }
    let name = f.name().file_name();
    let tmp = format!("{}{TMP_SUFFIX}", name.trim_end_matches(SUFFIX));
    let file = backend
        .create(&tmp)
        .map_err(StorageError::io("create", backend.locate(&tmp)))?;
    let bytes = f.encode();
    file.write_at(0, &bytes)
        .map_err(StorageError::io("write", backend.locate(&tmp)))?;
    file.sync_data()
        .map_err(StorageError::io("fdatasync", backend.locate(&tmp)))?;
    drop(file);
    backend
        .rename(&tmp, &name)
        .map_err(StorageError::io("rename", backend.locate(&name)))?;
    backend
        .sync_dir()
        .map_err(StorageError::io("fsync the directory", backend.locate(".")))
}

/// Reads and checks the file of `name`: length, CRC, magic, version, zero bytes, and that
/// the header names what the file name does. Nothing is allocated beyond the file's length.
pub(crate) fn load(backend: &dyn IoBackend, name: FilterName) -> Result<FilterFile, StorageError> {
    let fname = name.file_name();
    let file = backend
        .open(&fname)
        .map_err(StorageError::io("open", backend.locate(&fname)))?;
    let len = file.len().map_err(StorageError::io(
        "read the length of",
        backend.locate(&fname),
    ))?;
    if len < (FILTER_HEADER + CRC_LEN) as u64 {
        return Err(corrupt(
            backend,
            &fname,
            format!("{len} bytes, shorter than its header"),
        ));
    }
    let mut head = [0u8; FILTER_HEADER];
    file.read_at(0, &mut head)
        .map_err(StorageError::io("read", backend.locate(&fname)))?;
    let blocks = u64_at(&head, 96);
    if blocks > MAX_BLOCKS || len != FILTER_HEADER as u64 + blocks * 64 + CRC_LEN as u64 {
        return Err(corrupt(
            backend,
            &fname,
            format!("{len} bytes do not hold the {blocks} blocks its header claims"),
        ));
    }
    let mut b = vec![0u8; len as usize];
    file.read_at(0, &mut b)
        .map_err(StorageError::io("read", backend.locate(&fname)))?;
    let body = len as usize - CRC_LEN;
    let have = crc32c::crc32c(&b[..body]);
    let want = u32::from_le_bytes([b[body], b[body + 1], b[body + 2], b[body + 3]]);
    if have != want {
        return Err(corrupt(
            backend,
            &fname,
            format!("CRC32C {have:#010x}, stored {want:#010x}"),
        ));
    }
    if &b[0..4] != MAGIC_FILTER || b[4] != 1 || b[5..8] != [0; 3] || b[92..96] != [0; 4] {
        return Err(corrupt(
            backend,
            &fname,
            "bad magic, version or reserved bytes".into(),
        ));
    }
    let f = FilterFile {
        epoch: u64_at(&b, 8),
        number: u64_at(&b, 16),
        prev_epoch: u64_at(&b, 24),
        prev_number: u64_at(&b, 32),
        first_bucket: u64_at(&b, 40),
        last_bucket: u64_at(&b, 48),
        opened_us: u64_at(&b, 56) as i64,
        last_us: u64_at(&b, 64) as i64,
        keys: u64_at(&b, 72),
        tag_us: u64_at(&b, 80) as i64,
        k: u32::from_le_bytes([b[88], b[89], b[90], b[91]]),
        words: b[FILTER_HEADER..body]
            .chunks_exact(8)
            .map(|c| u64_at(c, 0))
            .collect(),
    };
    if f.name() != name || f.first_bucket > f.last_bucket || f.opened_us > f.last_us {
        return Err(corrupt(
            backend,
            &fname,
            format!(
                "the header ({:?}) does not match the name or is out of order",
                f.name()
            ),
        ));
    }
    Ok(f)
}

/// Filter files present (leftover temporary files of an interrupted save are removed).
pub(crate) fn list(backend: &dyn IoBackend) -> Result<Vec<FilterName>, StorageError> {
    let mut out = Vec::new();
    let names = backend
        .list()
        .map_err(StorageError::io("list", backend.locate(".")))?;
    for n in names {
        if n.starts_with('f') && n.ends_with(TMP_SUFFIX) {
            backend
                .remove(&n)
                .map_err(StorageError::io("remove", backend.locate(&n)))?;
        } else if let Some(f) = FilterName::parse(&n) {
            out.push(f);
        }
    }
    out.sort_unstable();
    Ok(out)
}
