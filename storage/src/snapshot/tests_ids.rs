//! The ids part of a snapshot (docs/storage-format.md "The id files in the stream"): what the
//! sender takes, what the receiver refuses, and an install that replaces the node's id files
//! against crash images after every durable step.

use std::io::{Read, Seek, SeekFrom};
use std::sync::Arc;

use super::tests_sender::{fixture, Fixture};
use crate::fuzzing::{id_files_for_tests, snapshot_stream_with_ids};
use crate::log::tests::small;
use crate::{
    finish_interrupted_install, id_file_name, stage_install, IdFiles, IdSource, IoBackend,
    MemBackend, SegmentLog, SnapshotHeader, SnapshotReceiver, SnapshotSource, StateStore,
    StorageError, ENTRY_HEAD, IDS_DIR, IDS_INCOMING, IDS_OLD, LOG_DIR,
};

/// A key the leader spilled (bucket 500) and one only the follower holds (bucket 400).
const LEADER_KEY: u64 = 0x5eed_0001;
const LEADER_OFFSET: u64 = 41;
const FOLLOWER_KEY: u64 = 0x0f0f_0002;

/// The leader's `ids/`: two buckets' files (one merged) and a file still being written
/// (no header yet), which must not be sent.
fn leader_ids() -> MemBackend {
    let ids = MemBackend::new();
    let files = IdFiles::new(Arc::new(ids.clone()));
    let mut a: Vec<(u64, u64)> = (0..600).map(|k| (k * 3 + 1, k)).collect();
    a.push((LEADER_KEY, LEADER_OFFSET));
    files.write_segment(500, 1, &mut a).unwrap();
    let mut b: Vec<(u64, u64)> = (0..10).map(|k| (k, 1000 + k)).collect();
    files.write_segment(501, 2, &mut b).unwrap();
    files.write_segment(501, 3, &mut [(77, 2000)]).unwrap();
    files.merge_generation(501).unwrap();
    let half = id_file_name(502, IdSource::Segment(4)).unwrap();
    ids.create(&half)
        .unwrap()
        .write_at(4096, &[9u8; 4096])
        .unwrap();
    ids.create("f-not-an-id-file.qflt").unwrap();
    ids
}

fn read_all(src: &mut SnapshotSource) -> Vec<u8> {
    let mut out = Vec::new();
    src.read_to_end(&mut out).unwrap();
    out
}

fn leader_stream(f: &Fixture, ids: &MemBackend) -> Vec<u8> {
    let mut src =
        SnapshotSource::open_with_ids(&f.store, &f.log, 50, Some(Arc::new(ids.clone()))).unwrap();
    read_all(&mut src)
}

#[test]
fn the_sender_carries_complete_id_files_and_reads_at_any_offset() {
    let f = fixture();
    let ids = leader_ids();
    let mut src =
        SnapshotSource::open_with_ids(&f.store, &f.log, 50, Some(Arc::new(ids.clone()))).unwrap();
    let names = src.id_file_names();
    assert_eq!(
        names,
        vec![
            id_file_name(500, IdSource::Segment(1)).unwrap(),
            id_file_name(501, IdSource::Merged(0)).unwrap(),
        ],
        "the half-written file and other names are not sent"
    );
    let head = *src.header();
    assert_eq!((head.ids_files, head.header_len()), (2, 72));
    let whole = read_all(&mut src);
    assert_eq!(whole.len() as u64, head.stream_len());
    // The first file's bytes follow its entry head, unchanged.
    let first = ids.file_bytes(&names[0]).unwrap();
    let at = head.ids_start() as usize + ENTRY_HEAD;
    assert_eq!(&whole[at..at + first.len()], &first[..]);
    // Resumed at any offset (openraft asks again from where a chunk failed).
    for start in (0..whole.len()).step_by(997).chain([whole.len() - 1]) {
        src.seek(SeekFrom::Start(start as u64)).unwrap();
        let mut buf = vec![0u8; 5000];
        let n = src.read(&mut buf).unwrap();
        assert_eq!(&buf[..n], &whole[start..start + n], "offset {start}");
    }
    // Without id files the stream is version 1, byte for byte the old one.
    let empty = MemBackend::new();
    let v1 =
        SnapshotSource::open_with_ids(&f.store, &f.log, 50, Some(Arc::new(empty.clone()))).unwrap();
    assert_eq!(v1.header().ids_files, 0);
    let mut old = SnapshotSource::open(&f.store, &f.log, 50).unwrap();
    let mut v1 = v1;
    assert_eq!(read_all(&mut v1), read_all(&mut old));
}

/// Files opened when the source opened are what is sent: a merge that removes them later,
/// or an expiry, changes nothing in the stream.
#[test]
fn a_merge_or_expiry_after_the_open_does_not_change_the_stream() {
    let f = fixture();
    let ids = leader_ids();
    let files = IdFiles::new(Arc::new(ids.clone()));
    files.write_segment(500, 9, &mut [(5, 5)]).unwrap();
    let before = leader_stream(&f, &ids);
    let mut src =
        SnapshotSource::open_with_ids(&f.store, &f.log, 50, Some(Arc::new(ids.clone()))).unwrap();
    files.merge_generation(500).unwrap();
    files.remove_before(501).unwrap();
    assert!(files.list().unwrap().iter().all(|(g, _)| *g >= 501));
    assert_eq!(read_all(&mut src), before);
}

fn receive(stream: &[u8], chunk: usize) -> Result<SnapshotHeader, StorageError> {
    let mem = MemBackend::new();
    let dir: Arc<dyn IoBackend> = Arc::new(mem.clone());
    let mut rx = SnapshotReceiver::create(dir, 1 << 20, Box::new(|_| Ok(()))).unwrap();
    for (i, piece) in stream.chunks(chunk).enumerate() {
        rx.write_at((i * chunk) as u64, piece)?;
    }
    rx.finish()
}

/// A flipped byte of an entry head (the framing) is refused; one inside a file is taken, so
/// that a file damaged on the leader's disk, sent the same on every retry, does not stop every
/// catch-up (review s31 H1): the install keeps it as sent and the node reads it as damaged.
#[test]
fn the_receiver_refuses_a_flipped_byte_of_an_entry_head_and_takes_one_inside_a_file() {
    let ids = id_files_for_tests(2, 300);
    let stream = snapshot_stream_with_ids(b"state", 5, 1, &[(1, b"r")], &ids);
    for chunk in [1, 7, 4096, stream.len()] {
        let h = receive(&stream, chunk).unwrap();
        assert_eq!((h.ids_files, h.stream_len()), (2, stream.len() as u64));
    }
    let head = SnapshotHeader::decode(&stream[..72]).unwrap();
    let mut heads = Vec::new();
    let mut at = head.ids_start() as usize;
    while at < stream.len() {
        heads.push(at..at + ENTRY_HEAD);
        let len = u64::from_le_bytes(stream[at + 48..at + 56].try_into().unwrap());
        at += ENTRY_HEAD + len as usize;
    }
    assert_eq!(heads.len(), 2);
    for at in head.ids_start() as usize..stream.len() {
        let mut bad = stream.clone();
        bad[at] ^= 0x04;
        let framing = heads.iter().any(|h| h.contains(&at));
        assert_eq!(
            receive(&bad, 4096).is_err(),
            framing,
            "byte {at} flipped (in an entry head: {framing})"
        );
    }
    // Cut short, or one byte too long: refused.
    assert!(receive(&stream[..stream.len() - 1], 4096).is_err());
    let mut long = stream.clone();
    long.push(0);
    assert!(receive(&long, 4096).is_err());
}

/// An entry head claiming a huge file (or names out of order) is refused at its head, before
/// anything it frames is written.
#[test]
fn huge_or_disordered_entries_are_refused_at_their_head() {
    let ids = id_files_for_tests(2, 10);
    let stream = snapshot_stream_with_ids(b"", 5, 1, &[], &ids);
    let head = SnapshotHeader::decode(&stream[..72]).unwrap();
    let at = head.ids_start() as usize;
    for claim in [u64::MAX, 1 << 40, 4096 * 3, 4095, 0] {
        // A length inside the part cannot be judged at the head: it fails later, still refused.
        let at_head = claim != 4096 * 3;
        let mut bad = stream.clone();
        let name = std::str::from_utf8(&bad[at..at + 48]).unwrap().to_owned();
        let h = crate::snapshot::encode_entry_head(&name, claim).unwrap();
        bad[at..at + ENTRY_HEAD].copy_from_slice(&h);
        let err = receive(&bad, 1 << 20).unwrap_err();
        assert!(
            matches!(&err, StorageError::SnapshotRefused { offset, .. } if !at_head || *offset <= (at + ENTRY_HEAD) as u64),
            "claim {claim}: {err}"
        );
    }
    let swapped = snapshot_stream_with_ids(b"", 5, 1, &[], &[ids[1].clone(), ids[0].clone()]);
    let err = receive(&swapped, 1 << 20).unwrap_err();
    assert!(err.to_string().contains("ascend"), "{err}");
}

struct Follower {
    data: MemBackend,
    store: StateStore,
    log: SegmentLog,
}

/// A follower with records 1..=10 of term 1, a checkpoint at 10, its own `ids/` (one file,
/// one filter file) and the leader's stream received whole.
fn follower(stream: &[u8]) -> Follower {
    let data = MemBackend::new();
    let log_dir = data.mkdir(LOG_DIR).unwrap();
    let own = data.mkdir(IDS_DIR).unwrap();
    data.sync_dir().unwrap();
    IdFiles::new(Arc::new(own.clone()))
        .write_segment(400, 1, &mut [(FOLLOWER_KEY, 3)])
        .unwrap();
    own.create("f-old-filter.qflt")
        .unwrap()
        .sync_data()
        .unwrap();
    own.sync_dir().unwrap();
    let log = SegmentLog::open_with_backend(Arc::new(log_dir), small())
        .unwrap()
        .0;
    crate::log::tests::fill(&log, 1, 10, 1);
    log.sync().unwrap();
    let store = StateStore::open_in(&data, "state.redb").unwrap();
    store
        .save_checkpoint_with_floor(10, 1, 1, |sink| sink.write(b"old state"))
        .unwrap();
    let files: Arc<dyn IoBackend> = Arc::new(data.clone());
    let mut rx = SnapshotReceiver::create(files, 1024, Box::new(|_| Ok(()))).unwrap();
    for (i, chunk) in stream.chunks(1000).enumerate() {
        rx.write_at(i as u64 * 1000, chunk).unwrap();
    }
    rx.finish().unwrap();
    Follower { data, store, log }
}

fn stage(f: &Follower) -> Result<crate::Installed, StorageError> {
    stage_install(&f.data, &f.store, &f.log, small(), &[], (50, 2))
}

/// What a lookup of `key` answers in `ids/` of `data`: the offset, as the broker's store
/// would find it.
fn lookup(data: &MemBackend, key: u64) -> Option<u64> {
    let files = IdFiles::new(Arc::new(data.dir(IDS_DIR)?));
    let mut found = None;
    for (generation, source) in files.list().unwrap() {
        let r = files.open(generation, source).unwrap();
        if let Some(off) = r.find(key, |_| true).unwrap() {
            found = Some(off);
        }
    }
    found
}

/// After the start-up step on `image`: "old" (old checkpoint, own id files) or "new" (the
/// snapshot's checkpoint, the leader's id files), never the new state over the old files,
/// and nothing of the install left.
fn restart(image: &MemBackend) -> &'static str {
    let store = StateStore::open_in(image, "state.redb").unwrap();
    finish_interrupted_install(image, &store).unwrap();
    for gone in [IDS_INCOMING, IDS_OLD] {
        assert!(image.dir(gone).is_none(), "{gone} is left");
    }
    let newest = store.load_checkpoint().unwrap().unwrap();
    let own = image.dir(IDS_DIR).unwrap().list().unwrap();
    if newest.applied_index == 10 {
        assert_eq!(lookup(image, FOLLOWER_KEY), Some(3));
        assert_eq!(lookup(image, LEADER_KEY), None);
        assert!(own.iter().any(|n| n.ends_with(".qflt")));
        return "old";
    }
    assert_eq!(newest.applied_index, 50);
    assert_eq!(
        lookup(image, LEADER_KEY),
        Some(LEADER_OFFSET),
        "the new state over ids that lack the leader's spilled id"
    );
    assert_eq!(lookup(image, FOLLOWER_KEY), None);
    assert!(
        !own.iter().any(|n| n.ends_with(".qflt")),
        "an old filter file would vouch for buckets it never saw: {own:?}"
    );
    "new"
}

#[test]
fn an_install_replaces_the_id_files_and_a_crash_after_any_step_is_old_or_new() {
    let leader = fixture();
    let stream = leader_stream(&leader, &leader_ids());
    let f = follower(&stream);
    f.data.record_steps();
    stage(&f).unwrap();
    let Follower { data, store, log } = f;
    drop(log);
    finish_interrupted_install(&data, &store).unwrap();
    drop(store);
    let images = data.take_steps();
    assert!(images.len() > 15, "{} steps", images.len());
    let seen: Vec<&str> = images.iter().map(restart).collect();
    let flip = seen.iter().position(|s| *s == "new").unwrap();
    assert!(seen[..flip].iter().all(|s| *s == "old"), "{seen:?}");
    assert!(seen[flip..].iter().all(|s| *s == "new"), "{seen:?}");
    assert_eq!(restart(&data.crash()), "new");
}

/// A version-1 stream (a sender without id files, or of an older build) installs as before:
/// the node's own id files stay, and a leftover `ids-incoming` of an earlier stage is not
/// taken for this install's.
#[test]
fn a_version_1_stream_keeps_the_nodes_own_id_files() {
    let leader = fixture();
    let stream = leader_stream(&leader, &MemBackend::new());
    assert_eq!(stream[4], 1);
    let f = follower(&stream);
    let stale = f.data.mkdir(IDS_INCOMING).unwrap();
    f.data.sync_dir().unwrap();
    IdFiles::new(Arc::new(stale))
        .write_segment(9, 1, &mut [(LEADER_KEY, 1)])
        .unwrap();
    stage(&f).unwrap();
    let Follower { data, store, log } = f;
    drop(log);
    finish_interrupted_install(&data, &store).unwrap();
    assert_eq!(lookup(&data, FOLLOWER_KEY), Some(3));
    assert_eq!(lookup(&data, LEADER_KEY), None);
    assert!(data.dir(IDS_INCOMING).is_none());
}

/// A file of the part whose header names another bucket is installed as sent, not refused
/// (review s31 H1): the leader would send it again on every retry.
#[test]
fn an_id_file_that_does_not_verify_is_installed_as_sent() {
    let mut ids = id_files_for_tests(1, 20);
    ids[0].0 = id_file_name(999, IdSource::Segment(1)).unwrap();
    let stream = snapshot_stream_with_ids(b"", 51, 2, &[], &ids);
    let data = MemBackend::new();
    let log_dir = data.mkdir(LOG_DIR).unwrap();
    let own = data.mkdir(IDS_DIR).unwrap();
    data.sync_dir().unwrap();
    IdFiles::new(Arc::new(own))
        .write_segment(400, 1, &mut [(FOLLOWER_KEY, 3)])
        .unwrap();
    let log = SegmentLog::open_with_backend(Arc::new(log_dir), small())
        .unwrap()
        .0;
    crate::log::tests::fill(&log, 1, 10, 1);
    let store = StateStore::open_in(&data, "state.redb").unwrap();
    let files: Arc<dyn IoBackend> = Arc::new(data.clone());
    let mut rx = SnapshotReceiver::create(files, 1024, Box::new(|_| Ok(()))).unwrap();
    rx.write_at(0, &stream).unwrap();
    rx.finish().unwrap();
    stage_install(&data, &store, &log, small(), &[], (50, 2)).unwrap();
    drop(log);
    finish_interrupted_install(&data, &store).unwrap();
    let installed = data.dir(IDS_DIR).unwrap();
    assert_eq!(installed.file_bytes(&ids[0].0), Some(ids[0].1.clone()));
    assert!(IdFiles::new(Arc::new(installed))
        .open(999, IdSource::Segment(1))
        .is_err());
}

/// Review s31 H1: a leader file whose header verifies and one of whose data blocks does not
/// (a bad sector, or a power loss tearing it after its header) does not stop the catch-up:
/// the install succeeds, the other files answer, and the damaged one is there as the leader
/// has it, for the node's start to count its bucket as lost (fail closed).
#[test]
fn a_damaged_block_in_a_leader_id_file_does_not_stop_the_install() {
    let leader = fixture();
    let ids = leader_ids();
    let mut c: Vec<(u64, u64)> = (0..900).map(|k| (k * 5 + 2, k)).collect();
    IdFiles::new(Arc::new(ids.clone()))
        .write_segment(503, 5, &mut c)
        .unwrap();
    let torn = id_file_name(503, IdSource::Segment(5)).unwrap();
    let file = ids.open(&torn).unwrap();
    let mut b = [0u8; 1];
    file.read_at(4096 + 100, &mut b).unwrap();
    file.write_at(4096 + 100, &[b[0] ^ 0x10]).unwrap();
    let sent = ids.file_bytes(&torn).unwrap();
    let stream = leader_stream(&leader, &ids);
    let f = follower(&stream);
    stage(&f).unwrap();
    let Follower { data, store, log } = f;
    drop(log);
    finish_interrupted_install(&data, &store).unwrap();
    let installed = data.dir(IDS_DIR).unwrap();
    assert_eq!(installed.file_bytes(&torn), Some(sent));
    let files = IdFiles::new(Arc::new(installed));
    assert!(files
        .open(503, IdSource::Segment(5))
        .and_then(|r| r.verify())
        .is_err());
    let good = files.open(500, IdSource::Segment(1)).unwrap();
    assert_eq!(
        good.find(LEADER_KEY, |_| true).unwrap(),
        Some(LEADER_OFFSET)
    );
}

type Hook = Box<dyn FnOnce() + Send>;

/// Counts the files open through it (each handle handed out, until dropped), and runs a hook
/// before the `at`-th link.
struct Watched {
    inner: MemBackend,
    live: Arc<std::sync::atomic::AtomicUsize>,
    most: Arc<std::sync::atomic::AtomicUsize>,
    links: std::sync::atomic::AtomicUsize,
    before_link: std::sync::Mutex<Option<(usize, Hook)>>,
}

struct Counted(
    Arc<dyn crate::SegmentFile>,
    Arc<std::sync::atomic::AtomicUsize>,
);

impl Drop for Counted {
    fn drop(&mut self) {
        self.1.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl crate::SegmentFile for Counted {
    fn len(&self) -> std::io::Result<u64> {
        self.0.len()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.0.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        self.0.write_at(offset, data)
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.0.set_len(len)
    }
    fn sync_data(&self) -> std::io::Result<()> {
        self.0.sync_data()
    }
}

impl Watched {
    fn new(inner: MemBackend) -> Watched {
        Watched {
            inner,
            live: Default::default(),
            most: Default::default(),
            links: Default::default(),
            before_link: std::sync::Mutex::new(None),
        }
    }
    fn count(&self, f: Arc<dyn crate::SegmentFile>) -> Arc<dyn crate::SegmentFile> {
        use std::sync::atomic::Ordering::SeqCst;
        let now = self.live.fetch_add(1, SeqCst) + 1;
        self.most.fetch_max(now, SeqCst);
        Arc::new(Counted(f, self.live.clone()))
    }
}

impl IoBackend for Watched {
    fn list(&self) -> std::io::Result<Vec<String>> {
        self.inner.list()
    }
    fn create(&self, name: &str) -> std::io::Result<Arc<dyn crate::SegmentFile>> {
        self.inner.create(name).map(|f| self.count(f))
    }
    fn open(&self, name: &str) -> std::io::Result<Arc<dyn crate::SegmentFile>> {
        self.inner.open(name).map(|f| self.count(f))
    }
    fn remove(&self, name: &str) -> std::io::Result<()> {
        self.inner.remove(name)
    }
    fn rename(&self, from: &str, to: &str) -> std::io::Result<()> {
        self.inner.rename(from, to)
    }
    fn sync_dir(&self) -> std::io::Result<()> {
        self.inner.sync_dir()
    }
    fn link(&self, from: &str, to: &str) -> std::io::Result<()> {
        let n = self.links.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let mut hook = self.before_link.lock().unwrap();
        if hook.as_ref().is_some_and(|(at, _)| *at == n) {
            let (_, run) = hook.take().unwrap();
            drop(hook);
            run();
        }
        self.inner.link(from, to)
    }
}

/// Review s31 H2: the sender held every id file open for the whole stream (up to 65 536
/// descriptors, outside the node's budget). Now at most one is open at any time, and the
/// stream's links are gone when it drops.
#[test]
fn a_stream_of_many_id_files_holds_at_most_one_open() {
    let f = fixture();
    let ids = MemBackend::new();
    let files = IdFiles::new(Arc::new(ids.clone()));
    for b in 0..300u64 {
        files.write_segment(1000 + b, 1, &mut [(b, b)]).unwrap();
    }
    let watched = Arc::new(Watched::new(ids.clone()));
    let before = ids.list().unwrap();
    let mut src =
        SnapshotSource::open_with_ids(&f.store, &f.log, 50, Some(watched.clone())).unwrap();
    assert_eq!(src.header().ids_files, 300);
    let whole = read_all(&mut src);
    assert_eq!(whole.len() as u64, src.header().stream_len());
    let most = watched.most.load(std::sync::atomic::Ordering::SeqCst);
    assert!(most <= 1, "{most} id files open at once");
    drop(src);
    let mut after = ids.list().unwrap();
    after.sort();
    let mut before = before;
    before.sort();
    assert_eq!(
        after, before,
        "the stream's links are removed when it drops"
    );
    // A crash mid-stream leaves links: the group's open removes them.
    let src = SnapshotSource::open_with_ids(&f.store, &f.log, 50, Some(watched.clone())).unwrap();
    std::mem::forget(src);
    assert_eq!(crate::remove_send_links(&ids).unwrap(), 300);
    let mut after = ids.list().unwrap();
    after.sort();
    assert_eq!(after, before);
}

/// Review s31 M1, the race the docs name: a merge between the source's listing and its links
/// (the inputs gone when linked) still streams every pair, through the merge's output, and
/// does not start the listing over.
#[test]
fn a_merge_racing_the_sources_open_still_streams_its_pairs() {
    let f = fixture();
    let ids = leader_ids();
    let files = IdFiles::new(Arc::new(ids.clone()));
    files.write_segment(503, 7, &mut [(0xabc, 9)]).unwrap();
    files.write_segment(503, 8, &mut [(0xdef, 10)]).unwrap();
    let watched = Arc::new(Watched::new(ids.clone()));
    let merging = ids.clone();
    // Names sort by bucket: 500, 501 (merged), then 503's two inputs; merge before the third.
    *watched.before_link.lock().unwrap() = Some((
        2,
        Box::new(move || {
            IdFiles::new(Arc::new(merging))
                .merge_generation(503)
                .unwrap();
        }),
    ));
    let mut src =
        SnapshotSource::open_with_ids(&f.store, &f.log, 50, Some(watched.clone())).unwrap();
    let names = src.id_file_names();
    assert!(
        names.contains(&id_file_name(503, IdSource::Merged(0)).unwrap()),
        "{names:?}"
    );
    assert!(!names.contains(&id_file_name(503, IdSource::Segment(7)).unwrap()));
    let stream = read_all(&mut src);
    let fl = follower(&stream);
    stage(&fl).unwrap();
    let Follower { data, store, log } = fl;
    drop(log);
    finish_interrupted_install(&data, &store).unwrap();
    assert_eq!(lookup(&data, 0xabc), Some(9));
    assert_eq!(lookup(&data, 0xdef), Some(10));
    assert_eq!(lookup(&data, LEADER_KEY), Some(LEADER_OFFSET));
}
