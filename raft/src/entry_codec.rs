//! How one openraft entry is laid into one SegmentLog record, and back. The record's own
//! index and term are the entry's LogId; the payload is a kind byte then a body:
//!
//! | kind | body |
//! |------|------|
//! | 0 blank | empty |
//! | 1 application | the exact bytes given to `propose` |
//! | 2 membership | serde_json of openraft `Membership` |
//!
//! Application bodies are not re-encoded, so a message's bytes are written to disk once and
//! can be handed back to the engine by index without any parsing.

use openraft::EntryPayload;

use crate::types::{log_id, Entry, Membership};

const KIND_BLANK: u8 = 0;
const KIND_APP: u8 = 1;
const KIND_MEMBERSHIP: u8 = 2;

#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error("log record {index} is empty, but every record starts with a kind byte")]
    Empty { index: u64 },
    #[error("log record {index} has unknown kind byte {kind}")]
    UnknownKind { index: u64, kind: u8 },
    #[error("log record {index} holds a membership that does not parse: {source}")]
    Membership {
        index: u64,
        #[source]
        source: serde_json::Error,
    },
    #[error("a membership entry could not be serialised: {0}")]
    EncodeMembership(#[source] serde_json::Error),
}

/// The record payload for `entry`.
pub fn encode(entry: &Entry) -> Result<Vec<u8>, CodecError> {
    Ok(match &entry.payload {
        EntryPayload::Blank => vec![KIND_BLANK],
        EntryPayload::Normal(data) => {
            let mut out = Vec::with_capacity(1 + data.len());
            out.push(KIND_APP);
            out.extend_from_slice(data);
            out
        }
        EntryPayload::Membership(m) => {
            let mut out = vec![KIND_MEMBERSHIP];
            serde_json::to_writer(&mut out, m).map_err(CodecError::EncodeMembership)?;
            out
        }
    })
}

/// The length of `encode(entry)`, without building it: an application entry (all the bulk of
/// the log) costs nothing to measure; a membership is small and serialised to count it.
pub fn encoded_len(entry: &Entry) -> Result<usize, CodecError> {
    Ok(match &entry.payload {
        EntryPayload::Blank => 1,
        EntryPayload::Normal(data) => 1 + data.len(),
        EntryPayload::Membership(m) => {
            1 + serde_json::to_vec(m)
                .map_err(CodecError::EncodeMembership)?
                .len()
        }
    })
}

/// The entry stored at (`index`, `term`) with record payload `payload`.
pub fn decode(index: u64, term: u64, mut payload: Vec<u8>) -> Result<Entry, CodecError> {
    let kind = *payload.first().ok_or(CodecError::Empty { index })?;
    let payload = match kind {
        KIND_BLANK => EntryPayload::Blank,
        KIND_APP => {
            payload.drain(..1);
            EntryPayload::Normal(payload)
        }
        KIND_MEMBERSHIP => {
            let m: Membership = serde_json::from_slice(&payload[1..])
                .map_err(|source| CodecError::Membership { index, source })?;
            EntryPayload::Membership(m)
        }
        kind => return Err(CodecError::UnknownKind { index, kind }),
    };
    Ok(Entry {
        log_id: log_id(term, index),
        payload,
    })
}

/// The application body of a record payload, or None for blank and membership records.
pub fn app_body(index: u64, mut payload: Vec<u8>) -> Result<Option<Vec<u8>>, CodecError> {
    match payload.first().copied() {
        None => Err(CodecError::Empty { index }),
        Some(KIND_APP) => {
            payload.drain(..1);
            Ok(Some(payload))
        }
        Some(KIND_BLANK | KIND_MEMBERSHIP) => Ok(None),
        Some(kind) => Err(CodecError::UnknownKind { index, kind }),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    fn round_trip(entry: Entry) -> Entry {
        let bytes = encode(&entry).unwrap();
        decode(entry.log_id.index, entry.log_id.leader_id.term, bytes).unwrap()
    }

    #[test]
    fn blank_round_trips() {
        let e = Entry {
            log_id: log_id(3, 7),
            payload: EntryPayload::Blank,
        };
        assert_eq!(round_trip(e.clone()), e);
        assert_eq!(encode(&e).unwrap(), vec![KIND_BLANK]);
    }

    #[test]
    fn application_bytes_are_stored_verbatim() {
        let e = Entry {
            log_id: log_id(1, 2),
            payload: EntryPayload::Normal(b"hello".to_vec()),
        };
        let bytes = encode(&e).unwrap();
        assert_eq!(bytes, b"\x01hello");
        assert_eq!(app_body(2, bytes).unwrap(), Some(b"hello".to_vec()));
        assert_eq!(round_trip(e.clone()), e);
    }

    #[test]
    fn empty_application_payload_round_trips() {
        let e = Entry {
            log_id: log_id(1, 2),
            payload: EntryPayload::Normal(Vec::new()),
        };
        assert_eq!(round_trip(e.clone()), e);
    }

    #[test]
    fn membership_round_trips() {
        let m = Membership::new(vec![BTreeSet::from([1, 2, 3])], None);
        let e = Entry {
            log_id: log_id(2, 9),
            payload: EntryPayload::Membership(m),
        };
        assert_eq!(round_trip(e.clone()), e);
        assert_eq!(app_body(9, encode(&e).unwrap()).unwrap(), None);
    }

    #[test]
    fn empty_record_is_refused() {
        assert!(matches!(
            decode(4, 1, Vec::new()),
            Err(CodecError::Empty { index: 4 })
        ));
        assert!(matches!(
            app_body(4, Vec::new()),
            Err(CodecError::Empty { index: 4 })
        ));
    }

    #[test]
    fn unknown_kind_is_refused() {
        assert!(matches!(
            decode(5, 1, vec![9, 1, 2]),
            Err(CodecError::UnknownKind { index: 5, kind: 9 })
        ));
    }

    #[test]
    fn garbled_membership_is_refused() {
        assert!(matches!(
            decode(6, 1, vec![KIND_MEMBERSHIP, b'{']),
            Err(CodecError::Membership { index: 6, .. })
        ));
    }
}
