//! Injectable segment-file I/O, so crash tests can drop unsynced bytes or tear a write without
//! touching a real disk (the model is redb's `StorageBackend` and its crash-consistency tests).

mod dirs;
mod file;
mod mem;
#[cfg(test)]
mod redb_file;

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

#[cfg(test)]
pub(crate) use dirs::create_dir_durable_with;
pub use dirs::{create_dir_durable, sync_parent};
pub use file::FileBackend;
pub use mem::MemBackend;
#[cfg(test)]
pub(crate) use redb_file::RedbOnFile;

/// A flat namespace of segment files. Creating or removing a name is durable only after
/// `sync_dir`, as with a real directory.
pub trait IoBackend: Send + Sync {
    /// Names of all files present, in no particular order.
    fn list(&self) -> io::Result<Vec<String>>;
    /// Creates an empty file, replacing any file of that name.
    fn create(&self, name: &str) -> io::Result<Arc<dyn SegmentFile>>;
    fn open(&self, name: &str) -> io::Result<Arc<dyn SegmentFile>>;
    fn remove(&self, name: &str) -> io::Result<()>;
    /// Gives `from` the name `to`, replacing any file named `to`, atomically (rename(2)).
    fn rename(&self, from: &str, to: &str) -> io::Result<()>;
    /// Makes earlier creates and removes durable.
    fn sync_dir(&self) -> io::Result<()>;
    /// Gives the file `from` a second name `to` (link(2)): the inode stays while either name
    /// does. Fails if `to` exists.
    fn link(&self, from: &str, to: &str) -> io::Result<()> {
        let _ = (from, to);
        Err(io::Error::from(io::ErrorKind::Unsupported))
    }
    /// Where `name` lives, for error messages and reports.
    fn locate(&self, name: &str) -> PathBuf {
        PathBuf::from(name)
    }
}

/// One open segment file. Shared between the writer and concurrent readers, so every method
/// takes `&self` and positions explicitly.
pub trait SegmentFile: Send + Sync {
    fn len(&self) -> io::Result<u64>;
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }
    /// Fills `buf` from `offset`; reading past the end is an `UnexpectedEof` error.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()>;
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Makes every earlier write and `set_len` durable.
    fn sync_data(&self) -> io::Result<()>;
}
