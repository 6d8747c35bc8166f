//! Reading one id file: its header is checked against its name and its length before any
//! block is read, and every block's CRC32C, count and order when it is read. A reader holds
//! one 4 KiB block at a time, whatever the file claims.

use std::path::PathBuf;
use std::sync::Arc;

use super::format::{
    data_blocks, decode_block, decode_header, file_len, pairs_in_block, Header, IdSource, BLOCK,
};
use crate::backend::{IoBackend, SegmentFile};
use crate::StorageError;

pub struct IdFileReader {
    file: Arc<dyn SegmentFile>,
    path: PathBuf,
    header: Header,
}

fn corrupt(path: &std::path::Path, block: u64, reason: String) -> StorageError {
    StorageError::CorruptIdFile {
        path: path.to_path_buf(),
        block,
        reason,
    }
}

impl IdFileReader {
    /// Opens `name`, which must be the file of `(generation, source)`.
    pub(crate) fn open(
        backend: &dyn IoBackend,
        name: &str,
        generation: u64,
        source: IdSource,
    ) -> Result<IdFileReader, StorageError> {
        let path = backend.locate(name);
        let file = backend
            .open(name)
            .map_err(StorageError::io("open the id file", &path))?;
        let len = file
            .len()
            .map_err(StorageError::io("read the length of", &path))?;
        if len < BLOCK as u64 {
            return Err(corrupt(
                &path,
                0,
                format!("{len} bytes, shorter than its header"),
            ));
        }
        let mut b = [0u8; BLOCK];
        file.read_at(0, &mut b)
            .map_err(StorageError::io("read the header of", &path))?;
        let header = decode_header(&b).map_err(|r| corrupt(&path, 0, r))?;
        if header.generation != generation || IdSource::from_field(header.source) != source {
            return Err(corrupt(
                &path,
                0,
                format!(
                    "the header names generation {} source {:?}, the file name generation \
                     {generation} source {source:?}",
                    header.generation,
                    IdSource::from_field(header.source)
                ),
            ));
        }
        if len != file_len(header.pairs) {
            return Err(corrupt(
                &path,
                0,
                format!(
                    "{len} bytes; {} pairs take exactly {}",
                    header.pairs,
                    file_len(header.pairs)
                ),
            ));
        }
        Ok(IdFileReader { file, path, header })
    }

    pub fn pairs(&self) -> u64 {
        self.header.pairs
    }

    /// The open file and its exact length (what the header implies): a snapshot streams the
    /// descriptor it verified, whatever happens to the name later.
    pub(crate) fn into_file(self) -> (Arc<dyn SegmentFile>, u64) {
        (self.file, file_len(self.header.pairs))
    }

    fn blocks(&self) -> u64 {
        data_blocks(self.header.pairs)
    }

    /// Reads data block `i` (0-based) into `out`.
    fn read_block(&self, i: u64, out: &mut Vec<(u64, u64)>) -> Result<(), StorageError> {
        let mut b = [0u8; BLOCK];
        self.file
            .read_at((i + 1) * BLOCK as u64, &mut b)
            .map_err(StorageError::io("read a block of", &self.path))?;
        decode_block(&b, pairs_in_block(self.header.pairs, i), out)
            .map_err(|r| corrupt(&self.path, i + 1, r))
    }

    /// Calls `accept` with the offset of each pair of `key`, in ascending offset order, until
    /// it returns true; answers that offset, or None when no pair of `key` was accepted.
    /// Binary search over blocks: about log2(blocks) + 1 block reads.
    pub fn find(
        &self,
        key: u64,
        accept: impl FnMut(u64) -> bool,
    ) -> Result<Option<u64>, StorageError> {
        self.search(key, None, &mut 0, accept)
    }

    /// Data blocks in the file.
    pub fn data_blocks(&self) -> u64 {
        self.blocks()
    }

    /// `find` with the blocks' last keys remembered in `fences` (one slot per data block,
    /// None until read; review s27 B1): the binary search reads only blocks whose fence is
    /// unknown, so once a file's fences are known a lookup reads the one block that may hold
    /// the key. `reads` counts the block reads.
    pub fn find_fenced(
        &self,
        key: u64,
        fences: &mut [Option<u64>],
        reads: &mut u64,
        accept: impl FnMut(u64) -> bool,
    ) -> Result<Option<u64>, StorageError> {
        let n = self.blocks();
        if fences.len() as u64 != n {
            return Err(corrupt(
                &self.path,
                0,
                format!("{} fences for {n} blocks", fences.len()),
            ));
        }
        self.search(key, Some(fences), reads, accept)
    }

    /// The one search behind `find` and `find_fenced` (duplicate D3): with `fences` (one per
    /// data block, checked by the caller) a block's last key is read from there when known
    /// and learnt when read; without, every probe of the binary search reads its block.
    fn search(
        &self,
        key: u64,
        mut fences: Option<&mut [Option<u64>]>,
        reads: &mut u64,
        mut accept: impl FnMut(u64) -> bool,
    ) -> Result<Option<u64>, StorageError> {
        let n = self.blocks();
        let mut buf = Vec::with_capacity(super::format::PAIRS_PER_BLOCK);
        // The block now in `buf`, so the scan below does not read it twice.
        let mut held: Option<u64> = None;
        // The first block whose last key is >= key. Blocks are never empty (every data block
        // holds 1..=255 pairs, checked when read), so a block's last key always exists.
        let (mut lo, mut hi) = (0u64, n);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let known = fences
                .as_deref()
                .and_then(|f| f.get(mid as usize).copied().flatten());
            let fence = match known {
                Some(f) => f,
                None => {
                    self.read_block(mid, &mut buf)?;
                    *reads += 1;
                    held = Some(mid);
                    let f = buf.last().map_or(0, |&(k, _)| k);
                    if let Some(slot) = fences.as_deref_mut().and_then(|f| f.get_mut(mid as usize))
                    {
                        *slot = Some(f);
                    }
                    f
                }
            };
            if fence < key {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        let mut i = lo;
        while i < n {
            if held != Some(i) {
                self.read_block(i, &mut buf)?;
                *reads += 1;
                // `buf` now holds block i: a stale `held` would match the next block and
                // skip it, hiding its pairs (review s29 H1).
                held = Some(i);
                if let Some(slot) = fences.as_deref_mut().and_then(|f| f.get_mut(i as usize)) {
                    *slot = buf.last().map(|&(k, _)| k);
                }
            }
            for &(k, offset) in buf.iter().skip_while(|(k, _)| *k < key) {
                if k != key {
                    return Ok(None);
                }
                if accept(offset) {
                    return Ok(Some(offset));
                }
            }
            i += 1;
        }
        Ok(None)
    }

    /// Every pair in order, block by block, checking the order across blocks too.
    pub fn cursor(&self) -> PairCursor<'_> {
        PairCursor {
            reader: self,
            next_block: 0,
            buf: Vec::new(),
            at: 0,
            last: None,
        }
    }

    /// Reads the whole file: Ok only if every block verifies.
    pub fn verify(&self) -> Result<(), StorageError> {
        let mut c = self.cursor();
        while c.next_pair()?.is_some() {}
        Ok(())
    }
}

pub struct PairCursor<'a> {
    reader: &'a IdFileReader,
    next_block: u64,
    buf: Vec<(u64, u64)>,
    at: usize,
    last: Option<(u64, u64)>,
}

impl PairCursor<'_> {
    pub fn next_pair(&mut self) -> Result<Option<(u64, u64)>, StorageError> {
        if self.at == self.buf.len() {
            if self.next_block == self.reader.blocks() {
                return Ok(None);
            }
            self.reader.read_block(self.next_block, &mut self.buf)?;
            self.next_block += 1;
            self.at = 0;
        }
        let pair = self.buf[self.at];
        self.at += 1;
        if self.last.is_some_and(|l| l > pair) {
            return Err(corrupt(
                &self.reader.path,
                self.next_block,
                "its first pair sorts before the previous block's last".to_owned(),
            ));
        }
        self.last = Some(pair);
        Ok(Some(pair))
    }
}
