//! The Raft entry codec behind one function, shared by the fuzz target in `fuzz/` and the corpus
//! replay test, so both run the same checks. Not an API: it panics when an invariant breaks.

use crate::entry_codec::{app_body, decode, encode};

/// A log record payload as the log store reads it back (`decode`) and as the state machine
/// takes its application body (`app_body`). The first 16 bytes are the record's index and
/// term. Whatever decodes must encode and decode to the same entry, and both readers must
/// agree on what is an application entry. Returns whether the payload decoded.
pub fn raft_entry(data: &[u8]) -> bool {
    let (index, term, payload) = split(data);
    let entry = decode(index, term, payload.to_vec());
    let body = app_body(index, payload.to_vec());
    let Ok(entry) = entry else {
        // app_body does not parse membership JSON, so only the kind byte errors must agree.
        if payload.first().is_none_or(|&k| k > 2) {
            assert!(body.is_err(), "app_body accepted what decode refused");
        }
        return false;
    };
    let again = encode(&entry).map_err(|e| e.to_string());
    let again = match again {
        Ok(bytes) => decode(index, term, bytes).map_err(|e| e.to_string()),
        Err(e) => Err(e),
    };
    match again {
        Ok(back) => assert_eq!(back, entry, "entry does not round-trip"),
        Err(e) => panic!("a decoded entry does not re-encode: {e}"),
    }
    match (&entry.payload, body) {
        (openraft::EntryPayload::Normal(d), Ok(Some(b))) => assert_eq!(d, &b, "bodies differ"),
        (openraft::EntryPayload::Normal(_), other) => {
            panic!("app_body missed an application entry: {other:?}")
        }
        (_, Ok(None)) => {}
        (_, other) => panic!("app_body disagrees on a non-application entry: {other:?}"),
    }
    true
}

fn split(data: &[u8]) -> (u64, u64, &[u8]) {
    let mut head = [0u8; 16];
    let n = data.len().min(16);
    head[..n].copy_from_slice(&data[..n]);
    let (lo, hi) = head.split_at(8);
    let mut a = [0u8; 8];
    a.copy_from_slice(lo);
    let index = u64::from_le_bytes(a);
    a.copy_from_slice(hi);
    (index, u64::from_le_bytes(a), &data[n..])
}

/// Starting inputs for the raft_entry target: a blank, an application entry holding `app`
/// and a membership entry, each behind its 16-byte index and term.
pub fn seeds(app: &[u8]) -> Vec<Vec<u8>> {
    use std::collections::BTreeSet;

    use openraft::EntryPayload;

    use crate::types::{log_id, Entry, Membership};

    let payloads = [
        EntryPayload::Blank,
        EntryPayload::Normal(app.to_vec()),
        EntryPayload::Membership(Membership::new(vec![BTreeSet::from([1, 2, 3])], None)),
    ];
    payloads
        .into_iter()
        .filter_map(|payload| {
            let e = Entry {
                log_id: log_id(2, 7),
                payload,
            };
            let body = encode(&e).ok()?;
            Some([&7u64.to_le_bytes()[..], &2u64.to_le_bytes(), &body].concat())
        })
        .collect()
}
