//! The state of a checkpoint taken in pieces: bytes are gathered into chunks of `WRITE_CHUNK_BYTES`
//! and each full chunk goes into the write transaction at once, so a checkpoint is never held
//! whole in memory (the engine's encoder emits it piece by piece; a whole buffer plus redb's
//! copy of it was three times its size, docs/memory.md).

use redb::Table;

use super::checkpoint::{CheckpointHead, WRITE_CHUNK_BYTES};

pub struct StateSink<'t> {
    chunks: Table<'t, u32, &'static [u8]>,
    buf: Vec<u8>,
    next: u32,
    len: u64,
    crc: u32,
    /// The first failed insert: later bytes are dropped and the save fails with it.
    failed: Option<redb::Error>,
}

impl<'t> StateSink<'t> {
    pub(super) fn new(chunks: Table<'t, u32, &'static [u8]>) -> Self {
        StateSink {
            chunks,
            buf: Vec::new(),
            next: 0,
            len: 0,
            crc: 0,
            failed: None,
        }
    }

    /// Appends the next bytes of the state.
    pub fn write(&mut self, mut bytes: &[u8]) {
        if self.failed.is_some() {
            return;
        }
        self.len += bytes.len() as u64;
        self.crc = crc32c::crc32c_append(self.crc, bytes);
        while !bytes.is_empty() {
            if self.buf.capacity() == 0 {
                self.buf.reserve_exact(WRITE_CHUNK_BYTES);
            }
            let room = WRITE_CHUNK_BYTES - self.buf.len();
            let (now, rest) = bytes.split_at(room.min(bytes.len()));
            self.buf.extend_from_slice(now);
            bytes = rest;
            if self.buf.len() == WRITE_CHUNK_BYTES {
                self.flush();
            }
        }
    }

    fn flush(&mut self) {
        if self.buf.is_empty() || self.failed.is_some() {
            return;
        }
        match self.chunks.insert(self.next, self.buf.as_slice()) {
            Ok(_) => {
                self.next = self.next.saturating_add(1);
                self.buf.clear();
            }
            Err(e) => self.failed = Some(e.into()),
        }
    }

    /// Inserts the last chunk and describes what was written.
    pub(super) fn finish(
        mut self,
        applied_index: u64,
        applied_term: u64,
    ) -> Result<CheckpointHead, redb::Error> {
        self.flush();
        if let Some(e) = self.failed {
            return Err(e);
        }
        Ok(CheckpointHead {
            applied_index,
            applied_term,
            state_len: self.len,
            chunk_count: self.next,
            crc: self.crc,
        })
    }
}
