//! One entry point per decoder of disk bytes, shared by the fuzz targets in `fuzz/` and the
//! corpus replay tests in `tests/`, so both run exactly the same checks. Not an API: each
//! function panics when an invariant breaks, which is how a fuzzer reports it.

use std::sync::Arc;

use crate::format::{decode_body, decode_header, encode_header, encode_record, segment_name};
use crate::state::checkpoint::CheckpointHead;
use crate::{
    IoBackend, LogOptions, MemBackend, SegmentLog, SnapshotHeader, SnapshotReceiver,
    SNAPSHOT_HEADER_LEN, SNAPSHOT_INCOMING,
};

/// The checkpoint header row (version 1 or 2) as `StateStore::read_checkpoint` meets it: decoded,
/// its length checked before any allocation, then compared with the state bytes that follow it
/// in the input.
pub fn checkpoint_head(data: &[u8]) -> bool {
    let split = match data.first() {
        Some(1) => 36,
        _ => 40,
    }
    .min(data.len());
    let (head, state) = data.split_at(split);
    let Ok(h) = CheckpointHead::decode(head) else {
        return false;
    };
    let Ok(cap) = h.checked_capacity() else {
        return false;
    };
    assert!(
        cap as u64 == h.state_len,
        "capacity differs from the header"
    );
    if head.len() == 40 {
        // Version 2 covers itself with a CRC: what decodes must encode to the same bytes.
        assert_eq!(h.encode()[..], head[..], "v2 header does not round-trip");
    }
    h.verify(state).is_ok()
}

/// The segment header and one record body, decoded directly.
pub fn segment_record(data: &[u8]) -> bool {
    let _ = decode_header(data);
    match decode_body(data) {
        Ok(r) => {
            let mut again = Vec::new();
            encode_record(&mut again, r.index, r.term, r.payload);
            assert_eq!(&again[4..], data, "record body does not round-trip");
            true
        }
        Err(_) => false,
    }
}

/// Little reader over the fuzz input: running out gives zeros, so every input is a valid plan.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn take(&mut self, n: usize) -> &[u8] {
        let (a, b) = self.0.split_at(n.min(self.0.len()));
        self.0 = b;
        a
    }
    fn u8(&mut self) -> u8 {
        self.take(1).first().copied().unwrap_or(0)
    }
    fn u16(&mut self) -> u16 {
        u16::from(self.u8()) | (u16::from(self.u8()) << 8)
    }
    fn u64(&mut self) -> u64 {
        let mut a = [0u8; 8];
        let s = self.take(8);
        a[..s.len()].copy_from_slice(s);
        u64::from_le_bytes(a)
    }
}

/// A directory of up to four segment files built from the input, opened by recovery, then
/// read back whole, appended to and reopened. Layout of the input (docs/fuzzing.md):
/// `flags u8 | max_record selector u8 | durable_through u64 | per file: first u64 | len u16 |
/// bytes`. Flag 1 accepts data loss; flag 2 builds each file from valid records (so the fuzzer
/// gets past the CRCs) and then damages it as the first three of its bytes say.
pub fn segment_log(data: &[u8]) -> bool {
    let mut inp = Input(data);
    let flags = inp.u8();
    let max_record_bytes = 16u32 << (inp.u8() & 15);
    let durable_through = inp.u64();
    let backend = MemBackend::new();
    for _ in 0..=(flags >> 2) & 3 {
        let first = inp.u64();
        let len = usize::from(inp.u16());
        let bytes = inp.take(len);
        let file = if flags & 2 != 0 {
            built_segment(first, bytes)
        } else {
            bytes.to_vec()
        };
        backend.set_file_bytes(&segment_name(first), file);
    }
    let opts = LogOptions {
        segment_bytes: 4096,
        max_record_bytes,
        durable_through,
        accept_data_loss: flags & 1 != 0,
    };
    let Ok((log, report)) = SegmentLog::open_with_backend(Arc::new(backend.clone()), opts) else {
        return false;
    };
    let Some((first, (last, last_term))) = log.first_index().zip(log.last()) else {
        assert_eq!(report.records, 0, "records reported in an empty log");
        return true;
    };
    assert!(first <= last, "first index {first} above last {last}");
    assert_eq!(
        report.records,
        last - first + 1,
        "report and index disagree"
    );
    for i in first..=last {
        let got = log.read(i).map_err(|e| e.to_string());
        let term = match got {
            Ok(Some((term, _))) => term,
            other => panic!("index {i} of a recovered log does not read back: {other:?}"),
        };
        assert_eq!(
            log.term_of(i),
            Some(term),
            "term_of({i}) disagrees with read"
        );
    }
    let Some(next) = last.checked_add(1) else {
        return true;
    };
    if log.append(next, last_term, b"after recovery").is_err() || log.sync().is_err() {
        return true;
    }
    drop(log);
    let reopen = LogOptions {
        durable_through: next,
        accept_data_loss: false,
        ..opts
    };
    match SegmentLog::open_with_backend(Arc::new(backend.crash()), reopen) {
        Ok((again, _)) => {
            assert_eq!(again.first_index(), Some(first), "first index moved");
            assert_eq!(
                again.last(),
                Some((next, last_term)),
                "appended record lost"
            );
        }
        Err(e) => panic!("a recovered log with one synced append does not reopen: {e}"),
    }
    true
}

/// A segment of valid records (`term u8 | len u8 | payload` each, from byte 3 of `spec`), then
/// damaged by `spec[0]`: 1 flips the byte at `spec[1..3]`, 2 truncates there.
fn built_segment(first: u64, spec: &[u8]) -> Vec<u8> {
    let mut inp = Input(spec);
    let op = inp.u8();
    let at = usize::from(inp.u16());
    let mut out = encode_header(first).to_vec();
    let mut index = first;
    while !inp.0.is_empty() {
        let term = u64::from(inp.u8());
        let len = usize::from(inp.u8());
        encode_record(&mut out, index, term, inp.take(len));
        let Some(n) = index.checked_add(1) else {
            break;
        };
        index = n;
    }
    match op {
        1 if at < out.len() => out[at] ^= 0x5a,
        2 => out.truncate(at),
        _ => {}
    }
    out
}

/// A whole snapshot stream in memory: `state`, then one record per `(term, payload)` from
/// index `first`; the applied index is the last record's (`first - 1` with none) and the
/// applied term the last record's (`term_if_none` with none). Tests and seeds only: the sender
/// never holds a stream whole.
pub fn snapshot_stream_bytes(
    state: &[u8],
    first: u64,
    term_if_none: u64,
    records: &[(u64, &[u8])],
) -> Vec<u8> {
    snapshot_stream_with_ids(state, first, term_if_none, records, &[])
}

/// As `snapshot_stream_bytes`, with an ids part (version 2) of `ids` (name, file bytes) when
/// it is not empty.
pub fn snapshot_stream_with_ids(
    state: &[u8],
    first: u64,
    term_if_none: u64,
    records: &[(u64, &[u8])],
    ids: &[(String, Vec<u8>)],
) -> Vec<u8> {
    let mut part = Vec::new();
    for (name, bytes) in ids {
        match crate::snapshot::encode_entry_head(name, bytes.len() as u64) {
            Ok(h) => part.extend_from_slice(&h),
            Err(e) => panic!("a test id file name: {e}"),
        }
        part.extend_from_slice(bytes);
    }
    let mut recs = Vec::new();
    for (i, (term, payload)) in records.iter().enumerate() {
        encode_record(&mut recs, first + i as u64, *term, payload);
    }
    let head = SnapshotHeader {
        applied_index: (first + records.len() as u64).saturating_sub(1),
        applied_term: records.last().map_or(term_if_none, |r| r.0),
        first_record: first,
        state_len: state.len() as u64,
        records_len: recs.len() as u64,
        state_crc: crc32c::crc32c(state),
        ids_len: part.len() as u64,
        ids_files: ids.len() as u32,
    };
    [&head.encode()[..], state, &recs, &part].concat()
}

/// `n` id files of a few pairs each, as the spill writes them (tests and seeds).
pub fn id_files_for_tests(n: usize, pairs_each: usize) -> Vec<(String, Vec<u8>)> {
    let mem = MemBackend::new();
    let files = crate::IdFiles::new(Arc::new(mem.clone()));
    let mut out = Vec::new();
    for i in 0..n {
        let mut pairs: Vec<(u64, u64)> = (0..pairs_each as u64)
            .map(|k| (k.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ i as u64, k))
            .collect();
        if let Err(e) = files.write_segment(100 + i as u64, 1, &mut pairs) {
            panic!("writing a test id file: {e}");
        }
        let Some(name) = crate::id_file_name(100 + i as u64, crate::IdSource::Segment(1)) else {
            panic!("a test id file name");
        };
        let Some(bytes) = mem.file_bytes(&name) else {
            panic!("the test id file {name} is missing");
        };
        out.push((name, bytes));
    }
    out
}

/// A snapshot stream as `SnapshotReceiver` meets it, chunk by chunk. Layout of the input
/// (docs/fuzzing.md): `chunk selector u8 | max_record selector u8 | flags u8 | bytes`. Flag 1
/// builds the stream from a plan (`built_stream`) so the fuzzer gets past the CRCs; flag 2
/// sends every chunk twice at its offset, as openraft does after a timeout. The verdict must
/// not depend on the chunking, a resent chunk never changes it, a refusal leaves no file, and
/// an accepted stream is exactly the file.
pub fn snapshot_stream(data: &[u8]) -> bool {
    let mut inp = Input(data);
    let chunk = 1usize << (inp.u8() & 15);
    let max_record_bytes = 16u32 << (inp.u8() & 15);
    let flags = inp.u8();
    let stream = if flags & 1 != 0 {
        built_stream(inp.0)
    } else {
        inp.0.to_vec()
    };
    let receive = |chunk: usize, twice: bool| -> (bool, MemBackend) {
        let mem = MemBackend::new();
        let dir: Arc<dyn IoBackend> = Arc::new(mem.clone());
        let mut rx = match SnapshotReceiver::create(dir, max_record_bytes, Box::new(|_| Ok(()))) {
            Ok(rx) => rx,
            Err(e) => panic!("the receiver cannot start on a memory backend: {e}"),
        };
        for (i, piece) in stream.chunks(chunk).enumerate() {
            let at = (i * chunk) as u64;
            if rx.write_at(at, piece).is_err() {
                return (false, mem);
            }
            if twice {
                if let Err(e) = rx.write_at(at, piece) {
                    panic!("chunk {i} passed, then was refused when resent: {e}");
                }
            }
        }
        (rx.finish().is_ok(), mem)
    };
    let (accepted, mem) = receive(chunk, flags & 2 != 0);
    let (whole, _) = receive(stream.len().max(1), false);
    assert_eq!(accepted, whole, "the verdict depends on the chunking");
    let after = mem.crash();
    let file = after.file_bytes(SNAPSHOT_INCOMING);
    let names = match after.list() {
        Ok(names) => names,
        Err(e) => panic!("a memory backend cannot list: {e}"),
    };
    assert!(names.len() <= 1, "a part file stayed: {names:?}");
    if !accepted {
        assert_eq!(file, None, "a refused stream left its file");
        assert!(
            mem.list().is_ok_and(|n| n.is_empty()),
            "a refused stream left its file"
        );
        return false;
    }
    assert_eq!(
        file.as_deref(),
        Some(&stream[..]),
        "the file is not the stream"
    );
    let head_len = crate::snapshot::header_len_of(stream[4]).unwrap_or(SNAPSHOT_HEADER_LEN);
    match SnapshotHeader::decode(&stream[..head_len]) {
        Ok(h) => assert_eq!(h.stream_len(), stream.len() as u64, "length differs"),
        Err(e) => panic!("an accepted stream's header does not decode: {e}"),
    }
    true
}

/// A valid stream from a plan, then damaged: `op u8 | at u16 | first u8 | state_len u8 |
/// state | per record: term step u8 (its low bit raises the term) | len u8 | payload`; op 1
/// flips the byte at `at`, op 2 truncates there; ops 3-5 are ops 0-2 on a version-2 stream
/// carrying `op - 2` id files (at 4 that is an ids part of 2 × 8 KiB).
fn built_stream(spec: &[u8]) -> Vec<u8> {
    let mut inp = Input(spec);
    let op = inp.u8();
    let ids = match op {
        3..=5 => id_files_for_tests(usize::from(op - 2), 300),
        _ => Vec::new(),
    };
    let op = if op >= 3 { op - 3 } else { op };
    let at = usize::from(inp.u16());
    let first = u64::from(inp.u8());
    let state_len = usize::from(inp.u8());
    let state = inp.take(state_len).to_vec();
    let mut records = Vec::new();
    let mut term = 1;
    while !inp.0.is_empty() {
        term += u64::from(inp.u8() & 1);
        let len = usize::from(inp.u8());
        records.push((term, inp.take(len).to_vec()));
    }
    let refs: Vec<(u64, &[u8])> = records.iter().map(|(t, p)| (*t, &p[..])).collect();
    let mut out = snapshot_stream_with_ids(&state, first, 1, &refs, &ids);
    match op {
        1 if at < out.len() => out[at] ^= 0x5a,
        2 => out.truncate(at),
        _ => {}
    }
    out
}

/// Starting inputs for the storage targets, around one record `payload` (a real Raft record
/// payload in practice). Only the seed writer of the corpus replay test calls this.
pub fn seeds(payload: &[u8]) -> Vec<(&'static str, Vec<u8>)> {
    let mut out = Vec::new();
    let cp = crate::Checkpoint {
        applied_index: 7,
        applied_term: 2,
        state: payload.to_vec(),
    };
    if let Ok(h) = CheckpointHead::describe(&cp) {
        let v2 = h.encode();
        out.push(("checkpoint_head", [&v2[..], payload].concat()));
        let mut v1 = v2[..36].to_vec();
        v1[0] = 1;
        out.push(("checkpoint_head", [&v1[..], payload].concat()));
    }
    let mut rec = Vec::new();
    encode_record(&mut rec, 7, 2, payload);
    out.push(("segment_record", rec[4..].to_vec()));
    let records: [(u64, &[u8]); 3] = [(1, payload), (2, b"x"), (2, b"")];
    let stream = snapshot_stream_bytes(payload, 5, 2, &records);
    out.push(("snapshot_stream", [&[6u8, 12, 0][..], &stream].concat()));
    out.push(("snapshot_stream", [&[3u8, 12, 2][..], &stream].concat()));
    let bare = snapshot_stream_bytes(payload, 8, 2, &[]);
    out.push(("snapshot_stream", [&[16u8, 12, 0][..], &bare].concat()));
    let plan = [9, 3, 1, 2, 3, 1, 2, 7, 7, 0, 0];
    out.push((
        "snapshot_stream",
        [&[4u8, 4, 3, 0, 0, 0][..], &plan].concat(),
    ));
    out.push((
        "snapshot_stream",
        [&[4u8, 4, 1, 1, 70, 0][..], &plan].concat(),
    ));
    // Version 2: one id file carried whole; two with a byte of the first file flipped (taken
    // since review s31 H1: a damaged file is installed as sent); two cut inside the first.
    out.push((
        "snapshot_stream",
        [&[9u8, 4, 1, 3, 0, 0][..], &plan[3..]].concat(),
    ));
    out.push((
        "snapshot_stream",
        [&[9u8, 4, 3, 4, 16, 1][..], &plan[3..]].concat(),
    ));
    out.push((
        "snapshot_stream",
        [&[9u8, 4, 3, 5, 16, 1][..], &plan[3..]].concat(),
    ));
    out.push(("segment_record", encode_header(7).to_vec()));
    // segment_log plans: flags, max_record selector, durable_through, then files.
    let file = |first: u64, bytes: &[u8]| {
        let mut f = first.to_le_bytes().to_vec();
        f.extend_from_slice(&(bytes.len().min(usize::from(u16::MAX)) as u16).to_le_bytes());
        f.extend_from_slice(&bytes[..bytes.len().min(usize::from(u16::MAX))]);
        f
    };
    let records = |n: u8| {
        let mut spec = vec![0u8, 0, 0];
        for i in 0..n {
            spec.extend_from_slice(&[1, i]);
            spec.extend((0..i).map(|b| b.wrapping_mul(31)));
        }
        spec
    };
    let mut raw = encode_header(1).to_vec();
    for (i, p) in [payload, &b"x"[..], &[][..]].iter().enumerate() {
        encode_record(&mut raw, 1 + i as u64, 1, p);
    }
    let plan = |flags: u8, durable: u64, files: &[Vec<u8>]| {
        let mut p = vec![flags | (((files.len() - 1) as u8) << 2), 12];
        p.extend_from_slice(&durable.to_le_bytes());
        for f in files {
            p.extend_from_slice(f);
        }
        p
    };
    out.push(("segment_log", plan(0, 0, &[file(1, &raw)])));
    out.push(("segment_log", plan(2, 3, &[file(1, &records(5))])));
    let mut torn = records(6);
    torn[0] = 2;
    torn[1] = 40;
    out.push(("segment_log", plan(2, 1, &[file(1, &torn)])));
    let mut flipped = records(6);
    flipped[0] = 1;
    flipped[1] = 30;
    out.push((
        "segment_log",
        plan(3, 2, &[file(1, &records(3)), file(4, &flipped)]),
    ));
    out
}

/// Runs every file of `fuzz/corpus/<target>/` (found from a crate's `CARGO_MANIFEST_DIR`)
/// through `check`, the function its fuzz target calls; a panic names the file. Refuses an
/// empty or missing corpus and one in which nothing decodes, so the replay cannot pass vacuously.
/// Returns (files, files that decoded).
pub fn replay_corpus(manifest_dir: &str, target: &str, check: fn(&[u8]) -> bool) -> (usize, usize) {
    let dir = std::path::Path::new(manifest_dir)
        .join("../fuzz/corpus")
        .join(target);
    let mut paths: Vec<_> = match std::fs::read_dir(&dir) {
        Ok(rd) => rd.filter_map(|e| e.ok().map(|e| e.path())).collect(),
        Err(e) => panic!("corpus {} cannot be listed: {e}", dir.display()),
    };
    paths.sort();
    let (mut files, mut decoded) = (0, 0);
    for p in paths.iter().filter(|p| p.is_file()) {
        let bytes = match std::fs::read(p) {
            Ok(b) => b,
            Err(e) => panic!("corpus file {} cannot be read: {e}", p.display()),
        };
        let ok = std::panic::catch_unwind(|| check(&bytes))
            .unwrap_or_else(|_| panic!("corpus file {} breaks the {target} check", p.display()));
        files += 1;
        decoded += usize::from(ok);
    }
    assert!(files > 0, "corpus {} is empty", dir.display());
    assert!(decoded > 0, "no file of corpus {} decodes", dir.display());
    (files, decoded)
}

/// An id file of the dedup index (`g…9-s…9.qidx`) as `IdFiles` meets it: opened (header and
/// length checked before any block is read), read whole, then every pair it verified must be
/// found again by the binary search.
pub fn id_file(data: &[u8]) -> bool {
    let mem = MemBackend::new();
    let source = crate::IdSource::Segment(9);
    let Some(name) = crate::id_file_name(9, source) else {
        return false;
    };
    mem.set_file_bytes(&name, data.to_vec());
    let files = crate::IdFiles::new(Arc::new(mem));
    let Ok(reader) = files.open(9, source) else {
        return false;
    };
    let mut pairs = Vec::new();
    let mut cursor = reader.cursor();
    loop {
        match cursor.next_pair() {
            Ok(Some(p)) => pairs.push(p),
            Ok(None) => break,
            Err(_) => return false,
        }
    }
    assert_eq!(
        pairs.len() as u64,
        reader.pairs(),
        "pairs read differ from the header"
    );
    for &(key, offset) in &pairs {
        let found = reader.find(key, |o| o == offset);
        assert!(
            matches!(found, Ok(Some(o)) if o == offset),
            "pair ({key}, {offset}) verified but not found: {found:?}"
        );
    }
    true
}
