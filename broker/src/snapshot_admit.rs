//! Whether a snapshot stream announced by its header fits on this node's disk, judged before
//! any byte past the header is written (`SnapshotReceiver`'s admit): a refusal costs the
//! sender a retry later, never this node a full disk.

use std::path::PathBuf;
use std::sync::Arc;

use queenmq_storage::{AdmitFn, SnapshotHeader};

/// The space an install takes at its peak beyond the stream's own file: the state copied into
/// the state store, the records into `log-incoming` and the id files into `ids-incoming`
/// (docs/storage-format.md "Install on the receiver", "The id files in the stream"), so
/// twice the stream in all.
fn needed(h: &SnapshotHeader) -> u64 {
    h.state_len
        .saturating_add(h.records_len)
        .saturating_add(h.ids_len)
        .saturating_mul(2)
}

/// Admits a stream when the file system of `data_dir` has room for `needed`.
pub fn admit(data_dir: PathBuf) -> Arc<AdmitFn> {
    Arc::new(move |h: &SnapshotHeader| {
        let need = needed(h);
        let free = fs4::available_space(&data_dir)
            .map_err(|e| format!("cannot read the free space of {}: {e}", data_dir.display()))?;
        if free < need {
            return Err(format!(
                "the snapshot needs {need} bytes free in {} and {free} are",
                data_dir.display()
            ));
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(state_len: u64, records_len: u64) -> SnapshotHeader {
        SnapshotHeader {
            applied_index: 10,
            applied_term: 1,
            first_record: 5,
            state_len,
            records_len,
            state_crc: 0,
            ids_len: 0,
            ids_files: 0,
        }
    }

    #[test]
    fn a_stream_larger_than_the_free_space_is_refused_and_a_small_one_admitted() {
        let dir = tempfile::tempdir().unwrap();
        let admit = admit(dir.path().to_path_buf());
        assert!(admit(&header(1000, 1000)).is_ok());
        let err = admit(&header(u64::MAX / 4, 0)).unwrap_err();
        assert!(err.contains("needs"), "{err}");
        // The id files count too (session 31): a small state with a huge ids part is refused.
        let ids = SnapshotHeader {
            ids_len: u64::MAX / 4,
            ids_files: 1,
            ..header(1000, 1000)
        };
        assert!(admit(&ids).unwrap_err().contains("needs"));
    }
}
