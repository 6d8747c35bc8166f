//! A joining member's horizon (docs/cluster.md "Tenants", review s27 tenants H1, s28 M-3): the
//! committed index the group's leader answered a commit read with after this process started
//! (`join_read`, `commit_read`). Every entry committed before the node came back lies at or
//! below it, since the leader confirmed its lead after the read arrived and its commit only
//! grows. Kept durably beside the joining marker (`<marker>-commit`), written before any append
//! reaches openraft. A snapshot is not gated and may be installed first (review s33 L-5):
//! safe, since while the marker or this file stands the broker opens every declaration a
//! snapshot carries joining (`checkpoint_declarations::ever_joined`). A file a build
//! before session 32's fix wrote (from the first append) is still read as it stands.
//!
//! The broker reads it on the `default` group's apply: a tenant declared at or below it may
//! have had a group this node voted in before its directory was wiped, and that group opens
//! joining; one declared above it was declared after the node came back, and is founded as
//! on any node. It outlives the marker (the apply may lag the log the marker's removal
//! weighs): the `default` apply removes it once it passed it with the marker gone (a failed
//! removal keeps it, harmlessly), and a later join removes any left before its fresh marker.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The horizon file's first line: its format and version.
const HEADER: &str = "queen-join-horizon 1";

/// The longest horizon file read: its header, `index=` and a u64 fit with room to spare. A
/// longer file is damaged and is not read into memory (review s32 L-2).
const MAX_LEN: u64 = 64;

/// Where the horizon of the joining marker at `marker` is kept.
pub fn horizon_path(marker: &Path) -> PathBuf {
    let mut name = marker.file_name().unwrap_or_default().to_os_string();
    name.push("-commit");
    marker.with_file_name(name)
}

/// The horizon kept beside `marker`, if one was written. A file that does not read is an
/// error naming it: guessing a horizon could let this node found a group it voted in once.
pub fn read_horizon(marker: &Path) -> Result<Option<u64>, String> {
    use std::io::Read;
    let path = horizon_path(marker);
    let file = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("reading {}: {e}", path.display())),
    };
    let bad = || {
        format!(
            "{} is not a joining horizon; remove it and its node's data directory and rejoin \
             (docs/cluster.md \"Tenants\")",
            path.display()
        )
    };
    // One byte past the limit is read, so a longer file is told from one at the limit.
    let mut text = Vec::new();
    file.take(MAX_LEN + 1)
        .read_to_end(&mut text)
        .map_err(|e| format!("reading {}: {e}", path.display()))?;
    if text.len() as u64 > MAX_LEN {
        return Err(format!("{} (longer than {MAX_LEN} bytes)", bad()));
    }
    let text = std::str::from_utf8(&text).map_err(|_| bad())?;
    let mut lines = text.split('\n');
    if lines.next() != Some(HEADER) {
        return Err(bad());
    }
    let index = lines
        .next()
        .and_then(|l| l.strip_prefix("index="))
        .and_then(|n| n.parse::<u64>().ok())
        .ok_or_else(bad)?;
    match (lines.next(), lines.next()) {
        (Some(""), None) => Ok(Some(index)),
        _ => Err(bad()),
    }
}

/// Writes the horizon beside `marker` durably (a temporary file fsynced, renamed, the
/// directory fsynced).
pub fn write_horizon(marker: &Path, index: u64) -> std::io::Result<()> {
    let path = horizon_path(marker);
    let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
    tmp_name.push(".tmp");
    let tmp = path.with_file_name(tmp_name);
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(format!("{HEADER}\nindex={index}\n").as_bytes())?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, &path)?;
    sync_parent(&path)
}

/// Removes the horizon beside `marker`; one already gone counts as removed.
pub fn remove_horizon(marker: &Path) -> std::io::Result<()> {
    let path = horizon_path(marker);
    match std::fs::remove_file(&path) {
        Ok(()) => sync_parent(&path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

fn sync_parent(path: &Path) -> std::io::Result<()> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => std::fs::File::open(dir)?.sync_all(),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_horizon_is_kept_beside_its_marker_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("cluster-joining");
        assert_eq!(
            horizon_path(&marker),
            dir.path().join("cluster-joining-commit")
        );
        assert_eq!(read_horizon(&marker).unwrap(), None);
        write_horizon(&marker, 42).unwrap();
        assert_eq!(read_horizon(&marker).unwrap(), Some(42));
        write_horizon(&marker, 43).unwrap();
        assert_eq!(read_horizon(&marker).unwrap(), Some(43));
        remove_horizon(&marker).unwrap();
        remove_horizon(&marker).unwrap();
        assert_eq!(read_horizon(&marker).unwrap(), None);
    }

    #[test]
    fn a_damaged_horizon_is_refused_naming_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("cluster-joining");
        for text in [
            "",
            "index=4\n",
            "queen-join-horizon 1\nindex=x\n",
            "queen-join-horizon 1\nindex=4\nmore\n",
            "queen-join-horizon 1\nindex=4",
        ] {
            std::fs::write(horizon_path(&marker), text).unwrap();
            let e = read_horizon(&marker).unwrap_err();
            assert!(e.contains("cluster-joining-commit"), "{text:?}: {e}");
        }
    }

    /// Review s32 L-2: a huge file is refused without being read whole (a sparse 8 GiB file:
    /// read whole, it would take 8 GiB of memory).
    #[test]
    fn an_oversized_horizon_is_refused_unread() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("cluster-joining");
        let f = std::fs::File::create(horizon_path(&marker)).unwrap();
        f.set_len(8 << 30).unwrap();
        let e = read_horizon(&marker).unwrap_err();
        assert!(e.contains("longer than 64 bytes"), "{e}");
        std::fs::write(
            horizon_path(&marker),
            format!("{HEADER}\nindex={}\n", u64::MAX),
        )
        .unwrap();
        assert_eq!(read_horizon(&marker).unwrap(), Some(u64::MAX));
    }
}
