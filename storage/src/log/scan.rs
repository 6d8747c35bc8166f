//! Reading one segment file at open: its valid prefix, the first problem in it, and how many
//! valid records still lie beyond that problem (which is what tells a torn tail from damage in
//! the middle of acknowledged data).

use std::path::PathBuf;
use std::sync::Arc;

use super::index::Segment;
use super::resync::{count_after, After, Break};
use crate::backend::{IoBackend, SegmentFile};
use crate::format::{
    check_len, decode_body, decode_header, le_u32, next_index, HeaderProblem, FORMAT_VERSION,
    HIGHEST_INDEX, LEN_FIELD, SEGMENT_HEADER_LEN,
};
use crate::StorageError;

/// Recovery reads segments in windows of this size rather than one syscall per record.
const SCAN_WINDOW: u64 = 1024 * 1024;

pub(crate) struct FileScan {
    pub name: String,
    pub path: PathBuf,
    pub file: Arc<dyn SegmentFile>,
    /// The first index the file name claims.
    pub first: u64,
    pub len: u64,
    /// (offset, term) of each record of the valid prefix.
    pub entries: Vec<(u64, u64)>,
    /// Offset just past the valid prefix.
    pub end: u64,
    /// Where and why the valid prefix ends before the end of the file.
    pub problem: Option<(u64, String)>,
    /// Valid records found past `problem`.
    pub after: After,
}

impl FileScan {
    /// Records this file holds that a reader could still verify.
    pub fn readable(&self) -> u64 {
        self.entries.len() as u64 + self.after.count
    }

    pub fn last_entry(&self) -> Option<u64> {
        (!self.entries.is_empty()).then(|| self.first + (self.entries.len() as u64 - 1))
    }

    pub fn segment(&self, entries: Vec<(u64, u64)>, end: u64) -> Segment {
        Segment {
            name: self.name.clone(),
            path: self.path.clone(),
            file: self.file.clone(),
            first_index: self.first,
            entries,
            end,
        }
    }
}

pub(crate) fn scan_file(
    backend: &dyn IoBackend,
    name: &str,
    first: u64,
    max_payload: u32,
) -> Result<FileScan, StorageError> {
    let path = backend.locate(name);
    let file = backend
        .open(name)
        .map_err(StorageError::io("open segment", &path))?;
    let len = file
        .len()
        .map_err(StorageError::io("stat segment", &path))?;
    let mut scan = FileScan {
        name: name.to_owned(),
        path,
        file,
        first,
        len,
        entries: Vec::new(),
        end: SEGMENT_HEADER_LEN,
        problem: None,
        after: After::default(),
    };
    let file = scan.file.clone();
    let path = scan.path.clone();
    let mut window = Window::new(&*file, &path);
    match check_header(&*file, len, first, &path)? {
        Some(reason) => {
            scan.end = 0;
            scan.problem = Some((0, reason));
            // The file name still says which index the first record holds.
            let brk = Break {
                offset: SEGMENT_HEADER_LEN,
                index: first,
                min_term: 0,
            };
            scan.after = count_after(&mut window, len, SEGMENT_HEADER_LEN, brk, max_payload)?;
        }
        None => {
            if let Some(reason) = scan_records(&mut window, &mut scan, max_payload)? {
                let at = scan.end;
                scan.problem = Some((at, reason));
                let brk = Break {
                    offset: at,
                    index: first.saturating_add(scan.entries.len() as u64),
                    min_term: scan.entries.last().map_or(0, |&(_, term)| term),
                };
                scan.after = count_after(&mut window, len, at + 1, brk, max_payload)?;
            }
        }
    }
    Ok(scan)
}

/// `Ok(Some(reason))` for a header that cannot be trusted; an error only for a version this
/// build does not read, which is no damage and must never be cut.
fn check_header(
    file: &dyn SegmentFile,
    file_len: u64,
    name_first: u64,
    path: &std::path::Path,
) -> Result<Option<String>, StorageError> {
    let mut header = vec![0u8; file_len.min(SEGMENT_HEADER_LEN) as usize];
    file.read_at(0, &mut header)
        .map_err(StorageError::io("read header of", path))?;
    if name_first > HIGHEST_INDEX {
        return Ok(Some(format!(
            "the file name claims first index {name_first}, past {HIGHEST_INDEX}, the highest \
             index a log holds (u64::MAX is reserved)"
        )));
    }
    Ok(match decode_header(&header) {
        Ok(first) if first == name_first => None,
        Ok(first) => Some(format!(
            "segment header says first index {first} but the file name says {name_first}"
        )),
        Err(HeaderProblem::Torn) => Some(format!(
            "segment header is torn ({file_len} bytes in the file)"
        )),
        Err(HeaderProblem::BadMagic) => Some("segment header magic is not QSEG".into()),
        Err(HeaderProblem::ReservedNotZero) => {
            Some("segment header reserved bytes are not zero".into())
        }
        Err(HeaderProblem::UnsupportedVersion(version)) => {
            return Err(StorageError::UnsupportedVersion {
                path: path.to_path_buf(),
                version,
                supported: FORMAT_VERSION,
            })
        }
    })
}

/// Walks the valid prefix into `scan.entries`; `Some(reason)` if it ends before the file does.
fn scan_records(
    window: &mut Window<'_>,
    scan: &mut FileScan,
    max_payload: u32,
) -> Result<Option<String>, StorageError> {
    // None once a record held HIGHEST_INDEX: nothing can follow it (u64::MAX is reserved, so a
    // record claiming it is damage). `check_header` refused a name past it.
    let mut expected = Some(scan.first);
    loop {
        let off = scan.end;
        let remaining = scan.len - off;
        if remaining == 0 {
            return Ok(None);
        }
        let Some(expected_index) = expected else {
            return Ok(Some(format!(
                "{remaining} bytes of records follow index {HIGHEST_INDEX}, the highest index a \
                 log holds (u64::MAX is reserved)"
            )));
        };
        if remaining < LEN_FIELD {
            return Ok(Some(format!(
                "only {remaining} of the 4 bytes of a length prefix are present"
            )));
        }
        let len = le_u32(window.get(off, LEN_FIELD)?);
        let len = match check_len(len, max_payload, remaining - LEN_FIELD) {
            Ok(len) => u64::from(len),
            Err(reason) => return Ok(Some(reason)),
        };
        let record = match decode_body(window.get(off + LEN_FIELD, len)?) {
            Ok(r) => r,
            Err(reason) => return Ok(Some(reason)),
        };
        if record.index != expected_index {
            return Ok(Some(format!(
                "record holds index {} where {expected_index} was expected",
                record.index
            )));
        }
        scan.entries.push((off, record.term));
        scan.end = off + LEN_FIELD + len;
        expected = next_index(expected_index);
    }
}

#[cfg(test)]
thread_local! {
    /// Reads a window issued on this thread, so a test can bound them.
    pub(crate) static WINDOW_READS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// A read-ahead window over one file; `get` never allocates more than the file still holds.
pub(crate) struct Window<'a> {
    file: &'a dyn SegmentFile,
    path: &'a std::path::Path,
    buf: Vec<u8>,
    at: u64,
}

impl<'a> Window<'a> {
    fn new(file: &'a dyn SegmentFile, path: &'a std::path::Path) -> Self {
        Window {
            file,
            path,
            buf: Vec::new(),
            at: 0,
        }
    }

    /// Copies `out.len()` bytes at `off` from the window, or reads them directly when they lie
    /// outside it, so a small look ahead does not move the window. The caller guarantees
    /// `off + out.len()` is within the file.
    pub(crate) fn copy(&mut self, off: u64, out: &mut [u8]) -> Result<(), StorageError> {
        let have = self.at + self.buf.len() as u64;
        if off >= self.at && off + out.len() as u64 <= have {
            let start = (off - self.at) as usize;
            out.copy_from_slice(&self.buf[start..start + out.len()]);
            return Ok(());
        }
        #[cfg(test)]
        WINDOW_READS.with(|c| c.set(c.get() + 1));
        self.file
            .read_at(off, out)
            .map_err(StorageError::io("read segment", self.path))
    }

    /// The caller guarantees `off + n` is within the file.
    pub(crate) fn get(&mut self, off: u64, n: u64) -> Result<&[u8], StorageError> {
        let have = self.at + self.buf.len() as u64;
        if off < self.at || off + n > have {
            let file_len = self
                .file
                .len()
                .map_err(StorageError::io("stat segment", self.path))?;
            let want = n.max(SCAN_WINDOW).min(file_len - off);
            self.buf.resize(want as usize, 0);
            #[cfg(test)]
            WINDOW_READS.with(|c| c.set(c.get() + 1));
            self.file
                .read_at(off, &mut self.buf)
                .map_err(StorageError::io("read segment", self.path))?;
            self.at = off;
        }
        let start = (off - self.at) as usize;
        Ok(&self.buf[start..start + n as usize])
    }
}
