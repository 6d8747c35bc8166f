//! Stored message frames, as the client frames them in a QPB1 flag-8 group and as a QPF1 record
//! carries them:
//! `u32 body_len | u8 flags | id[16] | [trace[16], flag 1] | u16 len + transactionId |
//! [u16 len + producer, flag 2] | payload (the rest of the body)`.

use super::reader::Reader;
use super::BinaryError;

pub const FLAG_TRACE: u8 = 1;
pub const FLAG_PRODUCER: u8 = 2;
pub const FLAG_ENCRYPTED: u8 = 4;
const KNOWN_FLAGS: u8 = FLAG_TRACE | FLAG_PRODUCER | FLAG_ENCRYPTED;

/// One frame, borrowing its text and payload from the bytes it was read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame<'a> {
    pub id: [u8; 16],
    pub trace_id: Option<[u8; 16]>,
    pub transaction_id: &'a str,
    pub producer: Option<&'a str>,
    pub encrypted: bool,
    pub payload: &'a [u8],
}

fn id16(b: &[u8]) -> [u8; 16] {
    let mut id = [0u8; 16];
    id.copy_from_slice(b);
    id
}

/// Exactly `count` frames filling all of `data`; `count` has been bounded by the caller.
pub fn decode_frames(data: &[u8], count: usize) -> Result<Vec<Frame<'_>>, BinaryError> {
    // Each frame takes at least its 4-byte length and 19 bytes of body.
    const MIN_FRAME: usize = 4 + 1 + 16 + 2;
    if count > data.len() / MIN_FRAME {
        return Err(BinaryError::malformed(format!(
            "{count} frames cannot fit in {} bytes",
            data.len()
        )));
    }
    let mut r = Reader::new(data);
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let body = r.bytes32("a frame")?;
        out.push(decode_body(body)?);
    }
    if r.remaining() != 0 {
        return Err(BinaryError::malformed(format!(
            "{} bytes after the last of {count} frames",
            r.remaining()
        )));
    }
    Ok(out)
}

fn decode_body(body: &[u8]) -> Result<Frame<'_>, BinaryError> {
    let mut f = Reader::new(body);
    let flags = f.u8("frame flags")?;
    if flags & !KNOWN_FLAGS != 0 {
        return Err(BinaryError::malformed(format!(
            "unknown frame flags {flags:#x}"
        )));
    }
    let id = id16(f.take(16, "message id")?);
    let trace_id = match flags & FLAG_TRACE {
        0 => None,
        _ => Some(id16(f.take(16, "trace id")?)),
    };
    let transaction_id = f.text16("transactionId")?;
    let producer = match flags & FLAG_PRODUCER {
        0 => None,
        _ => Some(f.text16("producer")?),
    };
    Ok(Frame {
        id,
        trace_id,
        transaction_id,
        producer,
        encrypted: flags & FLAG_ENCRYPTED != 0,
        payload: f.rest(),
    })
}

/// Appends one frame; `None` when a text does not fit its 16-bit length or the body its 32-bit one.
pub fn write_frame(out: &mut Vec<u8>, f: &Frame<'_>) -> Option<()> {
    let txn = u16::try_from(f.transaction_id.len()).ok()?;
    let producer = match f.producer {
        Some(p) => Some(u16::try_from(p.len()).ok()?),
        None => None,
    };
    let len = 1
        + 16
        + f.trace_id.map_or(0, |_| 16)
        + 2
        + f.transaction_id.len()
        + f.producer.map_or(0, |p| 2 + p.len())
        + f.payload.len();
    out.extend_from_slice(&u32::try_from(len).ok()?.to_le_bytes());
    let flags = f.trace_id.map_or(0, |_| FLAG_TRACE)
        | producer.map_or(0, |_| FLAG_PRODUCER)
        | if f.encrypted { FLAG_ENCRYPTED } else { 0 };
    out.push(flags);
    out.extend_from_slice(&f.id);
    if let Some(t) = &f.trace_id {
        out.extend_from_slice(t);
    }
    out.extend_from_slice(&txn.to_le_bytes());
    out.extend_from_slice(f.transaction_id.as_bytes());
    if let (Some(p), Some(n)) = (f.producer, producer) {
        out.extend_from_slice(&n.to_le_bytes());
        out.extend_from_slice(p.as_bytes());
    }
    out.extend_from_slice(f.payload);
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<Frame<'static>> {
        vec![
            Frame {
                id: [1; 16],
                trace_id: None,
                transaction_id: "tx1",
                producer: None,
                encrypted: false,
                payload: b"{\"a\":1}",
            },
            Frame {
                id: [2; 16],
                trace_id: Some([3; 16]),
                transaction_id: "",
                producer: Some("alice"),
                encrypted: false,
                payload: b"",
            },
        ]
    }

    #[test]
    fn frames_round_trip_and_every_truncation_fails() {
        let mut bytes = Vec::new();
        for f in &sample() {
            assert!(write_frame(&mut bytes, f).is_some());
        }
        assert_eq!(decode_frames(&bytes, 2), Ok(sample()));
        for cut in 0..bytes.len() {
            assert!(decode_frames(&bytes[..cut], 2).is_err(), "cut at {cut}");
        }
        assert!(decode_frames(&bytes, 1).is_err(), "a frame left over");
        assert!(decode_frames(&bytes, 3).is_err(), "a frame missing");
    }

    #[test]
    fn oversized_count_and_unknown_flags_are_refused() {
        assert!(decode_frames(&[0; 40], 1_000_000).is_err());
        let mut bytes = Vec::new();
        assert!(write_frame(&mut bytes, &sample()[0]).is_some());
        bytes[4] = 0x80;
        assert!(decode_frames(&bytes, 1).is_err());
    }
}
