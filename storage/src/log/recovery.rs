//! Opening a log: scan every segment, believe nothing unverified, and decide whether what is
//! damaged is a torn tail (cut it: it was never acknowledged) or lost acknowledged data
//! (refuse, unless the operator accepts the loss). docs/storage-format.md ("Recovery") states
//! the rule; `Damage::verdict` is its one implementation.

use tracing::{error, info, warn};

use super::index::LogIndex;
use super::scan::{scan_file, FileScan};
use crate::backend::IoBackend;
use crate::format::{next_index, parse_segment_name, HIGHEST_INDEX, SEGMENT_HEADER_LEN};
use crate::{LogLoss, LogOptions, RecoveryReport, StorageError, TornTail};

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

    let mut scans = Vec::with_capacity(names.len());
    for (first, name) in &names {
        scans.push(scan_file(backend, name, *first, opts.max_record_bytes)?);
    }

    let mut index = LogIndex::default();
    let mut damage = None;
    for (at, scan) in scans.iter_mut().enumerate() {
        if let Some((last, _)) = index.last() {
            // Checked: a file may follow the record of the highest index, and no index can.
            let follows = match next_index(last) {
                None => Some(Damage {
                    past_the_end: true,
                    ..Damage::at(
                        at,
                        0,
                        u64::MAX,
                        format!(
                            "segment file {} follows the record of index {last}, the highest \
                             index a log holds",
                            scan.path.display()
                        ),
                    )
                }),
                Some(e) if e != scan.first => Some(Damage::at(
                    at,
                    0,
                    e,
                    format!(
                        "segment starts at index {} but the previous one ends at {last}",
                        scan.first
                    ),
                )),
                Some(_) => None,
            };
            if follows.is_some() {
                damage = follows;
                break;
            }
        }
        let entries = std::mem::take(&mut scan.entries);
        if let Some((offset, reason)) = scan.problem.clone() {
            let first_lost = scan.first.saturating_add(entries.len() as u64);
            if !entries.is_empty() {
                index.segments.push(scan.segment(entries, offset));
            }
            damage = Some(Damage::at(at, offset, first_lost, reason));
            break;
        }
        if entries.is_empty() {
            info!(segment = %scan.path.display(), "removing a segment that holds no records");
            remove_durably(backend, &scan.name)?;
            continue;
        }
        let end = scan.end;
        index.segments.push(scan.segment(entries, end));
    }

    let last = index.last().map_or(0, |(last, _)| last);
    let truncated = match damage {
        Some(d) => Some(cut(backend, opts, &scans, d)?),
        None if last < opts.durable_through => {
            let loss = LogLoss {
                segment: backend.locate(""),
                offset: 0,
                reason: format!(
                    "the log ends at index {last} but index {} was already acknowledged as \
                     durable: the records after {last} are missing",
                    opts.durable_through
                ),
                first_index: last.saturating_add(1),
                last_index: opts.durable_through,
                readable_records: 0,
                bytes: 0,
            };
            if !opts.accept_data_loss {
                return Err(StorageError::DataLoss(Box::new(loss)));
            }
            error!("accept_data_loss: starting without {loss}");
            None
        }
        None => None,
    };
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

/// The first place the contiguous run of records breaks.
struct Damage {
    /// Position in the scans of the file the break is in.
    file: usize,
    offset: u64,
    /// The index the first unreadable record should have held.
    first_lost: u64,
    reason: String,
    /// The break is a file after the record of the highest index.
    past_the_end: bool,
}

impl Damage {
    fn at(file: usize, offset: u64, first_lost: u64, reason: String) -> Damage {
        Damage {
            file,
            offset,
            first_lost,
            reason,
            past_the_end: false,
        }
    }

    /// What cutting at this break would drop, and `Some(why)` when that is acknowledged data
    /// rather than a torn tail.
    fn verdict(&self, scans: &[FileScan], opts: &LogOptions) -> (LogLoss, Option<String>) {
        let rest = &scans[self.file..];
        let readable = rest.iter().map(FileScan::readable).sum::<u64>();
        let last_seen = rest
            .iter()
            .flat_map(|s| [s.after.last_index, s.last_entry()])
            .flatten()
            .max();
        let bytes =
            rest[0].len.saturating_sub(self.offset) + rest[1..].iter().map(|s| s.len).sum::<u64>();
        let loss = LogLoss {
            segment: rest[0].path.clone(),
            offset: self.offset,
            reason: self.reason.clone(),
            first_index: self.first_lost,
            last_index: last_seen
                .unwrap_or(self.first_lost)
                .max(self.first_lost)
                .max(opts.durable_through),
            readable_records: readable,
            bytes,
        };
        // Valid records in a LATER segment prove the damaged one was whole once: a segment is
        // fsynced before the next is created. Inside the last segment, records past the damage
        // can be unsynced writes that reached the disk out of order, so there only the durable
        // point decides. (`entries` of the damaged file were taken; a file left with its
        // entries is a whole later segment after a gap.)
        let later =
            rest[1..].iter().map(FileScan::readable).sum::<u64>() + rest[0].entries.len() as u64;
        // The writer never creates a file whose records would lie past the highest index, so
        // such a file is no torn write of this log: someone else put it there.
        let foreign = rest
            .iter()
            .find(|s| s.first > HIGHEST_INDEX)
            .or(self.past_the_end.then_some(&rest[0]));
        let why = if let Some(f) = foreign {
            Some(format!(
                "no write of this log made {}: its records would lie past index {HIGHEST_INDEX}, \
                 the highest a log holds",
                f.path.display()
            ))
        } else if later > 0 {
            Some(format!(
                "{later} valid records follow in later segments, so it is not a torn write at \
                 the end of the log"
            ))
        } else if self.first_lost <= opts.durable_through {
            Some(format!(
                "index {} is at or below index {}, which was already acknowledged as durable \
                 (persisted committed index or checkpoint)",
                self.first_lost, opts.durable_through
            ))
        } else {
            None
        };
        (loss, why)
    }
}

/// Cuts the log at `d` when it is a torn tail or the operator accepted the loss; refuses
/// otherwise.
fn cut(
    backend: &dyn IoBackend,
    opts: &LogOptions,
    scans: &[FileScan],
    d: Damage,
) -> Result<TornTail, StorageError> {
    let (mut loss, why) = d.verdict(scans, opts);
    if let Some(why) = &why {
        loss.reason = format!("{}; {why}", loss.reason);
        if !opts.accept_data_loss {
            return Err(StorageError::DataLoss(Box::new(loss)));
        }
    }
    // Later segments go first, newest first, each removal durable before the next, so a crash
    // mid-cut still leaves a contiguous prefix on any filesystem.
    for later in scans[d.file + 1..].iter().rev() {
        warn!(segment = %later.path.display(), bytes = later.len, "removing a segment after the cut");
        remove_durably(backend, &later.name)?;
    }
    let here = &scans[d.file];
    // A segment left without records is removed whole: the index never holds an empty one.
    if d.offset <= SEGMENT_HEADER_LEN {
        remove_durably(backend, &here.name)?;
    } else {
        here.file
            .set_len(d.offset)
            .and_then(|()| here.file.sync_data())
            .map_err(StorageError::io("truncate segment", &here.path))?;
    }
    match &why {
        Some(_) => error!("accept_data_loss: dropped acknowledged {loss}"),
        None => warn!(
            segment = %loss.segment.display(),
            offset = loss.offset,
            cut_bytes = loss.bytes,
            first_index = loss.first_index,
            reason = %loss.reason,
            "cut a torn tail from the log (never acknowledged)"
        ),
    }
    Ok(TornTail {
        segment: loss.segment.clone(),
        offset: loss.offset,
        cut_bytes: loss.bytes,
        reason: loss.reason.clone(),
        first_lost_index: loss.first_index,
        accepted_loss: why.map(|_| loss),
    })
}

fn remove_durably(backend: &dyn IoBackend, name: &str) -> Result<(), StorageError> {
    let path = backend.locate(name);
    backend
        .remove(name)
        .map_err(StorageError::io("remove segment", &path))?;
    backend
        .sync_dir()
        .map_err(StorageError::io("sync directory of", backend.locate("")))
}
