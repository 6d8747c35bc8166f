//! Reads stored messages back: from the entry being planned, the entry cache, or the log.

use std::sync::Arc;

use bytes::Bytes;
use uuid::Uuid;

use super::cache::EntryCache;
use super::log::ReplicatedLog;
use crate::state::frame::{read_frame, skip_frames};
use crate::state::model::{Partition, PENDING_INDEX};

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
}

pub struct MessageReader<'a> {
    pub pending: &'a [u8],
    pub cache: &'a mut EntryCache,
    pub log: &'a dyn ReplicatedLog,
}

impl MessageReader<'_> {
    fn entry(&mut self, index: u64) -> Result<Arc<Vec<u8>>, String> {
        if let Some(e) = self.cache.get(index) {
            return Ok(e);
        }
        let bytes = self
            .log
            .read(index)?
            .ok_or_else(|| format!("log entry {index} is missing"))?;
        let e = Arc::new(bytes);
        self.cache.insert(index, e.clone());
        Ok(e)
    }

    /// Messages `from..to` of a partition (clamped to what exists), in offset order.
    pub fn read(
        &mut self,
        p: &Partition,
        from: u64,
        to: u64,
    ) -> Result<Vec<StoredMessage>, String> {
        let to = to.min(p.next_offset);
        let mut out = Vec::with_capacity(to.saturating_sub(from) as usize);
        let mut off = from;
        while off < to {
            let run = *p
                .run_of(off)
                .ok_or_else(|| format!("offset {off} of partition {} has no run", p.id))?;
            let run_end = (run.base_offset + u64::from(run.count)).min(to);
            let holder;
            let buf: &[u8] = if run.index == PENDING_INDEX {
                self.pending
            } else {
                holder = self.entry(run.index)?;
                &holder[..]
            };
            let start = buf
                .get(run.pos as usize..)
                .ok_or_else(|| format!("run position {} past entry end", run.pos))?;
            let mut rest = skip_frames(start, off - run.base_offset).map_err(|e| e.to_string())?;
            while off < run_end {
                let (f, used) = read_frame(rest).map_err(|e| e.to_string())?;
                out.push(StoredMessage {
                    offset: off,
                    id: f.id,
                    trace: f.trace,
                    txn: f.txn.to_string(),
                    producer: f.producer.map(str::to_string),
                    payload: Bytes::copy_from_slice(f.payload),
                    created_us: run.created_us,
                });
                rest = &rest[used..];
                off += 1;
            }
        }
        Ok(out)
    }

    pub fn read_one(
        &mut self,
        p: &Partition,
        offset: u64,
    ) -> Result<Option<StoredMessage>, String> {
        if offset >= p.next_offset {
            return Ok(None);
        }
        Ok(self.read(p, offset, offset + 1)?.pop())
    }
}
