//! The ledger of tenant groups this node opened (review s31 tenants M2, docs/storage-format.md
//! "Opened ledger"): `<data_dir>/tenants-opened/<tenant>`, an empty file per tenant, made
//! durable (file and directory fsynced) by `hosted::mark_opened` before the record's `opened`
//! line, so before the group's Raft starts and can vote. Kept apart from the hosted record:
//! if the record and the tenant's directory are both lost, the record is written again from
//! the `default` group's checkpoint or log as a fresh, unopened one, and only this ledger
//! still says the node may have voted in that group. `Declarations::declared` then writes the
//! tenant's joining marker first, so the group opens joining and grants no vote until it
//! caught up as a learner. Names are only ever added.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context};
use queenmq_protocol::check_tenant_name;

/// The directory below the data dir that holds the ledger.
pub const OPENED_DIR: &str = "tenants-opened";

fn path_of(data_dir: &Path, tenant: &str) -> PathBuf {
    data_dir.join(OPENED_DIR).join(tenant)
}

fn damaged(path: &Path, why: &str) -> anyhow::Error {
    anyhow!(
        "{} is not an entry of the opened-groups ledger ({why}); refusing to start: if the \
         tenant's group was ever opened on this node, make it an empty file, otherwise move it \
         out (docs/storage-format.md \"Opened ledger\")",
        path.display()
    )
}

/// Whether this node opened `tenant`'s group once. An entry that is not an empty regular file
/// is an error naming it: reading it as absent could let the group vote again.
pub fn contains(data_dir: &Path, tenant: &str) -> anyhow::Result<bool> {
    check_tenant_name(tenant).map_err(|e| anyhow!("{e}"))?;
    let path = path_of(data_dir, tenant);
    let meta = match std::fs::symlink_metadata(&path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    if !meta.is_file() {
        return Err(damaged(&path, "not a regular file"));
    }
    if meta.len() != 0 {
        return Err(damaged(&path, "not empty"));
    }
    Ok(true)
}

/// Adds `tenant` durably: the file created and fsynced, then its directory (and the
/// directory's own name). Already there counts as added.
pub fn note(data_dir: &Path, tenant: &str) -> anyhow::Result<()> {
    if contains(data_dir, tenant)? {
        return Ok(());
    }
    let dir = data_dir.join(OPENED_DIR);
    queenmq_storage::create_dir_durable(&dir)
        .and_then(|_| queenmq_storage::sync_parent(&dir))
        .with_context(|| format!("creating {}", dir.display()))?;
    let path = path_of(data_dir, tenant);
    std::fs::File::create(&path)
        .and_then(|f| f.sync_all())
        .and_then(|()| queenmq_storage::sync_parent(&path))
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// Reads the whole ledger at start, before `default` opens: a damaged entry (a name that is
/// not a tenant's, a file that is not empty) stops the start with a message naming it. The
/// names, in order.
pub fn check_all(data_dir: &Path) -> anyhow::Result<Vec<String>> {
    let dir = data_dir.join(OPENED_DIR);
    let Some(entries) = super::dir_listing::entries_if_any(&dir)? else {
        return Ok(Vec::new());
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.with_context(|| format!("listing {}", dir.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if check_tenant_name(&name).is_err() || name == queenmq_protocol::DEFAULT_TENANT {
            return Err(damaged(&entry.path(), "not a tenant's name"));
        }
        contains(data_dir, &name)?;
        names.push(name);
    }
    names.sort();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_noted_tenant_is_kept_and_a_damaged_entry_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!contains(dir.path(), "acme").unwrap());
        assert!(check_all(dir.path()).unwrap().is_empty());
        note(dir.path(), "acme").unwrap();
        note(dir.path(), "acme").unwrap();
        note(dir.path(), "beta").unwrap();
        assert!(contains(dir.path(), "acme").unwrap());
        assert_eq!(check_all(dir.path()).unwrap(), ["acme", "beta"]);
        // A flipped byte: the entry is no longer empty.
        std::fs::write(path_of(dir.path(), "beta"), b"x").unwrap();
        let e = format!("{:#}", contains(dir.path(), "beta").unwrap_err());
        assert!(e.contains("tenants-opened/beta"), "{e}");
        let e = format!("{:#}", check_all(dir.path()).unwrap_err());
        assert!(e.contains("tenants-opened/beta"), "{e}");
        std::fs::write(path_of(dir.path(), "beta"), b"").unwrap();
        // A name that is no tenant's.
        std::fs::write(dir.path().join(OPENED_DIR).join("a b"), b"").unwrap();
        let e = format!("{:#}", check_all(dir.path()).unwrap_err());
        assert!(e.contains("tenants-opened/a b"), "{e}");
        std::fs::remove_file(dir.path().join(OPENED_DIR).join("a b")).unwrap();
        // A directory where an entry should be.
        std::fs::create_dir(path_of(dir.path(), "gamma")).unwrap();
        assert!(check_all(dir.path()).is_err());
        assert!(contains(dir.path(), "gamma").is_err());
    }
}
