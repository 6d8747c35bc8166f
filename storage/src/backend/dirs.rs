//! Directory entries made durable. POSIX makes a created, renamed or removed name durable only
//! when its directory is fsynced; these helpers do that so no caller can forget. Generic over
//! `DirOps` so a test can check the order of mkdir and fsync without a real disk.

use std::io;
use std::path::{Path, PathBuf};

/// The two directory operations the helpers need.
pub(crate) trait DirOps {
    fn exists(&self, path: &Path) -> bool;
    fn mkdir(&self, path: &Path) -> io::Result<()>;
    fn fsync_dir(&self, path: &Path) -> io::Result<()>;
}

pub(crate) struct RealDirs;

impl DirOps for RealDirs {
    fn exists(&self, path: &Path) -> bool {
        path.is_dir()
    }

    fn mkdir(&self, path: &Path) -> io::Result<()> {
        match std::fs::create_dir(path) {
            // Another process made it between our check and our mkdir: it still needs the fsync.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && path.is_dir() => Ok(()),
            other => other,
        }
    }

    fn fsync_dir(&self, path: &Path) -> io::Result<()> {
        std::fs::File::open(path)?.sync_all()
    }
}

/// Creates `dir` and every missing ancestor, fsyncing each created level's parent right after
/// the mkdir, so once this returns the whole path survives a power cut. Returns the levels it
/// created, outermost first.
pub fn create_dir_durable(dir: &Path) -> io::Result<Vec<PathBuf>> {
    create_dir_durable_with(&RealDirs, dir)
}

pub(crate) fn create_dir_durable_with(ops: &dyn DirOps, dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut missing = Vec::new();
    let mut at = Some(dir);
    while let Some(p) = at {
        if p.as_os_str().is_empty() || ops.exists(p) {
            break;
        }
        missing.push(p.to_path_buf());
        at = p.parent();
    }
    missing.reverse();
    for level in &missing {
        ops.mkdir(level)?;
        ops.fsync_dir(&parent_of(level))?;
    }
    Ok(missing)
}

/// Fsyncs the directory holding `path`, making a create, rename or removal of `path` durable.
pub fn sync_parent(path: &Path) -> io::Result<()> {
    RealDirs.fsync_dir(&parent_of(path))
}

/// The directory holding `path`; "." for a bare relative name.
fn parent_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::BTreeSet;

    use super::*;

    /// A strict model: a created directory survives a crash only if its parent was fsynced
    /// after the mkdir (and the parent itself survives).
    #[derive(Default)]
    struct Model {
        present: RefCell<BTreeSet<PathBuf>>,
        durable: RefCell<BTreeSet<PathBuf>>,
        log: RefCell<Vec<String>>,
    }

    impl DirOps for Model {
        fn exists(&self, path: &Path) -> bool {
            self.present.borrow().contains(path)
        }
        fn mkdir(&self, path: &Path) -> io::Result<()> {
            self.present.borrow_mut().insert(path.to_path_buf());
            self.log
                .borrow_mut()
                .push(format!("mkdir {}", path.display()));
            Ok(())
        }
        fn fsync_dir(&self, path: &Path) -> io::Result<()> {
            let children: Vec<PathBuf> = self
                .present
                .borrow()
                .iter()
                .filter(|c| c.parent() == Some(path))
                .cloned()
                .collect();
            self.durable.borrow_mut().extend(children);
            self.log
                .borrow_mut()
                .push(format!("fsync {}", path.display()));
            Ok(())
        }
    }

    #[test]
    fn every_created_level_is_durable_on_return() {
        let m = Model::default();
        m.present.borrow_mut().insert(PathBuf::from("/srv"));
        m.durable.borrow_mut().insert(PathBuf::from("/srv"));
        let made = create_dir_durable_with(&m, Path::new("/srv/queen/data")).unwrap();
        assert_eq!(
            made,
            vec![
                PathBuf::from("/srv/queen"),
                PathBuf::from("/srv/queen/data")
            ]
        );
        assert_eq!(
            *m.log.borrow(),
            vec![
                "mkdir /srv/queen",
                "fsync /srv",
                "mkdir /srv/queen/data",
                "fsync /srv/queen"
            ]
        );
        // A crash after any step keeps a prefix of the path, and all of it after the last one.
        assert_eq!(*m.durable.borrow(), *m.present.borrow());
    }

    #[test]
    fn an_existing_directory_costs_nothing() {
        let m = Model::default();
        m.present.borrow_mut().insert(PathBuf::from("/srv"));
        assert!(create_dir_durable_with(&m, Path::new("/srv"))
            .unwrap()
            .is_empty());
        assert!(m.log.borrow().is_empty());
    }

    #[test]
    fn real_directories_are_created() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("a/b/c");
        let made = create_dir_durable(&target).unwrap();
        assert_eq!(made.len(), 3);
        assert!(target.is_dir());
        sync_parent(&target).unwrap();
        assert!(create_dir_durable(&target).unwrap().is_empty());
    }
}
