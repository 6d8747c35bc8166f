//! Reads by offset against a fixture leader: committed and still-pending records, the byte
//! budgets, discovery pages and ListOffsets.

use queenmq_protocol::fetch::*;
use queenmq_protocol::{ReadAnswer, ReadReq};

use crate::plan::fixture::{Fixture, NOW, SECOND};
use crate::state::canonical::canonical;

fn ask(f: &mut Fixture, req: ReadReq) -> ReadAnswer {
    let mut p = f.planner();
    let (st, mut rd) = p.reader_parts();
    match super::answer(st, &mut rd, &req) {
        Ok(a) => a,
        Err(e) => panic!("read failed: {}", e.message),
    }
}

fn entry(partition: &str, offset: u64) -> FetchEntry {
    FetchEntry {
        queue: "q".into(),
        partition: partition.into(),
        offset,
        max_bytes: MAX_FETCH_BYTES,
    }
}

fn fetch(f: &mut Fixture, entries: Vec<FetchEntry>, max_bytes: usize) -> Vec<FetchedEntry> {
    match ask(
        f,
        ReadReq::Fetch(FetchReq {
            entries,
            max_bytes,
            read_committed: false,
        }),
    ) {
        ReadAnswer::Fetch(a) => a.entries,
        _ => panic!("not a fetch answer"),
    }
}

fn offsets(e: &FetchedEntry) -> Vec<u64> {
    e.records.iter().map(|r| r.offset).collect()
}

#[test]
fn fetch_reads_committed_and_pending_records_without_changing_state() {
    let mut f = Fixture::new();
    f.push("q", "a", 3);
    f.advance(SECOND);
    // Planned in the open cycle, not committed yet: served from the entry being built.
    f.push("q", "a", 2);
    let before = canonical(&f.st);
    let got = fetch(
        &mut f,
        vec![
            entry("a", 0),
            entry("a", 5),
            entry("a", 6),
            entry("b", 0),
            FetchEntry {
                queue: "none".into(),
                ..entry("a", 0)
            },
        ],
        MAX_FETCH_BYTES,
    );
    assert_eq!(got.len(), 5, "index-aligned");
    assert_eq!(offsets(&got[0]), vec![0, 1, 2, 3, 4]);
    assert_eq!((got[0].high_watermark, got[0].log_start), (5, 0));
    assert_eq!(got[0].records[1].transaction_id, "m2");
    assert_eq!(&got[0].records[1].payload[..], b"\"m2\"");
    assert_eq!(got[0].records[0].created_us, NOW);
    assert_eq!((got[1].records.len(), got[1].error), (0, None));
    assert_eq!(got[2].error, Some(FetchError::OffsetOutOfRange));
    assert_eq!(got[3].error, Some(FetchError::UnknownPartition));
    assert_eq!(got[4].error, Some(FetchError::UnknownQueue));
    assert_eq!(canonical(&f.st), before, "a fetch changes nothing");
    f.assert_replays();
}

#[test]
fn fetch_budgets_bound_each_entry_and_the_call() {
    let mut f = Fixture::new();
    f.push("q", "a", 10);
    f.push("q", "b", 10);
    f.advance(SECOND);
    // Payloads are 4 or 5 bytes ("m1".."m20" quoted): each record costs 64 + that.
    let mut small = entry("a", 0);
    small.max_bytes = 1;
    let got = fetch(&mut f, vec![small], MAX_FETCH_BYTES);
    assert_eq!(
        offsets(&got[0]),
        vec![0],
        "the first record is served whatever its size"
    );
    let mut two = entry("a", 0);
    two.max_bytes = 2 * (FETCH_RECORD_OVERHEAD + 4) + 1;
    assert_eq!(
        offsets(&fetch(&mut f, vec![two], MAX_FETCH_BYTES)[0]),
        vec![0, 1]
    );
    let call = 3 * (FETCH_RECORD_OVERHEAD + 5);
    let got = fetch(&mut f, vec![entry("a", 0), entry("b", 0)], call);
    assert_eq!(offsets(&got[0]), vec![0, 1, 2]);
    assert!(got[1].records.is_empty() && got[1].error.is_none());
    assert_eq!(
        got[1].high_watermark, 10,
        "a starved entry still tells its bounds"
    );
}

fn changed(
    f: &mut Fixture,
    since_us: Option<i64>,
    after: Option<u64>,
    limit: usize,
) -> ChangedAnswer {
    let req = ChangedReq {
        queue: "q".into(),
        limit,
        since_us,
        after,
    };
    match ask(f, ReadReq::Changed(req)) {
        ReadAnswer::Changed(a) => a,
        _ => panic!("not a changed answer"),
    }
}

#[test]
fn changed_pages_in_creation_order_and_filters_by_time() {
    let mut f = Fixture::new();
    for p in ["a", "b", "c"] {
        f.push("q", p, 1);
    }
    f.advance(SECOND);
    let first = changed(&mut f, None, None, 2);
    let names: Vec<_> = first.partitions.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["a", "b"]);
    assert_eq!(first.partitions[0].last_offset, 0);
    let rest = changed(&mut f, None, first.next, 2);
    assert_eq!(rest.partitions.len(), 1);
    assert_eq!(rest.partitions[0].name, "c");
    assert_eq!(rest.next, None);
    // Nothing written since the safe time; then one partition is.
    assert!(changed(&mut f, Some(first.safe_us), None, 10)
        .partitions
        .is_empty());
    f.push("q", "b", 1);
    f.advance(SECOND);
    let after = changed(&mut f, Some(first.safe_us), None, 10);
    assert_eq!(after.partitions.len(), 1);
    assert_eq!(
        (
            after.partitions[0].name.as_str(),
            after.partitions[0].last_offset
        ),
        ("b", 1)
    );
    assert!(after.partitions[0].last_write_us >= first.safe_us);
    let unknown = ChangedReq {
        queue: "nope".into(),
        limit: 10,
        since_us: None,
        after: None,
    };
    assert!(matches!(ask(&mut f, ReadReq::Changed(unknown)), ReadAnswer::Changed(a) if a.unknown));
}

#[test]
fn list_offsets_answers_each_kind() {
    let mut f = Fixture::new();
    f.push("q", "a", 2);
    f.advance(10 * SECOND);
    f.push("q", "a", 3);
    f.advance(SECOND);
    let q = |partition: &str, at| OffsetQuery {
        queue: "q".into(),
        partition: partition.into(),
        at,
    };
    let later = NOW + 5 * SECOND;
    let req = vec![
        q("a", OffsetAt::Earliest),
        q("a", OffsetAt::Latest),
        q("a", OffsetAt::Time(later)),
        q("a", OffsetAt::Time(NOW + 60 * SECOND)),
        q("a", OffsetAt::MaxTime),
        q("x", OffsetAt::Latest),
        OffsetQuery {
            queue: "none".into(),
            ..q("a", OffsetAt::Latest)
        },
    ];
    let ReadAnswer::Offsets(found) = ask(&mut f, ReadReq::ListOffsets(req)) else {
        panic!("not an offsets answer");
    };
    let got: Vec<_> = found.iter().map(|o| (o.offset, o.unknown)).collect();
    assert_eq!(
        got,
        [
            (0, false),
            (5, false),
            (2, false),
            (-1, false),
            (4, false),
            (0, false),
            (-1, true)
        ]
    );
    assert_eq!(found[2].time_us, NOW + 10 * SECOND);
    assert_eq!(found[4].time_us, NOW + 10 * SECOND);
}
