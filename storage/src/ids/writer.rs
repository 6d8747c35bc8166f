//! Writing one id file: data blocks first, the header last, then `sync_data`, so a file cut by
//! a crash has no valid header (or a length that does not match it) and is never trusted.

use std::sync::Arc;

use super::format::{encode_block, encode_header, Header, BLOCK, MAX_PAIRS, PAIRS_PER_BLOCK};
use crate::backend::{IoBackend, SegmentFile};
use crate::StorageError;

/// Data blocks buffered before one write (256 KiB).
const BATCH_BLOCKS: usize = 64;

pub(crate) struct IdFileWriter {
    file: Arc<dyn SegmentFile>,
    path: std::path::PathBuf,
    generation: u64,
    source: u64,
    pending: Vec<(u64, u64)>,
    batch: Vec<u8>,
    next_block: u64,
    pairs: u64,
    last: Option<(u64, u64)>,
}

impl IdFileWriter {
    /// Creates `name` (replacing a file of that name: a rebuild overwrites a damaged file).
    pub(crate) fn create(
        backend: &dyn IoBackend,
        name: &str,
        generation: u64,
        source: u64,
    ) -> Result<IdFileWriter, StorageError> {
        let path = backend.locate(name);
        let file = backend
            .create(name)
            .map_err(StorageError::io("create the id file", &path))?;
        Ok(IdFileWriter {
            file,
            path,
            generation,
            source,
            pending: Vec::with_capacity(PAIRS_PER_BLOCK),
            batch: Vec::new(),
            next_block: 1,
            pairs: 0,
            last: None,
        })
    }

    /// Appends a pair; pairs must come in ascending order, and an exact repeat of the previous
    /// pair is dropped (a merge may meet one pair in two inputs).
    pub(crate) fn push(&mut self, pair: (u64, u64)) -> Result<(), StorageError> {
        match self.last {
            Some(l) if l == pair => return Ok(()),
            Some(l) if l > pair => {
                return Err(StorageError::InvalidOptions {
                    reason: format!(
                        "id file {} written out of order: {pair:?} after {l:?}",
                        self.path.display()
                    ),
                })
            }
            _ => {}
        }
        if self.pairs >= MAX_PAIRS {
            return Err(StorageError::InvalidOptions {
                reason: format!(
                    "id file {} would exceed {MAX_PAIRS} pairs",
                    self.path.display()
                ),
            });
        }
        self.last = Some(pair);
        self.pairs += 1;
        self.pending.push(pair);
        if self.pending.len() == PAIRS_PER_BLOCK {
            self.seal_block()?;
        }
        Ok(())
    }

    fn seal_block(&mut self) -> Result<(), StorageError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        self.batch.extend_from_slice(&encode_block(&self.pending));
        self.pending.clear();
        if self.batch.len() >= BATCH_BLOCKS * BLOCK {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), StorageError> {
        if self.batch.is_empty() {
            return Ok(());
        }
        self.file
            .write_at(self.next_block * BLOCK as u64, &self.batch)
            .map_err(StorageError::io("write", &self.path))?;
        self.next_block += (self.batch.len() / BLOCK) as u64;
        self.batch.clear();
        Ok(())
    }

    /// Writes the header and makes the file's content durable; the caller syncs the directory.
    pub(crate) fn finish(mut self) -> Result<u64, StorageError> {
        self.seal_block()?;
        self.flush()?;
        let header = encode_header(Header {
            pairs: self.pairs,
            generation: self.generation,
            source: self.source,
        });
        self.file
            .write_at(0, &header)
            .map_err(StorageError::io("write the header of", &self.path))?;
        self.file
            .sync_data()
            .map_err(StorageError::io("fsync", &self.path))?;
        Ok(self.pairs)
    }
}
