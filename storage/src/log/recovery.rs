//! Opening a log: scan every segment, believe nothing unverified, and cut the log at the first
//! record that is torn, corrupt or out of sequence. Everything after such a record was never
//! acknowledged as durable or cannot be trusted, so Raft will fetch it again from the leader.

use tracing::{info, warn};

use super::index::{LogIndex, Segment};
use crate::backend::{IoBackend, SegmentFile};
use crate::format::{
    check_len, decode_body, decode_header, le_u32, parse_segment_name, HeaderProblem,
    FORMAT_VERSION, LEN_FIELD, SEGMENT_HEADER_LEN,
};
use crate::{LogOptions, RecoveryReport, StorageError, TornTail};

/// Recovery reads segments in windows of this size rather than one syscall per record.
const SCAN_WINDOW: u64 = 1024 * 1024;

pub(crate) fn recover(
    backend: &dyn IoBackend,
    opts: &LogOptions,
) -> Result<(LogIndex, RecoveryReport), StorageError> {
    let listing = backend
        .list()
        .map_err(StorageError::io("list segments in", backend.locate("")))?;
    let mut names: Vec<(u64, String)> = listing
        .into_iter()
        .filter_map(|n| parse_segment_name(&n).map(|first| (first, n)))
        .collect();
    names.sort();

    let mut index = LogIndex::default();
    let mut truncated = None;
    for (at, (first, name)) in names.iter().enumerate() {
        let path = backend.locate(name);
        let file = backend
            .open(name)
            .map_err(StorageError::io("open segment", &path))?;
        let file_len = file
            .len()
            .map_err(StorageError::io("stat segment", &path))?;
        let expected = index.last().map(|(last, _)| last + 1);

        let scanned = match check_header(&*file, file_len, *first, &path)? {
            Some(reason) => Scan::cut_at(0, reason),
            None if expected.is_some_and(|e| e != *first) => Scan::cut_at(
                0,
                format!(
                    "segment starts at index {first} but the previous one ends before {}",
                    expected.unwrap_or_default()
                ),
            ),
            None => scan_records(&*file, file_len, *first, opts.max_record_bytes, &path)?,
        };

        if let Some(reason) = scanned.cut {
            let later = &names[at + 1..];
            truncated = Some(cut_tail(
                backend,
                name,
                &*file,
                file_len,
                scanned.end,
                reason,
                later,
            )?);
        }
        if scanned.entries.is_empty() {
            if truncated.is_none() {
                info!(segment = %path.display(), "removing a segment that holds no records");
                remove(backend, name)?;
            }
        } else {
            index.segments.push(Segment {
                name: name.clone(),
                path,
                file,
                first_index: *first,
                entries: scanned.entries,
                end: scanned.end,
            });
        }
        if truncated.is_some() {
            break;
        }
    }
    backend
        .sync_dir()
        .map_err(StorageError::io("sync directory of", backend.locate("")))?;

    let report = RecoveryReport {
        segments: index.segments.len(),
        records: index.records(),
        truncated,
    };
    Ok((index, report))
}

/// `Ok(Some(reason))` for a header torn by a crash while the segment was being created; an
/// error for headers that are whole but wrong, which no crash produces and no cut should hide.
fn check_header(
    file: &dyn SegmentFile,
    file_len: u64,
    name_first: u64,
    path: &std::path::Path,
) -> Result<Option<String>, StorageError> {
    let mut header = vec![0u8; file_len.min(SEGMENT_HEADER_LEN) as usize];
    file.read_at(0, &mut header)
        .map_err(StorageError::io("read header of", path))?;
    let bad = |reason: &str| StorageError::BadSegmentHeader {
        path: path.to_path_buf(),
        reason: reason.to_owned(),
    };
    match decode_header(&header) {
        Ok(first) if first == name_first => Ok(None),
        Ok(first) => Err(bad(&format!(
            "header says first index {first} but the file name says {name_first}"
        ))),
        Err(HeaderProblem::Torn) => Ok(Some(format!(
            "segment header is torn ({file_len} bytes in the file)"
        ))),
        Err(HeaderProblem::BadMagic) => Err(bad("magic is not QSEG")),
        Err(HeaderProblem::ReservedNotZero) => Err(bad("reserved bytes are not zero")),
        Err(HeaderProblem::UnsupportedVersion(version)) => Err(StorageError::UnsupportedVersion {
            path: path.to_path_buf(),
            version,
            supported: FORMAT_VERSION,
        }),
    }
}

struct Scan {
    entries: Vec<(u64, u64)>,
    /// Offset just past the last good record: where the file is cut if `cut` is set.
    end: u64,
    cut: Option<String>,
}

impl Scan {
    fn cut_at(end: u64, reason: String) -> Scan {
        Scan {
            entries: Vec::new(),
            end,
            cut: Some(reason),
        }
    }
}

fn scan_records(
    file: &dyn SegmentFile,
    file_len: u64,
    first: u64,
    max_payload: u32,
    path: &std::path::Path,
) -> Result<Scan, StorageError> {
    let mut window = Window::new(file, path);
    let mut scan = Scan {
        entries: Vec::new(),
        end: SEGMENT_HEADER_LEN,
        cut: None,
    };
    let mut expected = first;
    loop {
        let off = scan.end;
        let remaining = file_len - off;
        if remaining == 0 {
            return Ok(scan);
        }
        if remaining < LEN_FIELD {
            scan.cut = Some(format!(
                "only {remaining} of the 4 bytes of a length prefix are present"
            ));
            return Ok(scan);
        }
        let len = le_u32(window.get(off, LEN_FIELD)?);
        let len = match check_len(len, max_payload, remaining - LEN_FIELD) {
            Ok(len) => u64::from(len),
            Err(reason) => {
                scan.cut = Some(reason);
                return Ok(scan);
            }
        };
        let record = match decode_body(window.get(off + LEN_FIELD, len)?) {
            Ok(r) => r,
            Err(reason) => {
                scan.cut = Some(reason);
                return Ok(scan);
            }
        };
        if record.index != expected {
            scan.cut = Some(format!(
                "record holds index {} where {expected} was expected",
                record.index
            ));
            return Ok(scan);
        }
        scan.entries.push((off, record.term));
        scan.end = off + LEN_FIELD + len;
        expected += 1;
    }
}

/// Removes everything from `offset` in `name` on, and every `later` segment, durably.
fn cut_tail(
    backend: &dyn IoBackend,
    name: &str,
    file: &dyn SegmentFile,
    file_len: u64,
    offset: u64,
    reason: String,
    later: &[(u64, String)],
) -> Result<TornTail, StorageError> {
    let path = backend.locate(name);
    let mut cut_bytes = 0;
    // Later segments go first, newest first, so a crash mid-cut still leaves a contiguous prefix.
    for (_, later_name) in later.iter().rev() {
        let later_path = backend.locate(later_name);
        let later_len = backend
            .open(later_name)
            .and_then(|f| f.len())
            .map_err(StorageError::io("stat segment", &later_path))?;
        cut_bytes += later_len;
        warn!(segment = %later_path.display(), bytes = later_len, "removing a segment after the cut");
        remove(backend, later_name)?;
    }
    // A segment left without records is removed whole: the index never holds an empty one.
    if offset <= SEGMENT_HEADER_LEN {
        cut_bytes += file_len;
        remove(backend, name)?;
    } else {
        cut_bytes += file_len - offset;
        file.set_len(offset)
            .and_then(|()| file.sync_data())
            .map_err(StorageError::io("truncate segment", &path))?;
    }
    warn!(
        segment = %path.display(),
        offset,
        cut_bytes,
        reason = %reason,
        "cut the log at a torn or corrupt record"
    );
    Ok(TornTail {
        segment: path,
        offset,
        cut_bytes,
        reason,
    })
}

fn remove(backend: &dyn IoBackend, name: &str) -> Result<(), StorageError> {
    backend
        .remove(name)
        .map_err(StorageError::io("remove segment", backend.locate(name)))
}

/// A read-ahead window over one file; `get` never allocates more than the file still holds.
struct Window<'a> {
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

    /// The caller guarantees `off + n` is within the file.
    fn get(&mut self, off: u64, n: u64) -> Result<&[u8], StorageError> {
        let have = self.at + self.buf.len() as u64;
        if off < self.at || off + n > have {
            let file_len = self
                .file
                .len()
                .map_err(StorageError::io("stat segment", self.path))?;
            let want = n.max(SCAN_WINDOW).min(file_len - off);
            self.buf.resize(want as usize, 0);
            self.file
                .read_at(off, &mut self.buf)
                .map_err(StorageError::io("read segment", self.path))?;
            self.at = off;
        }
        let start = (off - self.at) as usize;
        Ok(&self.buf[start..start + n as usize])
    }
}
