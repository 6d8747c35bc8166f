//! An in-memory backend that remembers, per file, what a power cut would leave behind: the bytes
//! as of the last `sync_data`, under the names as of the last `sync_dir`.

use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::{IoBackend, SegmentFile};
use crate::sync::lock;

#[derive(Clone, Default)]
pub struct MemBackend {
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    dir: Mutex<Dir>,
    last_write: Mutex<Option<LastWrite>>,
    next_id: AtomicU64,
    fail_sync: AtomicBool,
}

#[derive(Default)]
struct Dir {
    files: BTreeMap<String, Arc<MemFile>>,
    durable: BTreeMap<String, Arc<MemFile>>,
}

struct LastWrite {
    file_id: u64,
    offset: u64,
    data: Vec<u8>,
}

struct MemFile {
    id: u64,
    image: Mutex<Image>,
    shared: Arc<Shared>,
}

#[derive(Default, Clone)]
struct Image {
    current: Vec<u8>,
    durable: Vec<u8>,
}

impl MemBackend {
    pub fn new() -> MemBackend {
        MemBackend::default()
    }

    /// What the disk would hold after a power cut now: unsynced bytes and unsynced creates and
    /// removes are gone.
    pub fn crash(&self) -> MemBackend {
        self.crash_image(None)
    }

    /// Like `crash`, but the first `keep` bytes of the most recent write reached the disk even
    /// if they were never synced: a torn write.
    pub fn crash_tearing_last_write(&self, keep: usize) -> MemBackend {
        self.crash_image(Some(keep))
    }

    /// Makes every later `sync_data` and `sync_dir` fail, to test fsync-failure handling.
    pub fn set_fail_sync(&self, fail: bool) {
        self.shared.fail_sync.store(fail, Ordering::SeqCst);
    }

    /// The current (not necessarily durable) bytes of a file.
    pub fn file_bytes(&self, name: &str) -> Option<Vec<u8>> {
        let dir = lock(&self.shared.dir);
        let file = dir.files.get(name)?;
        let bytes = lock(&file.image).current.clone();
        Some(bytes)
    }

    /// Replaces a file's bytes, durably, as a disk fault would.
    pub fn set_file_bytes(&self, name: &str, bytes: Vec<u8>) {
        let file = self.file(name);
        *lock(&file.image) = Image {
            current: bytes.clone(),
            durable: bytes,
        };
        let mut dir = lock(&self.shared.dir);
        dir.files.insert(name.to_owned(), file.clone());
        dir.durable.insert(name.to_owned(), file);
    }

    fn file(&self, name: &str) -> Arc<MemFile> {
        if let Some(f) = lock(&self.shared.dir).files.get(name) {
            return f.clone();
        }
        self.new_file(Image::default())
    }

    fn new_file(&self, image: Image) -> Arc<MemFile> {
        Arc::new(MemFile {
            id: self.shared.next_id.fetch_add(1, Ordering::SeqCst),
            image: Mutex::new(image),
            shared: self.shared.clone(),
        })
    }

    fn crash_image(&self, tear: Option<usize>) -> MemBackend {
        let after = MemBackend::new();
        let dir = lock(&self.shared.dir);
        let last = lock(&self.shared.last_write);
        let mut out = lock(&after.shared.dir);
        for (name, file) in &dir.durable {
            let mut bytes = lock(&file.image).durable.clone();
            if let (Some(keep), Some(w)) = (tear, last.as_ref()) {
                if w.file_id == file.id {
                    let part = &w.data[..keep.min(w.data.len())];
                    write_into(&mut bytes, w.offset, part);
                }
            }
            let f = after.new_file(Image {
                current: bytes.clone(),
                durable: bytes,
            });
            out.files.insert(name.clone(), f.clone());
            out.durable.insert(name.clone(), f);
        }
        drop(out);
        after
    }

    fn check_sync(&self) -> io::Result<()> {
        check_sync(&self.shared)
    }
}

fn check_sync(shared: &Shared) -> io::Result<()> {
    if shared.fail_sync.load(Ordering::SeqCst) {
        return Err(io::Error::other("injected fsync failure"));
    }
    Ok(())
}

fn write_into(bytes: &mut Vec<u8>, offset: u64, data: &[u8]) {
    let start = offset as usize;
    if bytes.len() < start + data.len() {
        bytes.resize(start + data.len(), 0);
    }
    bytes[start..start + data.len()].copy_from_slice(data);
}

fn not_found(name: &str) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, format!("no file named {name}"))
}

impl IoBackend for MemBackend {
    fn list(&self) -> io::Result<Vec<String>> {
        Ok(lock(&self.shared.dir).files.keys().cloned().collect())
    }

    fn create(&self, name: &str) -> io::Result<Arc<dyn SegmentFile>> {
        let f = self.new_file(Image::default());
        lock(&self.shared.dir)
            .files
            .insert(name.to_owned(), f.clone());
        Ok(f)
    }

    fn open(&self, name: &str) -> io::Result<Arc<dyn SegmentFile>> {
        match lock(&self.shared.dir).files.get(name) {
            Some(f) => Ok(f.clone()),
            None => Err(not_found(name)),
        }
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        match lock(&self.shared.dir).files.remove(name) {
            Some(_) => Ok(()),
            None => Err(not_found(name)),
        }
    }

    fn sync_dir(&self) -> io::Result<()> {
        self.check_sync()?;
        let mut dir = lock(&self.shared.dir);
        dir.durable = dir.files.clone();
        Ok(())
    }
}

impl SegmentFile for MemFile {
    fn len(&self) -> io::Result<u64> {
        Ok(lock(&self.image).current.len() as u64)
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let image = lock(&self.image);
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        match image
            .current
            .get(start..)
            .and_then(|rest| rest.get(..buf.len()))
        {
            Some(src) => {
                buf.copy_from_slice(src);
                Ok(())
            }
            None => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "read past the end of the file",
            )),
        }
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        write_into(&mut lock(&self.image).current, offset, data);
        *lock(&self.shared.last_write) = Some(LastWrite {
            file_id: self.id,
            offset,
            data: data.to_vec(),
        });
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        lock(&self.image).current.resize(len as usize, 0);
        let mut last = lock(&self.shared.last_write);
        if last.as_ref().is_some_and(|w| w.file_id == self.id) {
            *last = None;
        }
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        check_sync(&self.shared)?;
        let mut image = lock(&self.image);
        image.durable = image.current.clone();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crash_keeps_only_synced_bytes_under_synced_names() {
        let b = MemBackend::new();
        let f = b.create("a").unwrap();
        f.write_at(0, b"durable").unwrap();
        f.sync_data().unwrap();
        b.sync_dir().unwrap();
        f.write_at(7, b"-lost").unwrap();
        let g = b.create("b").unwrap();
        g.write_at(0, b"never named durably").unwrap();
        g.sync_data().unwrap();

        let after = b.crash();
        assert_eq!(after.list().unwrap(), vec!["a".to_owned()]);
        assert_eq!(after.file_bytes("a").unwrap(), b"durable");

        let torn = b.crash_tearing_last_write(100);
        assert_eq!(torn.file_bytes("a").unwrap(), b"durable");
    }

    #[test]
    fn torn_write_keeps_a_prefix_of_the_last_write() {
        let b = MemBackend::new();
        let f = b.create("a").unwrap();
        b.sync_dir().unwrap();
        f.write_at(0, b"0123456789").unwrap();
        assert_eq!(
            b.crash_tearing_last_write(4).file_bytes("a").unwrap(),
            b"0123"
        );
    }
}
