//! The id files a snapshot stream carries (docs/storage-format.md "The id files in the
//! stream"): every complete id file of `ids/` when the source opens, each hard-linked under a
//! name of this stream so that a merge or an expiry removing the name later changes nothing
//! that is sent, and opened one at a time while it is read: a link costs no descriptor, so a
//! stream of 65 536 files holds at most one (review s31 H2).

use std::io::ErrorKind;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use super::ids_part::{encode_entry_head, ENTRY_HEAD, MAX_IDS_FILES};
use crate::backend::{IoBackend, SegmentFile};
use crate::ids::{parse_id_file_name, IdFileReader};
use crate::StorageError;

/// Links of a stream are named `send-<stream>-<id file name>`: no id file name, so the id
/// store, its merges and expiries never see them. Removed when the source drops, and every
/// leftover (a crash mid-stream) by `remove_send_links` at the group's open.
const LINK_PREFIX: &str = "send-";
/// Listings tried for names that appeared after the previous one (a merge's output listed
/// after its inputs vanished).
const LIST_TRIES: usize = 8;

static STREAMS: AtomicU64 = AtomicU64::new(0);

/// One id file of the stream: its entry head and the link holding its inode.
pub(crate) struct IdEntry {
    pub head: [u8; ENTRY_HEAD],
    pub len: u64,
    pub name: String,
    link: String,
}

impl IdEntry {
    /// Head and file: the entry's bytes in the stream.
    pub fn stream_len(&self) -> u64 {
        ENTRY_HEAD as u64 + self.len
    }
}

/// The stream's links: the directory, its entries, and the one file open now.
pub(crate) struct IdLinks {
    dir: Arc<dyn IoBackend>,
    pub entries: Vec<IdEntry>,
    open: Mutex<Option<(usize, Arc<dyn SegmentFile>)>>,
}

impl IdLinks {
    /// Entry `i`'s file, opening it (and closing the previous one) if it is not the open one.
    pub fn file(&self, i: usize) -> Result<Arc<dyn SegmentFile>, StorageError> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((at, f)) = open.as_ref() {
            if *at == i {
                return Ok(f.clone());
            }
        }
        *open = None;
        let link = &self.entries[i].link;
        let f = self
            .dir
            .open(link)
            .map_err(|e| StorageError::SnapshotUnavailable {
                reason: format!("opening id file link {link} for a snapshot: {e}"),
            })?;
        *open = Some((i, f.clone()));
        Ok(f)
    }
}

impl Drop for IdLinks {
    fn drop(&mut self) {
        *self.open.get_mut().unwrap_or_else(PoisonError::into_inner) = None;
        for e in &self.entries {
            if let Err(err) = self.dir.remove(&e.link) {
                tracing::warn!(link = %e.link, error = %err, "a snapshot's id file link was not removed");
            }
        }
    }
}

/// Removes every stream link left in `ids` (a crash or kill during a stream); call before any
/// stream of the directory opens.
pub fn remove_send_links(ids: &dyn IoBackend) -> Result<usize, StorageError> {
    let mut n = 0;
    for name in ids
        .list()
        .map_err(StorageError::io("list", ids.locate(".")))?
    {
        if name.starts_with(LINK_PREFIX) {
            ids.remove(&name)
                .map_err(StorageError::io("remove", ids.locate(&name)))?;
            n += 1;
        }
    }
    Ok(n)
}

/// Every id file of `ids` whose header verifies against its name and length, in name order.
/// A file without a valid header is being written (its header comes last) or is damaged:
/// either way it is not sent, and its ids are still in the table the checkpoint holds or came
/// after it. A name gone before it was linked (a merge's input, an expiry) is skipped; the
/// directory is listed again for names not yet seen until a listing adds none: a merge's
/// output holds every pair of its inputs (review s31 M1: restarting the whole listing
/// starved on a busy leader).
pub(crate) fn open_id_files(ids: Arc<dyn IoBackend>) -> Result<IdLinks, StorageError> {
    let unavailable = |reason: String| StorageError::SnapshotUnavailable { reason };
    let stream = STREAMS.fetch_add(1, Ordering::Relaxed);
    let mut links = IdLinks {
        dir: ids.clone(),
        entries: Vec::new(),
        open: Mutex::new(None),
    };
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..LIST_TRIES {
        let mut names: Vec<String> = ids
            .list()
            .map_err(StorageError::io("list", ids.locate(".")))?
            .into_iter()
            .filter(|n| parse_id_file_name(n).is_some() && !seen.contains(n))
            .collect();
        if names.is_empty() {
            break;
        }
        names.sort_unstable();
        for name in names {
            seen.insert(name.clone());
            if seen.len() > MAX_IDS_FILES as usize {
                return Err(unavailable(format!(
                    "more than the {MAX_IDS_FILES} id files a snapshot carries"
                )));
            }
            let Some((generation, source)) = parse_id_file_name(&name) else {
                continue;
            };
            let link = format!("{LINK_PREFIX}{stream}-{name}");
            match ids.link(&name, &link) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::NotFound => continue,
                Err(e) => return Err(StorageError::io("link", ids.locate(&name))(e)),
            }
            // Pushed first: the drop removes the link whatever follows.
            links.entries.push(IdEntry {
                head: [0; ENTRY_HEAD],
                len: 0,
                name: name.clone(),
                link: link.clone(),
            });
            // The header read is of the linked inode, the one that is streamed; the reader's
            // descriptor closes at the end of this step.
            match IdFileReader::open(&*ids, &link, generation, source) {
                Ok(r) => {
                    let (_, len) = r.into_file();
                    let head = encode_entry_head(&name, len).map_err(unavailable)?;
                    if let Some(e) = links.entries.last_mut() {
                        e.head = head;
                        e.len = len;
                    }
                }
                Err(StorageError::CorruptIdFile { .. }) => {
                    if let Some(e) = links.entries.pop() {
                        if let Err(err) = ids.remove(&e.link) {
                            tracing::warn!(link = %e.link, error = %err, "a snapshot's id file link was not removed");
                        }
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }
    links.entries.sort_unstable_by(|a, b| a.name.cmp(&b.name));
    Ok(links)
}
