//! Listing a directory that may not exist yet: the group records (`hosted/`, `tenants/`,
//! `tenants-opened/`) are made at their first write, so a node that never wrote one has no
//! directory, and that is "nothing recorded", not an error. Any other failure to list is one,
//! named with the directory, since a record skipped for a transient error would change what
//! the start decides.

use std::path::Path;

use anyhow::anyhow;

/// The entries of `dir`, or `None` when it does not exist.
pub fn entries_if_any(dir: &Path) -> anyhow::Result<Option<std::fs::ReadDir>> {
    match std::fs::read_dir(dir) {
        Ok(entries) => Ok(Some(entries)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(anyhow!("listing {}: {e}", dir.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_directory_is_none_and_a_file_in_its_place_is_an_error() {
        let tmp = tempfile::tempdir().unwrap();
        assert!(entries_if_any(&tmp.path().join("absent"))
            .unwrap()
            .is_none());
        std::fs::create_dir(tmp.path().join("there")).unwrap();
        std::fs::write(tmp.path().join("there/a"), b"").unwrap();
        let listed = entries_if_any(&tmp.path().join("there")).unwrap().unwrap();
        assert_eq!(listed.count(), 1);
        std::fs::write(tmp.path().join("file"), b"").unwrap();
        let err = entries_if_any(&tmp.path().join("file")).unwrap_err();
        assert!(err.to_string().contains("listing"), "{err}");
    }
}
