//! Bytes on disk: the segment log from its in-memory index, the rest of the data directory
//! and its file system from metadata. No file is read.

use std::io;
use std::path::Path;

use queenmq_storage::SegmentLog;

use crate::group::open::STATE_FILE;

/// One group's files: its log and its state file (in `dir`, the group's directory).
pub fn record_group(tenant: &str, log: &SegmentLog, dir: &Path) {
    let t = || [("tenant", tenant.to_owned())];
    metrics::gauge!("queen_log_segment_bytes", &t()).set(log.disk_bytes() as f64);
    metrics::gauge!("queen_log_segments", &t()).set(log.segment_count() as f64);
    match std::fs::metadata(dir.join(STATE_FILE)) {
        Ok(m) => metrics::gauge!("queen_state_file_bytes", &t()).set(m.len() as f64),
        Err(e) => tracing::debug!(error = %e, "no size for the state file"),
    }
}

/// The whole data dir (every group's files) and its file system.
pub fn record_node(data_dir: &Path) {
    match dir_bytes(data_dir) {
        Ok(n) => metrics::gauge!("queen_data_dir_bytes").set(n as f64),
        Err(e) => tracing::debug!(error = %e, "no size for the data dir"),
    }
    match fs4::statvfs(data_dir) {
        Ok(fs) => {
            metrics::gauge!("queen_data_dir_available_bytes").set(fs.available_space() as f64);
            metrics::gauge!("queen_data_dir_capacity_bytes").set(fs.total_space() as f64);
        }
        Err(e) => tracing::debug!(error = %e, "no file-system statistics for the data dir"),
    }
}

/// Apparent size of every file below `dir`. Links are not followed: nothing outside the data
/// directory is counted, and a loop cannot recurse.
pub fn dir_bytes(dir: &Path) -> io::Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        if kind.is_dir() {
            total += dir_bytes(&entry.path())?;
        } else if kind.is_file() {
            total += entry.metadata()?.len();
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn counts_files_in_subdirectories_and_skips_links() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("state.redb"), [0u8; 100]).unwrap();
        std::fs::create_dir(dir.path().join("log")).unwrap();
        std::fs::write(dir.path().join("log").join("seg"), [0u8; 23]).unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("big"), [0u8; 1000]).unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("link")).unwrap();
        assert_eq!(dir_bytes(dir.path()).unwrap(), 123);
    }
}
