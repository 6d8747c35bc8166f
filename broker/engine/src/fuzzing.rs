//! One entry point per decoder of the engine's disk bytes, shared by the fuzz targets in
//! `fuzz/` and the corpus replay test (`tests/fuzz_corpus.rs`), so both run exactly the same
//! checks. Not an API: each function panics when an invariant breaks, which is how a fuzzer
//! reports it. Each returns whether the input decoded.

use crate::entry::{decode_entry, EntryBuilder};
use crate::state::frame::{read_frame, skip_frames, write_frame, write_frame_ref};
use crate::state::{decode_state, encode_state};

/// An engine entry (the application body of a Raft record). The encoding is canonical, so
/// whatever decodes must encode to the very same bytes, with every effect at the same position.
pub fn entry(data: &[u8]) -> bool {
    let Ok((head, effects)) = decode_entry(data) else {
        return false;
    };
    let mut b = EntryBuilder::new(head.cycle, head.now_us);
    for (e, pos) in &effects {
        assert_eq!(b.push(e), *pos, "effect position differs after re-encoding");
    }
    assert!(
        b.finish() == data,
        "entry does not re-encode to its own bytes"
    );
    true
}

/// A checkpoint's state blob (versions 1 and 2). The blob is not canonical (version 1 rows
/// are regrouped, derived indexes are rebuilt, queues and groups follow `HashMap` order), so
/// the check is that what one decode/encode pass wrote decodes again to a state of the same
/// shape and the same encoded size.
pub fn state(data: &[u8]) -> bool {
    let Ok(s) = decode_state(data) else {
        return false;
    };
    let once = encode_state(&s);
    let back = match decode_state(&once) {
        Ok(b) => b,
        Err(e) => panic!("an encoded checkpoint does not decode: {e}"),
    };
    assert_eq!(shape(&back), shape(&s), "state changed across a round trip");
    assert_eq!(
        encode_state(&back).len(),
        once.len(),
        "encoded size changed"
    );
    true
}

type Shape = (u64, i64, Option<(u64, u64)>, [u64; 3], [usize; 7], i64);

fn shape(s: &crate::state::State) -> Shape {
    (
        s.last_cycle,
        s.last_now_us,
        s.applied,
        [s.next_queue_id, s.next_partition_id, s.next_group_id],
        [
            s.queues.len(),
            s.queue_by_name.len(),
            s.partitions.len(),
            s.groups.len(),
            s.leases.len(),
            s.traces.len(),
            s.txn_ids.iter().count(),
        ],
        s.txn_keep_us(),
    )
}

/// A run of stored frames, as a pop walks an Append's bytes: every frame that reads must write
/// back to a frame that reads the same, and `skip_frames` must land where reading did.
pub fn frames(data: &[u8]) -> bool {
    let mut rest = data;
    let mut n = 0u64;
    while !rest.is_empty() {
        let Ok((f, used)) = read_frame(rest) else {
            return false;
        };
        assert!(
            used <= rest.len(),
            "frame used {used} of {} bytes",
            rest.len()
        );
        let mut out = Vec::new();
        write_frame_ref(&mut out, &f);
        match read_frame(&out) {
            Ok((g, len)) => {
                assert_eq!(len, out.len(), "rewritten frame length");
                assert_eq!(
                    (g.id, g.trace, g.txn, g.producer, g.encrypted, g.payload),
                    (f.id, f.trace, f.txn, f.producer, f.encrypted, f.payload),
                    "frame does not round-trip"
                );
            }
            Err(e) => panic!("a rewritten frame does not read: {e}"),
        }
        rest = &rest[used..];
        n += 1;
        match skip_frames(data, n) {
            Ok(r) => assert_eq!(r.len(), rest.len(), "skip_frames disagrees with read_frame"),
            Err(e) => panic!("skip_frames refused {n} frames that read: {e}"),
        }
    }
    true
}

/// Starting inputs for the entry, state and frames targets: every effect kind, a state built
/// by applying them, and frames with and without their optional fields. Only the seed writer
/// of the corpus replay test calls this.
pub fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    use crate::entry::Effect;
    use crate::entry_kafka_txns::TxnEffect;
    use crate::state::config::QueueConfig;
    use crate::state::model::{CursorRow, LeaseRow};
    use crate::state::{Loc, State};

    let mut frames = Vec::new();
    write_frame(&mut frames, &[1; 16], None, "tx-1", None, b"{\"a\":1}");
    write_frame(&mut frames, &[2; 16], Some(&[9; 16]), "", Some("p"), b"[]");
    let one_frame = frames.clone();
    write_frame(&mut frames, &[3; 16], None, "tx-3", Some("alice"), b"null");
    let row = CursorRow {
        committed: 1,
        lease: Some(LeaseRow {
            id: 5,
            end: 2,
            expires_us: 1_000_000,
            seconds: 30,
        }),
        failures: 1,
        attempt: 2,
        delivered_end: 2,
    };
    let effects = [
        Effect::QueueUpsert {
            qid: 1,
            name: "q",
            namespace: "ns",
            task: "t",
            configured: true,
            config: QueueConfig::default(),
        },
        Effect::PartitionCreate {
            qid: 1,
            pid: 1,
            name: "Default",
        },
        Effect::Append {
            pid: 1,
            base_offset: 0,
            hashes: vec![11, 12, 13],
            frames: &frames,
        },
        Effect::GroupRegister {
            qid: 1,
            gid: 1,
            name: "g",
            start_from_us: 0,
        },
        Effect::CursorPut {
            gid: 1,
            pid: 1,
            row,
        },
        Effect::DlqInsert {
            gid: 1,
            pid: 1,
            offset: 0,
            retries: 3,
            error: "boom",
        },
        Effect::TraceAppend {
            pid: 1,
            txn: "tx-1",
            group: "g",
            names: vec!["a", "b"],
            event_type: "info",
            data: "{}",
        },
        Effect::KvPut {
            ns: "ns",
            key: "k",
            value: "1",
            version: 1,
            expires_at_us: Some(5_000),
        },
        Effect::KvDelete {
            ns: "ns",
            key: "gone",
        },
        Effect::GroupConflation { gid: 1 },
        Effect::GroupStartFrom {
            gid: 1,
            start_from_us: 1_000,
        },
        // Neither matches the row above: the state keeps a DLQ row to encode.
        Effect::DlqDelete { pid: 1, offset: 5 },
        Effect::DlqPurge {
            qid: 1,
            group: "other",
            pid: crate::entry::ANY_PARTITION,
            from_us: i64::MIN,
            to_us: i64::MAX,
        },
        // Two declared, one deleted: the state keeps an ephemeral section to encode.
        Effect::EphemeralConfigSet {
            queue: "eph",
            options: queenmq_protocol::EphemeralOptions::default(),
        },
        Effect::EphemeralConfigSet {
            queue: "eph-gone",
            options: queenmq_protocol::EphemeralOptions {
                drop_oldest: true,
                ..Default::default()
            },
        },
        Effect::EphemeralConfigDelete { queue: "eph-gone" },
        Effect::KafkaTxn(TxnEffect::Init {
            txn_id: "tx",
            producer_id: 0,
            epoch: 1,
            timeout_ms: 60_000,
        }),
        // A KIP-360 bump's pair: the transactions section carries its second layout.
        Effect::KafkaTxn(TxnEffect::BumpedFrom {
            txn_id: "tx",
            producer_id: 0,
            epoch: 0,
        }),
        Effect::KafkaTxn(TxnEffect::Add {
            txn_id: "tx",
            producer_id: 0,
            epoch: 1,
            pids: vec![],
            groups: vec!["g"],
        }),
        Effect::KafkaTxn(TxnEffect::End {
            txn_id: "tx",
            how: crate::state::kafka_txns::TxnEnd::Abort,
            markers: vec![],
        }),
        Effect::TenantDeclared(crate::entry_tenants::TenantDeclared {
            tenant: "acme",
            voters: vec![1, 2, 3],
        }),
        Effect::GroupDelete { gid: 9 },
        Effect::QueueDelete { qid: 9 },
    ];
    let mut out = vec![("frames", frames.clone()), ("frames", one_frame)];
    let mut all = EntryBuilder::new(3, 1_000);
    let mut state = State::default();
    for (i, e) in effects.iter().enumerate() {
        let mut alone = EntryBuilder::new(i as u64, 1_000 + i as i64);
        alone.push(e);
        out.push(("entry", alone.finish()));
        let pos = all.push(e);
        state.apply(e, 1_000 + i as i64, Loc { index: 1, pos });
    }
    out.push(("entry", all.finish()));
    // The declaration above, as its commit keeps it: the state carries a tenants section.
    state.applied = Some((1, 1));
    crate::state::tenants::declare(&mut state.tenants, "acme", 1, &[1, 2, 3]);
    out.push(("state", encode_state(&State::default())));
    out.push(("state", encode_state(&state)));
    out
}
