//! Real files under one directory: pwrite to append, fdatasync to commit, pread to read.
//! Reads use pread rather than mmap: a record is one positioned read either way, and pread keeps
//! this crate free of `unsafe` and of SIGBUS when a mapped file is truncated under a reader.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{IoBackend, SegmentFile};

#[derive(Debug)]
pub struct FileBackend {
    dir: PathBuf,
}

impl FileBackend {
    /// Creates `dir` if needed, durably (each created level's parent is fsynced).
    pub fn new(dir: &Path) -> io::Result<FileBackend> {
        super::create_dir_durable(dir)?;
        Ok(FileBackend {
            dir: dir.to_path_buf(),
        })
    }
}

impl IoBackend for FileBackend {
    fn list(&self) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(&self.dir)? {
            let entry = entry?;
            if entry.file_type()?.is_file() {
                if let Some(name) = entry.file_name().to_str() {
                    names.push(name.to_owned());
                }
            }
        }
        Ok(names)
    }

    fn create(&self, name: &str) -> io::Result<Arc<dyn SegmentFile>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(self.dir.join(name))?;
        Ok(Arc::new(DiskFile(file)))
    }

    fn open(&self, name: &str) -> io::Result<Arc<dyn SegmentFile>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(self.dir.join(name))?;
        Ok(Arc::new(DiskFile(file)))
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        fs::remove_file(self.dir.join(name))
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        fs::rename(self.dir.join(from), self.dir.join(to))
    }

    fn sync_dir(&self) -> io::Result<()> {
        File::open(&self.dir)?.sync_all()
    }

    fn link(&self, from: &str, to: &str) -> io::Result<()> {
        fs::hard_link(self.dir.join(from), self.dir.join(to))
    }

    fn locate(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

struct DiskFile(File);

impl SegmentFile for DiskFile {
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.0.read_exact_at(buf, offset)
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.0.write_all_at(data, offset)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }
}
