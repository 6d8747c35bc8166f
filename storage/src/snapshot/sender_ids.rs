//! The id files a snapshot stream carries (docs/storage-format.md "The id files in the
//! stream"): every complete id file of `ids/` when the source opens, held open so that a
//! merge or an expiry renaming or removing names later changes nothing that is sent.

use std::io::ErrorKind;
use std::sync::Arc;

use super::ids_part::{encode_entry_head, ENTRY_HEAD, MAX_IDS_FILES};
use crate::backend::{IoBackend, SegmentFile};
use crate::ids::{parse_id_file_name, IdFileReader};
use crate::StorageError;

/// Listings tried when a listed file vanished before it was opened (a merge or an expiry
/// between the two): a name gone may be a merge's input whose output was not listed.
const LIST_TRIES: usize = 8;

/// One id file of the stream: its entry head and its open descriptor.
pub(crate) struct IdEntry {
    pub head: [u8; ENTRY_HEAD],
    pub file: Arc<dyn SegmentFile>,
    pub len: u64,
    pub name: String,
}

impl IdEntry {
    /// Head and file: the entry's bytes in the stream.
    pub fn stream_len(&self) -> u64 {
        ENTRY_HEAD as u64 + self.len
    }
}

/// Every id file of `ids` whose header verifies against its name and length, in name order.
/// A file without a valid header is being written (its header comes last) or is damaged:
/// either way it is not sent, and its ids are still in the table the checkpoint holds or came
/// after it.
pub(crate) fn open_id_files(ids: &dyn IoBackend) -> Result<Vec<IdEntry>, StorageError> {
    let unavailable = |reason: String| StorageError::SnapshotUnavailable { reason };
    'listing: for _ in 0..LIST_TRIES {
        let mut names: Vec<String> = ids
            .list()
            .map_err(StorageError::io("list", ids.locate(".")))?
            .into_iter()
            .filter(|n| parse_id_file_name(n).is_some())
            .collect();
        names.sort_unstable();
        if names.len() > MAX_IDS_FILES as usize {
            return Err(unavailable(format!(
                "{} id files, more than the {MAX_IDS_FILES} a snapshot carries",
                names.len()
            )));
        }
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            let Some((generation, source)) = parse_id_file_name(&name) else {
                continue;
            };
            match IdFileReader::open(ids, &name, generation, source) {
                Ok(r) => {
                    let (file, len) = r.into_file();
                    let head = encode_entry_head(&name, len).map_err(unavailable)?;
                    out.push(IdEntry {
                        head,
                        file,
                        len,
                        name,
                    });
                }
                Err(StorageError::CorruptIdFile { .. }) => {}
                Err(StorageError::Io { source, .. }) if source.kind() == ErrorKind::NotFound => {
                    continue 'listing
                }
                Err(e) => return Err(e),
            }
        }
        return Ok(out);
    }
    Err(unavailable(format!(
        "the id files kept changing while {LIST_TRIES} listings were opened"
    )))
}
