//! Per-generation id files of the dedup index (issue 12): the exact (key, offset) pairs of the
//! pushes of each sealed segment, split by window-filter generation, so a filter hit is
//! confirmed with a few block reads instead of an in-memory row per id.
//!
//! Bytes and numbers only: what a key is (xxh3 of partition and id hash) and which generation
//! a push belongs to are the engine's. A damaged file is reported (`CorruptIdFile`) and never
//! trusted; the caller removes it and writes it again from its segment, which is why every
//! file is rebuildable from the log alone. docs/storage-format.md ("Id files") has the format.

mod filter_file;
mod format;
mod reader;
mod writer;

use std::sync::Arc;

pub use filter_file::{FilterFile, FilterName, NO_PREV};
pub use format::{id_file_name, parse_id_file_name, IdSource};
pub use reader::{IdFileReader, PairCursor};

use crate::backend::IoBackend;
use crate::StorageError;
use writer::IdFileWriter;

/// What `IdFiles::quarantine` appends to a name.
const QUARANTINED: &str = ".quarantined";

/// The id files of one directory (`<data_dir>/ids/`).
pub struct IdFiles {
    backend: Arc<dyn IoBackend>,
}

impl IdFiles {
    pub fn new(backend: Arc<dyn IoBackend>) -> IdFiles {
        IdFiles { backend }
    }

    fn name(generation: u64, source: IdSource) -> Result<String, StorageError> {
        id_file_name(generation, source).ok_or_else(|| StorageError::InvalidOptions {
            reason: format!("id file source {source:?} is out of range (2^63 or more)"),
        })
    }

    fn sync_dir(&self) -> Result<(), StorageError> {
        self.backend.sync_dir().map_err(StorageError::io(
            "fsync the directory",
            self.backend.locate("."),
        ))
    }

    /// Every id file present, by (generation, source); names of other files are ignored.
    pub fn list(&self) -> Result<Vec<(u64, IdSource)>, StorageError> {
        let mut files: Vec<(u64, IdSource)> = self
            .backend
            .list()
            .map_err(StorageError::io("list", self.backend.locate(".")))?
            .iter()
            .filter_map(|n| parse_id_file_name(n))
            .collect();
        files.sort_unstable();
        Ok(files)
    }

    /// Writes the pairs of the segment starting at `first_index` that belong to `generation`
    /// (sorted here, exact repeats dropped), durable with its name when this returns: the
    /// segment may be reclaimed after. Writing it again replaces it (the rebuild of a damaged
    /// file). Answers the pairs written.
    pub fn write_segment(
        &self,
        generation: u64,
        first_index: u64,
        pairs: &mut [(u64, u64)],
    ) -> Result<u64, StorageError> {
        let source = IdSource::Segment(first_index);
        let name = Self::name(generation, source)?;
        pairs.sort_unstable();
        let mut w = IdFileWriter::create(&*self.backend, &name, generation, first_index)?;
        for &p in pairs.iter() {
            w.push(p)?;
        }
        let n = w.finish()?;
        self.sync_dir()?;
        Ok(n)
    }

    pub fn open(&self, generation: u64, source: IdSource) -> Result<IdFileReader, StorageError> {
        IdFileReader::open(
            &*self.backend,
            &Self::name(generation, source)?,
            generation,
            source,
        )
    }

    /// Merges every file of `generation` into one (`m<n+1>` after the newest merged `m<n>`),
    /// durable before any input is removed, so a crash leaves either the inputs or a complete
    /// merged file (plus inputs whose pairs it already holds: a later merge drops the
    /// repeats). Reads one block per input at a time. Call it once every segment holding ids
    /// of the generation is sealed and written. A damaged input stops the merge with
    /// `CorruptIdFile` and changes nothing.
    pub fn merge_generation(&self, generation: u64) -> Result<Option<IdSource>, StorageError> {
        self.merge_generation_then(generation, &mut |_, _| {})
    }

    /// `merge_generation`, calling `durable(output, inputs)` once the output is durable with
    /// its name and before any input is removed: a caller that lists files for readers swaps
    /// them there, so no reader is sent to a name about to disappear.
    pub fn merge_generation_then(
        &self,
        generation: u64,
        durable: &mut dyn FnMut(IdSource, &[IdSource]),
    ) -> Result<Option<IdSource>, StorageError> {
        let inputs: Vec<IdSource> = self
            .list()?
            .into_iter()
            .filter(|(g, _)| *g == generation)
            .map(|(_, s)| s)
            .collect();
        if inputs.len() < 2 {
            return Ok(inputs.first().copied());
        }
        let next = inputs
            .iter()
            .filter_map(|s| match s {
                IdSource::Merged(n) => Some(n + 1),
                IdSource::Segment(_) => None,
            })
            .max()
            .unwrap_or(0);
        let out = IdSource::Merged(next);
        let out_name = Self::name(generation, out)?;
        let readers = inputs
            .iter()
            .map(|s| self.open(generation, *s))
            .collect::<Result<Vec<_>, _>>()?;
        let mut cursors: Vec<PairCursor<'_>> = readers.iter().map(|r| r.cursor()).collect();
        let mut heads = Vec::with_capacity(cursors.len());
        for c in cursors.iter_mut() {
            heads.push(c.next_pair()?);
        }
        let field = out.to_field().unwrap_or(u64::MAX);
        let written = (|| {
            let mut w = IdFileWriter::create(&*self.backend, &out_name, generation, field)?;
            // A linear scan of the heads: a generation has one file per segment it spans, a
            // handful, so a heap would not pay for itself.
            while let Some((i, pair)) = heads
                .iter()
                .enumerate()
                .filter_map(|(i, h)| h.map(|p| (i, p)))
                .min_by_key(|(_, p)| *p)
            {
                w.push(pair)?;
                heads[i] = cursors[i].next_pair()?;
            }
            w.finish()
        })();
        if let Err(e) = written {
            // Best effort: the half-written output is not trusted by anyone (no valid header).
            let _ = self.backend.remove(&out_name);
            return Err(e);
        }
        self.sync_dir()?;
        drop(cursors);
        drop(readers);
        durable(out, &inputs);
        for s in inputs {
            let name = Self::name(generation, s)?;
            self.backend
                .remove(&name)
                .map_err(StorageError::io("remove", self.backend.locate(&name)))?;
        }
        self.sync_dir()?;
        Ok(Some(out))
    }

    /// Removes one file (a damaged one, before it is rebuilt from its segment).
    pub fn remove(&self, generation: u64, source: IdSource) -> Result<(), StorageError> {
        let name = Self::name(generation, source)?;
        self.backend
            .remove(&name)
            .map_err(StorageError::io("remove", self.backend.locate(&name)))?;
        self.sync_dir()
    }

    /// Moves a file that cannot be read out of the way (review s27 M1): renamed to
    /// `<name>.quarantined`, which `list` ignores, durable with the directory when this
    /// returns. Kept for inspection until its generation leaves the window (`remove_before`).
    /// Answers where it now is.
    pub fn quarantine(
        &self,
        generation: u64,
        source: IdSource,
    ) -> Result<std::path::PathBuf, StorageError> {
        let name = Self::name(generation, source)?;
        let aside = format!("{name}{QUARANTINED}");
        self.backend
            .rename(&name, &aside)
            .map_err(StorageError::io("quarantine", self.backend.locate(&name)))?;
        self.sync_dir()?;
        Ok(self.backend.locate(&aside))
    }

    /// Removes the files of every generation before `generation` (they left the window).
    pub fn remove_before(&self, generation: u64) -> Result<usize, StorageError> {
        let old: Vec<(u64, IdSource)> = self
            .list()?
            .into_iter()
            .filter(|(g, _)| *g < generation)
            .collect();
        for &(g, s) in &old {
            let name = Self::name(g, s)?;
            self.backend
                .remove(&name)
                .map_err(StorageError::io("remove", self.backend.locate(&name)))?;
        }
        // Quarantined files go with their generation: they cannot pile up past the window.
        let aside: Vec<String> = self
            .backend
            .list()
            .map_err(StorageError::io("list", self.backend.locate(".")))?
            .into_iter()
            .filter(|n| {
                n.strip_suffix(QUARANTINED)
                    .and_then(parse_id_file_name)
                    .is_some_and(|(g, _)| g < generation)
            })
            .collect();
        for name in &aside {
            // It sits on the media that made it unreadable: an unlink failing there must not
            // stop the filter files' expiry and the directory fsync below at every later call
            // (review s33 M1). It stays aside, out of the list, tried again at the next expiry.
            if let Err(e) = self.backend.remove(name) {
                tracing::warn!(
                    file = %self.backend.locate(name).display(),
                    error = %e,
                    "a quarantined id file could not be removed with its generation"
                );
            }
        }
        // Filter files whose last bucket left the window go with the id files.
        let filters: Vec<FilterName> = filter_file::list(&*self.backend)?
            .into_iter()
            .filter(|f| f.last_bucket < generation)
            .collect();
        for f in &filters {
            self.remove_filter(*f)?;
        }
        if !old.is_empty() || !aside.is_empty() || !filters.is_empty() {
            self.sync_dir()?;
        }
        Ok(old.len())
    }

    /// Persists a closed filter generation (temporary name, fdatasync, rename, dir fsync).
    pub fn save_filter(&self, f: &FilterFile) -> Result<(), StorageError> {
        filter_file::save(&*self.backend, f)
    }

    /// Filter files present, by name (removing temporary leftovers of interrupted saves).
    pub fn list_filters(&self) -> Result<Vec<FilterName>, StorageError> {
        filter_file::list(&*self.backend)
    }

    /// Reads and checks one filter file; `CorruptIdFile` when it fails a check.
    pub fn load_filter(&self, name: FilterName) -> Result<FilterFile, StorageError> {
        filter_file::load(&*self.backend, name)
    }

    /// Removes one filter file (not durable until the next directory fsync).
    pub fn remove_filter(&self, name: FilterName) -> Result<(), StorageError> {
        let n = name.file_name();
        self.backend
            .remove(&n)
            .map_err(StorageError::io("remove", self.backend.locate(&n)))
    }
}

#[cfg(test)]
mod tests;
