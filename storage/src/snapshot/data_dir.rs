//! The data directory as the install sees it: its own files (`snapshot-incoming*`) and the
//! log directories it builds, renames and deletes (docs/storage-format.md "Install on the
//! receiver"). On a real disk, or on an in-memory tree whose crash images the tests restart.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::backend::{FileBackend, IoBackend, MemBackend};

pub trait DataDir: Send + Sync {
    /// The directory's own files; its `sync_dir` makes renames and removals here durable.
    fn files(&self) -> Arc<dyn IoBackend>;
    fn has_dir(&self, name: &str) -> bool;
    /// The child directory `name`, created if missing (its name durable after `sync_dir`).
    fn make_dir(&self, name: &str) -> io::Result<Arc<dyn IoBackend>>;
    /// rename(2) of a child directory onto a name that does not exist.
    fn rename_dir(&self, from: &str, to: &str) -> io::Result<()>;
    fn remove_dir_all(&self, name: &str) -> io::Result<()>;
}

/// A data directory on disk.
pub struct DiskDataDir {
    path: PathBuf,
    files: Arc<FileBackend>,
}

impl DiskDataDir {
    pub fn new(path: &Path) -> io::Result<DiskDataDir> {
        Ok(DiskDataDir {
            path: path.to_path_buf(),
            files: Arc::new(FileBackend::new(path)?),
        })
    }
}

impl DataDir for DiskDataDir {
    fn files(&self) -> Arc<dyn IoBackend> {
        self.files.clone()
    }

    fn has_dir(&self, name: &str) -> bool {
        self.path.join(name).is_dir()
    }

    fn make_dir(&self, name: &str) -> io::Result<Arc<dyn IoBackend>> {
        Ok(Arc::new(FileBackend::new(&self.path.join(name))?))
    }

    fn rename_dir(&self, from: &str, to: &str) -> io::Result<()> {
        std::fs::rename(self.path.join(from), self.path.join(to))
    }

    fn remove_dir_all(&self, name: &str) -> io::Result<()> {
        std::fs::remove_dir_all(self.path.join(name))
    }
}

impl DataDir for MemBackend {
    fn files(&self) -> Arc<dyn IoBackend> {
        Arc::new(self.clone())
    }

    fn has_dir(&self, name: &str) -> bool {
        self.dir(&self.locate(name).to_string_lossy()).is_some()
    }

    fn make_dir(&self, name: &str) -> io::Result<Arc<dyn IoBackend>> {
        match self.dir(&self.locate(name).to_string_lossy()) {
            Some(d) => Ok(Arc::new(d)),
            None => Ok(Arc::new(self.mkdir(name)?)),
        }
    }

    fn rename_dir(&self, from: &str, to: &str) -> io::Result<()> {
        MemBackend::rename_dir(self, from, to)
    }

    fn remove_dir_all(&self, name: &str) -> io::Result<()> {
        MemBackend::remove_dir_all(self, name)
    }
}
