//! Appending records and rolling segments.

use std::sync::Arc;

use super::index::Segment;
use super::SegmentLog;
use crate::backend::SegmentFile;
use crate::format::{
    encode_header, encode_record, next_index, record_len, segment_name, HIGHEST_INDEX,
    SEGMENT_HEADER_LEN,
};
use crate::sync::{lock, write};
use crate::StorageError;

/// The segment records are being written to, which may not be in the index yet.
struct Target {
    name: String,
    file: Arc<dyn SegmentFile>,
    /// Where the next record goes.
    end: u64,
    /// Whether the segment is already in the index (else it is new and holds no record yet).
    indexed: bool,
}

impl SegmentLog {
    /// Appends one record; see `append_batch`.
    pub fn append(&self, index: u64, term: u64, payload: &[u8]) -> Result<(), StorageError> {
        self.append_batch(&[(index, term, payload)])
    }

    /// Appends records in order, not durable until `sync`. The whole batch is checked first:
    /// an oversize payload or an index that is not `last + 1` refuses it and changes nothing.
    /// Records bound for the same segment go down in one write. If a write fails, the batch
    /// may be partly appended: `last()` tells how far it got.
    pub fn append_batch(&self, records: &[(u64, u64, &[u8])]) -> Result<(), StorageError> {
        let mut dirty = lock(&self.writer);
        self.check_poisoned()?;
        let Some(&(first, _, _)) = records.first() else {
            return Ok(());
        };
        // Checked, not `l + 1` or `(start..)`: nothing follows HIGHEST_INDEX, and u64::MAX is
        // never stored (format.rs says why).
        let mut next = match self.last() {
            None => Some(first).filter(|&f| f <= HIGHEST_INDEX),
            Some((l, _)) => next_index(l),
        };
        for &(index, _, payload) in records {
            if payload.len() > self.opts.max_record_bytes as usize {
                return Err(StorageError::RecordTooLarge {
                    have: payload.len(),
                    max: self.opts.max_record_bytes,
                });
            }
            let Some(expected) = next else {
                return Err(StorageError::IndexSpaceExhausted { got: index });
            };
            if index != expected {
                return Err(StorageError::NonContiguous {
                    expected,
                    got: index,
                });
            }
            next = next_index(expected);
        }

        let mut target = self.active_target();
        let mut buf = Vec::new();
        let mut entries = Vec::new();
        let mut batch_first = first;
        for &(index, term, payload) in records {
            let len = record_len(payload.len());
            let fits = target.as_ref().is_some_and(|t| {
                let holds_records = t.indexed || !entries.is_empty();
                !holds_records || t.end + buf.len() as u64 + len <= self.opts.segment_bytes
            });
            if !fits {
                if let Some(t) = target.take() {
                    let (outgoing, path) = (t.file.clone(), self.backend.locate(&t.name));
                    self.flush(&mut dirty, t, batch_first, &mut buf, &mut entries)?;
                    // The segment left behind is whole on disk before its successor exists, so
                    // recovery may read valid records in a later segment as proof that damage
                    // in an earlier one is not a torn write (storage-format.md, "Recovery").
                    // A failed fsync poisons the log like one in `sync`: the kernel may have
                    // dropped those pages, and a later fsync of the same file returning Ok
                    // would vouch for records that are not on disk.
                    if let Err(e) = outgoing.sync_data() {
                        return Err(self.poison(StorageError::io("sync segment", &path)(e)));
                    }
                }
                target = Some(self.roll(&mut dirty, index)?);
                batch_first = index;
            }
            let base = target.as_ref().map_or(0, |t| t.end);
            entries.push((base + buf.len() as u64, term));
            encode_record(&mut buf, index, term, payload);
        }
        if let Some(t) = target {
            self.flush(&mut dirty, t, batch_first, &mut buf, &mut entries)?;
        }
        Ok(())
    }

    fn active_target(&self) -> Option<Target> {
        let idx = crate::sync::read(&self.index);
        let seg = idx.segments.last()?;
        Some(Target {
            name: seg.name.clone(),
            file: seg.file.clone(),
            end: seg.end,
            indexed: true,
        })
    }

    /// Creates the segment whose first record will be `first_index`.
    fn roll(&self, dirty: &mut super::Dirty, first_index: u64) -> Result<Target, StorageError> {
        let name = segment_name(first_index);
        let path = self.backend.locate(&name);
        let file = self
            .backend
            .create(&name)
            .map_err(StorageError::io("create segment", &path))?;
        dirty.dir = true;
        file.write_at(0, &encode_header(first_index))
            .map_err(StorageError::io("write header of", &path))?;
        dirty.files.insert(name.clone(), file.clone());
        Ok(Target {
            name,
            file,
            end: SEGMENT_HEADER_LEN,
            indexed: false,
        })
    }

    /// Writes the buffered records to `t` and only then publishes them to readers.
    fn flush(
        &self,
        dirty: &mut super::Dirty,
        t: Target,
        first_index: u64,
        buf: &mut Vec<u8>,
        entries: &mut Vec<(u64, u64)>,
    ) -> Result<(), StorageError> {
        if entries.is_empty() {
            return Ok(());
        }
        let path = self.backend.locate(&t.name);
        t.file
            .write_at(t.end, buf)
            .map_err(StorageError::io("append to", &path))?;
        dirty.files.insert(t.name.clone(), t.file.clone());
        let end = t.end + buf.len() as u64;
        let mut idx = write(&self.index);
        match idx.segments.last_mut() {
            Some(seg) if t.indexed => {
                seg.entries.append(entries);
                seg.end = end;
            }
            _ => idx.segments.push(Segment {
                name: t.name,
                path,
                file: t.file,
                first_index,
                entries: std::mem::take(entries),
                end,
            }),
        }
        buf.clear();
        Ok(())
    }
}
