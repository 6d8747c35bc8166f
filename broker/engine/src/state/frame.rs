//! Stored message frames: the bytes of one message inside an Append effect. The same layout as
//! the 2.x binary push/pop wire (spec/native-api.md §2.4), so a framed pop can ship them as stored.
//!
//! `body_len: u32 LE | flags: u8 (1 trace id, 2 producer, 4 encrypted) | id: [u8;16] |
//!  [trace: [u8;16]] | txn: u16 LE len + UTF-8 | [producer: u16 LE len + UTF-8] |
//!  payload (JSON text, or with flag 4 its envelope: docs/storage-format.md "Payload envelope")`

use crate::codec::{DecodeError, Reader};

pub const FLAG_TRACE: u8 = 1;
pub const FLAG_PRODUCER: u8 = 2;
pub const FLAG_ENCRYPTED: u8 = 4;

pub struct FrameRef<'a> {
    pub id: [u8; 16],
    pub trace: Option<[u8; 16]>,
    pub txn: &'a str,
    pub producer: Option<&'a str>,
    /// The payload is a sealed envelope ([`crate::seal`]), not the message's text.
    pub encrypted: bool,
    pub payload: &'a [u8],
}

/// A Kafka transaction's control record (docs/kafka-transactions.md) is a frame whose id is
/// fifteen zero bytes then its Kafka control type (0 abort, 1 commit), with an empty
/// transaction id and no producer: no minted id looks so (a UUIDv7 carries its version
/// nibble and a clock), so every reader knows a marker from its frame alone, and commit
/// markers need no index in RAM.
pub fn marker_id(commit: bool) -> [u8; 16] {
    let mut id = [0u8; 16];
    id[15] = u8::from(commit);
    id
}

/// `Some(true)` for a commit marker's frame, `Some(false)` for an abort marker's, else `None`.
pub fn control_marker(f: &FrameRef<'_>) -> Option<bool> {
    (is_marker_id(&f.id) && f.txn.is_empty() && f.producer.is_none()).then_some(f.id[15] == 1)
}

/// Whether `id` is a control marker's ([`marker_id`]).
pub fn is_marker_id(id: &[u8; 16]) -> bool {
    id[..15].iter().all(|b| *b == 0) && id[15] <= 1
}

/// Appends one plain frame. Lengths were checked by the planner (txn and producer ≤ u16::MAX).
pub fn write_frame(
    out: &mut Vec<u8>,
    id: &[u8; 16],
    trace: Option<&[u8; 16]>,
    txn: &str,
    producer: Option<&str>,
    payload: &[u8],
) {
    write_frame_ref(
        out,
        &FrameRef {
            id: *id,
            trace: trace.copied(),
            txn,
            producer,
            encrypted: false,
            payload,
        },
    );
}

/// Appends one frame as described, flag 4 included (the payload is then a sealed envelope).
pub fn write_frame_ref(out: &mut Vec<u8>, f: &FrameRef<'_>) {
    let FrameRef {
        id,
        trace,
        txn,
        producer,
        encrypted,
        payload,
    } = f;
    let mut flags = if *encrypted { FLAG_ENCRYPTED } else { 0 };
    let mut body = 1 + 16 + 2 + txn.len() + payload.len();
    if trace.is_some() {
        flags |= FLAG_TRACE;
        body += 16;
    }
    if let Some(p) = producer {
        flags |= FLAG_PRODUCER;
        body += 2 + p.len();
    }
    out.extend_from_slice(&(body as u32).to_le_bytes());
    out.push(flags);
    out.extend_from_slice(id);
    if let Some(t) = trace {
        out.extend_from_slice(t);
    }
    out.extend_from_slice(&(txn.len() as u16).to_le_bytes());
    out.extend_from_slice(txn.as_bytes());
    if let Some(p) = producer {
        out.extend_from_slice(&(p.len() as u16).to_le_bytes());
        out.extend_from_slice(p.as_bytes());
    }
    out.extend_from_slice(payload);
}

/// Skips `n` frames from the start of `buf`, returning the remaining slice.
pub fn skip_frames(buf: &[u8], n: u64) -> Result<&[u8], DecodeError> {
    let mut r = Reader::new(buf);
    for _ in 0..n {
        let len = r.u32()? as usize;
        r.take(len)?;
    }
    let at = r.pos();
    Ok(&buf[at..])
}

/// Reads one frame from the start of `buf`; returns it and the bytes it used.
pub fn read_frame(buf: &[u8]) -> Result<(FrameRef<'_>, usize), DecodeError> {
    let mut outer = Reader::new(buf);
    let len = outer.u32()? as usize;
    let body = outer.take(len)?;
    let mut r = Reader::new(body);
    let flags = r.u8()?;
    // An unknown flag is a format this build does not know: reading past it could serve
    // bytes as what they are not (an older build reading flag 4 served envelopes), so refuse.
    if flags & !(FLAG_TRACE | FLAG_PRODUCER | FLAG_ENCRYPTED) != 0 {
        return Err(DecodeError::Malformed {
            offset: 4,
            what: format!("frame flags {flags:#04x} hold a bit this build does not know"),
        });
    }
    let mut id = [0u8; 16];
    id.copy_from_slice(r.take(16)?);
    let trace = if flags & FLAG_TRACE != 0 {
        let mut t = [0u8; 16];
        t.copy_from_slice(r.take(16)?);
        Some(t)
    } else {
        None
    };
    let tl = r.u16()? as usize;
    let txn = std::str::from_utf8(r.take(tl)?).map_err(|_| r.malformed("txn not UTF-8".into()))?;
    let producer = if flags & FLAG_PRODUCER != 0 {
        let pl = r.u16()? as usize;
        Some(
            std::str::from_utf8(r.take(pl)?)
                .map_err(|_| r.malformed("producer not UTF-8".into()))?,
        )
    } else {
        None
    };
    let payload = r.take(r.remaining())?;
    Ok((
        FrameRef {
            id,
            trace,
            txn,
            producer,
            encrypted: flags & FLAG_ENCRYPTED != 0,
            payload,
        },
        4 + len,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_skip() {
        let mut buf = Vec::new();
        write_frame(&mut buf, &[1; 16], None, "tx1", None, b"{\"a\":1}");
        write_frame(
            &mut buf,
            &[2; 16],
            Some(&[9; 16]),
            "tx2",
            Some("alice"),
            b"[1,2]",
        );
        let (f, used) = read_frame(&buf).unwrap();
        assert_eq!((f.txn, f.payload), ("tx1", &b"{\"a\":1}"[..]));
        let rest = skip_frames(&buf, 1).unwrap();
        assert_eq!(rest.len(), buf.len() - used);
        let (g, _) = read_frame(rest).unwrap();
        assert_eq!(
            (g.txn, g.producer, g.trace),
            ("tx2", Some("alice"), Some([9; 16]))
        );
        assert!(skip_frames(&buf[..5], 1).is_err());
    }

    #[test]
    fn a_frame_with_an_unknown_flag_is_refused() {
        let mut buf = Vec::new();
        write_frame(&mut buf, &[1; 16], None, "tx1", None, b"1");
        assert!(read_frame(&buf).is_ok());
        for bit in [8u8, 0x80] {
            let mut bad = buf.clone();
            bad[4] |= bit;
            let e = read_frame(&bad).map(|_| ()).unwrap_err().to_string();
            assert!(e.contains("does not know"), "{e}");
        }
    }
}
