//! An in-memory backend that remembers, per file, what a power cut would leave behind: the bytes
//! as of the last `sync_data`, under the names as of the last `sync_dir` of their directory,
//! in directories whose own names were made durable the same way, up to the root.
//!
//! One `MemBackend` is one directory of a tree that shares its crash images: `mkdir` makes a
//! child directory, and a crash image is always of the whole tree (`dir` finds a directory in
//! it again).

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use super::dirs::DirOps;
use super::{IoBackend, SegmentFile};
use crate::sync::lock;

#[derive(Clone, Default)]
pub struct MemBackend {
    tree: Arc<Tree>,
    /// This directory's path from the root: "" for the root, else names joined by '/'.
    path: String,
}

#[derive(Default)]
struct Tree {
    state: Mutex<State>,
    last_write: Mutex<Option<LastWrite>>,
    next_id: AtomicU64,
    fail_sync: AtomicBool,
    /// While set, every `sync_dir` (only) blocks: a purge parked in its unlink's fsync.
    hang_sync_dir: AtomicBool,
    /// While set, every `remove` fails (EACCES) and removes nothing.
    fail_remove: AtomicBool,
    /// While set, every `write_at` and `create` fails with ENOSPC and changes nothing.
    full: AtomicBool,
    /// While set, every `sync_data` and `sync_dir` blocks (a hung disk).
    hang_sync: AtomicBool,
    /// When recording, the crash image after every mutating call, in call order.
    steps: Mutex<Option<Vec<MemBackend>>>,
}

/// Files keyed by (directory path, name); directories by path (the root is always there).
#[derive(Default)]
struct State {
    files: BTreeMap<(String, String), Arc<MemFile>>,
    durable_files: BTreeMap<(String, String), Arc<MemFile>>,
    dirs: BTreeSet<String>,
    /// Directories whose name is durable in their parent.
    durable_dirs: BTreeSet<String>,
}

struct LastWrite {
    file_id: u64,
    offset: u64,
    data: Vec<u8>,
}

struct MemFile {
    id: u64,
    image: Mutex<Image>,
    /// Weak: the directory holds its files, so a strong link back would be a cycle that
    /// leaks every backend (found by the segment_log fuzz target's leak check). A file whose
    /// backend is gone still reads and writes, with nothing left to record or fail.
    tree: Weak<Tree>,
}

#[derive(Default, Clone)]
struct Image {
    current: Vec<u8>,
    durable: Vec<u8>,
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_owned()
    } else {
        format!("{dir}/{name}")
    }
}

fn parent(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(p, _)| p)
}

/// The tree path of a relative `Path` ("a/b"); "." and "" are the root.
fn tree_path(p: &Path) -> String {
    p.components()
        .filter_map(|c| match c {
            std::path::Component::Normal(n) => n.to_str(),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("/")
}

impl State {
    fn dir_exists(&self, path: &str) -> bool {
        path.is_empty() || self.dirs.contains(path)
    }

    /// A directory survives a crash if its name and every ancestor's name are durable.
    fn dir_survives(&self, path: &str) -> bool {
        let mut at = path;
        while !at.is_empty() {
            if !self.durable_dirs.contains(at) {
                return false;
            }
            at = parent(at);
        }
        true
    }
}

impl MemBackend {
    pub fn new() -> MemBackend {
        MemBackend::default()
    }

    /// Creates the directory `name` in this one (not durable until this one's `sync_dir`).
    pub fn mkdir(&self, name: &str) -> io::Result<MemBackend> {
        let path = join(&self.path, name);
        {
            let mut st = lock(&self.tree.state);
            if !st.dir_exists(&self.path) {
                return Err(not_found(&self.path));
            }
            st.dirs.insert(path.clone());
        }
        self.step();
        Ok(MemBackend {
            tree: self.tree.clone(),
            path,
        })
    }

    /// Renames the child directory `from` to `to` (which must not exist), with everything in
    /// it. Modelled as durable on return, contents and name together: a crash image shows the
    /// old name before this call and the new one after it, never neither.
    pub fn rename_dir(&self, from: &str, to: &str) -> io::Result<()> {
        let (from, to) = (join(&self.path, from), join(&self.path, to));
        {
            let mut st = lock(&self.tree.state);
            if !st.dirs.contains(&from) {
                return Err(not_found(&from));
            }
            if st.dir_exists(&to) {
                return Err(io::Error::new(io::ErrorKind::AlreadyExists, to));
            }
            let moved = |p: &str| -> Option<String> {
                if p == from {
                    Some(to.clone())
                } else {
                    p.strip_prefix(&format!("{from}/"))
                        .map(|rest| format!("{to}/{rest}"))
                }
            };
            let st = &mut *st;
            for dirs in [&mut st.dirs, &mut st.durable_dirs] {
                let renamed: Vec<(String, String)> = dirs
                    .iter()
                    .filter_map(|d| moved(d).map(|n| (d.clone(), n)))
                    .collect();
                for (old, new) in renamed {
                    dirs.remove(&old);
                    dirs.insert(new);
                }
            }
            for files in [&mut st.files, &mut st.durable_files] {
                let renamed: Vec<(String, String)> = files
                    .keys()
                    .filter_map(|k| moved(&k.0).map(|n| (k.0.clone(), n)))
                    .collect();
                for (old, new) in renamed {
                    let keys: Vec<_> = files.keys().filter(|k| k.0 == old).cloned().collect();
                    for k in keys {
                        if let Some(f) = files.remove(&k) {
                            files.insert((new.clone(), k.1), f);
                        }
                    }
                }
            }
        }
        self.step();
        Ok(())
    }

    /// Removes the child directory `name` and everything in it; durable after this
    /// directory's `sync_dir`, as with a real one.
    pub fn remove_dir_all(&self, name: &str) -> io::Result<()> {
        let path = join(&self.path, name);
        {
            let mut st = lock(&self.tree.state);
            if !st.dirs.contains(&path) {
                return Err(not_found(&path));
            }
            let inside = |p: &str| p == path || p.starts_with(&format!("{path}/"));
            st.dirs.retain(|d| !inside(d));
            st.files.retain(|k, _| !inside(&k.0));
        }
        self.step();
        Ok(())
    }

    /// The directory at `path` (relative to the root, "a/b"), if it exists.
    pub fn dir(&self, path: &str) -> Option<MemBackend> {
        let path = tree_path(Path::new(path));
        lock(&self.tree.state)
            .dir_exists(&path)
            .then(|| MemBackend {
                tree: self.tree.clone(),
                path,
            })
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

    /// From now on, keeps what a power cut would leave after every create, remove, mkdir,
    /// write, `set_len`, `sync_data` and `sync_dir` anywhere in the tree (see `take_steps`).
    pub fn record_steps(&self) {
        *lock(&self.tree.steps) = Some(Vec::new());
    }

    /// The crash images recorded since `record_steps`, oldest first, each at this directory's
    /// path; recording goes on.
    pub fn take_steps(&self) -> Vec<MemBackend> {
        let images = lock(&self.tree.steps)
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default();
        images
            .into_iter()
            .map(|root| MemBackend {
                tree: root.tree,
                path: self.path.clone(),
            })
            .collect()
    }

    /// Number of crash images recorded and not yet taken.
    pub fn steps_recorded(&self) -> usize {
        lock(&self.tree.steps).as_ref().map_or(0, Vec::len)
    }

    fn step(&self) {
        step(&self.tree);
    }

    /// Makes every later `sync_data` and `sync_dir` fail, to test fsync-failure handling.
    pub fn set_fail_sync(&self, fail: bool) {
        self.tree.fail_sync.store(fail, Ordering::SeqCst);
    }

    /// Makes every later `sync_dir` (not `sync_data`) block until set back to false.
    pub fn set_hang_sync_dir(&self, hang: bool) {
        self.tree.hang_sync_dir.store(hang, Ordering::SeqCst);
    }

    /// Makes every later `remove` fail, until set back to false, to test a segment that
    /// cannot be deleted.
    pub fn set_fail_remove(&self, fail: bool) {
        self.tree.fail_remove.store(fail, Ordering::SeqCst);
    }

    /// Makes every later `write_at` and `create` fail as on a full disk (ENOSPC), until set
    /// back to false, to test a log append that finds no space.
    pub fn set_full(&self, full: bool) {
        self.tree.full.store(full, Ordering::SeqCst);
    }

    /// Makes every later `sync_data` and `sync_dir` block until this is set back to false,
    /// to test a disk that stops answering (the fsync neither fails nor returns).
    pub fn set_hang_sync(&self, hang: bool) {
        self.tree.hang_sync.store(hang, Ordering::SeqCst);
    }

    fn key(&self, name: &str) -> (String, String) {
        (self.path.clone(), name.to_owned())
    }

    /// The current (not necessarily durable) bytes of a file.
    pub fn file_bytes(&self, name: &str) -> Option<Vec<u8>> {
        let st = lock(&self.tree.state);
        let file = st.files.get(&self.key(name))?;
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
        let mut st = lock(&self.tree.state);
        st.files.insert(self.key(name), file.clone());
        st.durable_files.insert(self.key(name), file);
    }

    fn file(&self, name: &str) -> Arc<MemFile> {
        if let Some(f) = lock(&self.tree.state).files.get(&self.key(name)) {
            return f.clone();
        }
        self.new_file(Image::default())
    }

    fn new_file(&self, image: Image) -> Arc<MemFile> {
        Arc::new(MemFile {
            id: self.tree.next_id.fetch_add(1, Ordering::SeqCst),
            image: Mutex::new(image),
            tree: Arc::downgrade(&self.tree),
        })
    }

    fn crash_image(&self, tear: Option<usize>) -> MemBackend {
        let after = MemBackend {
            tree: Arc::new(Tree::default()),
            path: self.path.clone(),
        };
        let st = lock(&self.tree.state);
        let last = lock(&self.tree.last_write);
        let mut out = lock(&after.tree.state);
        for dir in st.dirs.iter().filter(|d| st.dir_survives(d)) {
            out.dirs.insert(dir.clone());
            out.durable_dirs.insert(dir.clone());
        }
        for (key, file) in &st.durable_files {
            if !st.dir_survives(&key.0) {
                continue;
            }
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
            out.files.insert(key.clone(), f.clone());
            out.durable_files.insert(key.clone(), f);
        }
        drop(out);
        after
    }

    fn check_sync(&self) -> io::Result<()> {
        check_sync(&self.tree)
    }
}

fn step(tree: &Arc<Tree>) {
    if lock(&tree.steps).is_none() {
        return;
    }
    let image = MemBackend {
        tree: tree.clone(),
        path: String::new(),
    }
    .crash();
    if let Some(steps) = lock(&tree.steps).as_mut() {
        steps.push(image);
    }
}

fn check_sync(tree: &Tree) -> io::Result<()> {
    while tree.hang_sync.load(Ordering::SeqCst) {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    if tree.fail_sync.load(Ordering::SeqCst) {
        return Err(io::Error::other("injected fsync failure"));
    }
    Ok(())
}

fn check_space(tree: &Tree) -> io::Result<()> {
    if tree.full.load(Ordering::SeqCst) {
        return Err(io::Error::from(io::ErrorKind::StorageFull));
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
        let st = lock(&self.tree.state);
        if !st.dir_exists(&self.path) {
            return Err(not_found(&self.path));
        }
        Ok(st
            .files
            .keys()
            .filter(|(dir, _)| *dir == self.path)
            .map(|(_, name)| name.clone())
            .collect())
    }

    fn create(&self, name: &str) -> io::Result<Arc<dyn SegmentFile>> {
        check_space(&self.tree)?;
        let f = self.new_file(Image::default());
        {
            let mut st = lock(&self.tree.state);
            if !st.dir_exists(&self.path) {
                return Err(not_found(&self.path));
            }
            st.files.insert(self.key(name), f.clone());
        }
        self.step();
        Ok(f)
    }

    fn open(&self, name: &str) -> io::Result<Arc<dyn SegmentFile>> {
        match lock(&self.tree.state).files.get(&self.key(name)) {
            Some(f) => Ok(f.clone()),
            None => Err(not_found(name)),
        }
    }

    fn link(&self, from: &str, to: &str) -> io::Result<()> {
        {
            let mut st = lock(&self.tree.state);
            let Some(file) = st.files.get(&self.key(from)).cloned() else {
                return Err(not_found(from));
            };
            if st.files.contains_key(&self.key(to)) {
                return Err(io::Error::from(io::ErrorKind::AlreadyExists));
            }
            st.files.insert(self.key(to), file);
        }
        self.step();
        Ok(())
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        if self.tree.fail_remove.load(Ordering::SeqCst) {
            return Err(io::Error::from(io::ErrorKind::PermissionDenied));
        }
        let removed = lock(&self.tree.state).files.remove(&self.key(name));
        match removed {
            Some(_) => {
                self.step();
                Ok(())
            }
            None => Err(not_found(name)),
        }
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        {
            let mut st = lock(&self.tree.state);
            let Some(file) = st.files.remove(&self.key(from)) else {
                return Err(not_found(from));
            };
            st.files.insert(self.key(to), file);
        }
        self.step();
        Ok(())
    }

    /// Makes the names of this directory's files and child directories durable.
    fn sync_dir(&self) -> io::Result<()> {
        while self.tree.hang_sync_dir.load(Ordering::SeqCst) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        self.check_sync()?;
        {
            let mut st = lock(&self.tree.state);
            let here = &self.path;
            let files: Vec<_> = st
                .files
                .iter()
                .filter(|(k, _)| k.0 == *here)
                .map(|(k, f)| (k.clone(), f.clone()))
                .collect();
            st.durable_files.retain(|k, _| k.0 != *here);
            st.durable_files.extend(files);
            let children: Vec<String> = st
                .dirs
                .iter()
                .filter(|d| parent(d) == here.as_str())
                .cloned()
                .collect();
            st.durable_dirs.retain(|d| parent(d) != here.as_str());
            st.durable_dirs.extend(children);
            // What lay inside a child directory removed from here is gone with its name.
            let dirs = st.dirs.clone();
            let gone = |p: &str| {
                let rest = if here.is_empty() {
                    Some(p)
                } else {
                    p.strip_prefix(&format!("{here}/"))
                };
                rest.filter(|r| !r.is_empty())
                    .is_some_and(|r| !dirs.contains(&join(here, r.split('/').next().unwrap_or(r))))
            };
            st.durable_dirs.retain(|d| !gone(d));
            st.durable_files.retain(|k, _| !gone(&k.0));
        }
        self.step();
        Ok(())
    }

    fn locate(&self, name: &str) -> std::path::PathBuf {
        std::path::PathBuf::from(join(&self.path, name))
    }
}

/// Paths are relative to the root of the tree, so `create_dir_durable_with` can run on it.
impl DirOps for MemBackend {
    fn exists(&self, path: &Path) -> bool {
        lock(&self.tree.state).dir_exists(&tree_path(path))
    }

    fn mkdir(&self, path: &Path) -> io::Result<()> {
        let path = tree_path(path);
        let (up, name) = match path.rsplit_once('/') {
            Some((up, name)) => (up.to_owned(), name.to_owned()),
            None => (String::new(), path.clone()),
        };
        MemBackend {
            tree: self.tree.clone(),
            path: up,
        }
        .mkdir(&name)
        .map(drop)
    }

    fn fsync_dir(&self, path: &Path) -> io::Result<()> {
        MemBackend {
            tree: self.tree.clone(),
            path: tree_path(path),
        }
        .sync_dir()
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
        if let Some(tree) = self.tree.upgrade() {
            check_space(&tree)?;
        }
        write_into(&mut lock(&self.image).current, offset, data);
        if let Some(tree) = self.tree.upgrade() {
            *lock(&tree.last_write) = Some(LastWrite {
                file_id: self.id,
                offset,
                data: data.to_vec(),
            });
            step(&tree);
        }
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        lock(&self.image).current.resize(len as usize, 0);
        if let Some(tree) = self.tree.upgrade() {
            let mut last = lock(&tree.last_write);
            if last.as_ref().is_some_and(|w| w.file_id == self.id) {
                *last = None;
            }
            drop(last);
            step(&tree);
        }
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        let tree = self.tree.upgrade();
        if let Some(tree) = &tree {
            check_sync(tree)?;
        }
        {
            let mut image = lock(&self.image);
            image.durable = image.current.clone();
        }
        if let Some(tree) = &tree {
            step(tree);
        }
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
