//! The QPB1 push body: `"QPB1" | u8 flags | body`, or `... | u32 raw_len | zstd(body)` with
//! flag 1. Flag 2 asks for the counts answer, flag 4 puts a transaction id before each payload,
//! flag 8 makes each group one zstd frame of stored frames (see [`super::frames`]).

use bytes::Bytes;

use super::frames::decode_frames;
use super::reader::{bounded, Reader};
use super::{zstd_capped, BinaryError, Limits};
use crate::{PushItem, DEFAULT_PARTITION};

pub const MAGIC: &[u8; 4] = b"QPB1";
pub const FLAG_ZSTD: u8 = 1;
pub const FLAG_COUNTS: u8 = 2;
pub const FLAG_TXN: u8 = 4;
pub const FLAG_FRAMES: u8 = 8;
const KNOWN_FLAGS: u8 = FLAG_ZSTD | FLAG_COUNTS | FLAG_TXN | FLAG_FRAMES;

/// A decoded push body: the items the JSON body would have given, in wire order.
#[derive(Debug, Clone)]
pub struct PushBody {
    /// The client asked for `{count, queued, duplicate, error}` instead of one result per item.
    pub counts: bool,
    pub items: Vec<PushItem>,
}

/// What is still allowed while groups are read: items and decompressed bytes.
pub(crate) struct Budget {
    pub(crate) items: usize,
    pub(crate) bytes: usize,
}

impl Budget {
    pub(crate) fn new(l: Limits) -> Self {
        Budget {
            items: l.max_items,
            bytes: l.max_bytes,
        }
    }
}

pub fn decode(body: &Bytes, limits: Limits) -> Result<PushBody, BinaryError> {
    let mut r = Reader::new(body);
    if r.take(4, "magic")? != MAGIC {
        return Err(BinaryError::malformed("the body does not start with QPB1"));
    }
    let flags = r.u8("flags")?;
    if flags & !KNOWN_FLAGS != 0 {
        return Err(BinaryError::malformed(format!("unknown flags {flags:#x}")));
    }
    if flags & FLAG_ZSTD != 0 && flags & FLAG_FRAMES != 0 {
        return Err(BinaryError::malformed(
            "flags 1 (zstd body) and 8 (frames) together",
        ));
    }
    let mut budget = Budget::new(limits);
    let mut items = Vec::new();
    if flags & FLAG_ZSTD != 0 {
        let raw_len = r.u32("raw_len")?;
        let cap = bounded(raw_len, limits.max_bytes, "bytes of decompressed body")?;
        let raw = Bytes::from(zstd_capped::decompress(r.rest(), cap, "the body")?);
        if raw.len() != cap {
            return Err(BinaryError::malformed(format!(
                "the body decompresses to {} bytes, raw_len says {raw_len}",
                raw.len()
            )));
        }
        let mut inner = Reader::new(&raw);
        plain_groups(
            &mut inner,
            &raw,
            flags & FLAG_TXN != 0,
            &mut budget,
            &mut items,
        )?;
        at_end(&inner)?;
    } else if flags & FLAG_FRAMES != 0 {
        frame_groups(&mut r, &mut budget, &mut items)?;
        at_end(&r)?;
    } else {
        plain_groups(&mut r, body, flags & FLAG_TXN != 0, &mut budget, &mut items)?;
        at_end(&r)?;
    }
    Ok(PushBody {
        counts: flags & FLAG_COUNTS != 0,
        items,
    })
}

pub(crate) fn at_end(r: &Reader<'_>) -> Result<(), BinaryError> {
    match r.remaining() {
        0 => Ok(()),
        n => Err(BinaryError::malformed(format!(
            "{n} bytes after the last group"
        ))),
    }
}

fn partition_name(p: &str) -> String {
    match p {
        "" => DEFAULT_PARTITION.to_string(),
        p => p.to_string(),
    }
}

/// A payload as stored: an empty one is JSON null, as the framed pop reads it.
fn payload(base: &Bytes, p: &[u8]) -> Bytes {
    match p {
        [] => Bytes::from_static(b"null"),
        p => base.slice_ref(p),
    }
}

/// `u32 groups`, each `u16 queue | u16 partition | u32 n | n x ([u16 txn] | u32 len + payload)`.
fn plain_groups(
    r: &mut Reader<'_>,
    base: &Bytes,
    with_txn: bool,
    budget: &mut Budget,
    items: &mut Vec<PushItem>,
) -> Result<(), BinaryError> {
    // Each group takes at least 8 bytes, each item at least 4: counts past that cannot be real.
    let groups = r.u32("group count")?;
    if groups as usize > r.remaining() / 8 {
        return Err(BinaryError::malformed(format!(
            "{groups} groups cannot fit in the body"
        )));
    }
    for _ in 0..groups {
        let queue = r.text16("queue")?.to_string();
        let partition = partition_name(r.text16("partition")?);
        let n = bounded(r.u32("item count")?, budget.items, "items in one push")?;
        budget.items -= n;
        if n > r.remaining() / 4 {
            return Err(BinaryError::malformed(format!(
                "{n} items cannot fit in the body"
            )));
        }
        items.reserve(n);
        for _ in 0..n {
            let transaction_id = match with_txn {
                true => Some(r.text16("transactionId")?).filter(|t| !t.is_empty()),
                false => None,
            };
            let p = r.bytes32("payload")?;
            items.push(PushItem {
                queue: queue.clone(),
                partition: partition.clone(),
                payload: payload(base, p),
                transaction_id: transaction_id.map(str::to_string),
                trace_id: None,
            });
        }
    }
    Ok(())
}

/// `u32 groups`, each `u16 queue | u16 partition | u32 n | u32 z_len | zstd(n frames)`.
pub(crate) fn frame_groups(
    r: &mut Reader<'_>,
    budget: &mut Budget,
    items: &mut Vec<PushItem>,
) -> Result<(), BinaryError> {
    let groups = r.u32("group count")?;
    if groups as usize > r.remaining() / 12 {
        return Err(BinaryError::malformed(format!(
            "{groups} groups cannot fit in the body"
        )));
    }
    for _ in 0..groups {
        let queue = r.text16("queue")?.to_string();
        let partition = partition_name(r.text16("partition")?);
        let n = bounded(r.u32("frame count")?, budget.items, "items in one push")?;
        budget.items -= n;
        let z = r.bytes32("compressed group")?;
        let raw = Bytes::from(zstd_capped::decompress(z, budget.bytes, "a group")?);
        budget.bytes -= raw.len();
        let frames = decode_frames(&raw, n)?;
        items.reserve(n);
        for f in frames {
            if f.encrypted {
                return Err(BinaryError::malformed("an encrypted frame"));
            }
            items.push(PushItem {
                queue: queue.clone(),
                partition: partition.clone(),
                payload: payload(&raw, f.payload),
                transaction_id: Some(f.transaction_id)
                    .filter(|t| !t.is_empty())
                    .map(str::to_string),
                trace_id: f.trace_id,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binary::fuzzing::{framed_push, plain_push};

    const LIMITS: Limits = Limits {
        max_bytes: 1 << 20,
        max_items: 1000,
    };

    #[test]
    fn the_spec_example_decodes() {
        let hex = "51504231040100000006006f726465727301007002000000030074783107000000\
                   7b2261223a317d0300747832050000005b312c325d";
        let hex: String = hex.split_whitespace().collect();
        let bytes: Vec<u8> = (0..hex.len())
            .step_by(2)
            .filter_map(|i| u8::from_str_radix(&hex[i..i + 2], 16).ok())
            .collect();
        let body = decode(&Bytes::from(bytes), LIMITS);
        let body = body.as_ref().map_err(|e| e.to_string());
        let items = &body.as_ref().map(|b| &b.items);
        let Ok(items) = items else { panic!("{body:?}") };
        assert_eq!(items.len(), 2);
        assert_eq!(items[0].queue, "orders");
        assert_eq!(items[0].partition, "p");
        assert_eq!(items[0].transaction_id.as_deref(), Some("tx1"));
        assert_eq!(&items[0].payload[..], b"{\"a\":1}");
        assert_eq!(&items[1].payload[..], b"[1,2]");
    }

    #[test]
    fn plain_and_framed_bodies_decode_and_every_truncation_fails() {
        for (body, with_txn) in [
            (plain_push(true), true),
            (plain_push(false), false),
            (framed_push(), true),
        ] {
            let decoded = decode(&Bytes::from(body.clone()), LIMITS);
            let Ok(decoded) = decoded else {
                panic!("{decoded:?}")
            };
            assert_eq!(decoded.items.len(), 3);
            assert_eq!(decoded.items[2].queue, "q2");
            assert_eq!(decoded.items[2].partition, DEFAULT_PARTITION);
            assert_eq!(&decoded.items[1].payload[..], b"null");
            assert_eq!(decoded.items[0].transaction_id.is_some(), with_txn);
            for cut in 0..body.len() {
                assert!(
                    decode(&Bytes::copy_from_slice(&body[..cut]), LIMITS).is_err(),
                    "cut at {cut}"
                );
            }
            let mut longer = body.clone();
            longer.push(0);
            assert!(decode(&Bytes::from(longer), LIMITS).is_err());
        }
    }

    #[test]
    fn counts_and_sizes_over_their_caps_are_refused() {
        let small = Limits {
            max_bytes: 1 << 20,
            max_items: 2,
        };
        for body in [plain_push(true), framed_push()] {
            assert!(matches!(
                decode(&Bytes::from(body), small),
                Err(BinaryError::TooLarge(_))
            ));
        }
        let tiny = Limits {
            max_bytes: 20,
            max_items: 1000,
        };
        assert!(matches!(
            decode(&Bytes::from(framed_push()), tiny),
            Err(BinaryError::TooLarge(_))
        ));
        // A huge group count in a short body.
        let mut body = b"QPB1\x04".to_vec();
        body.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode(&Bytes::from(body), LIMITS).is_err());
        // A huge item count.
        let mut body = b"QPB1\x04\x01\x00\x00\x00\x01\x00q\x00\x00".to_vec();
        body.extend_from_slice(&500u32.to_le_bytes());
        assert!(decode(&Bytes::from(body), LIMITS).is_err());
    }

    #[test]
    fn a_zstd_body_decodes_as_its_plain_twin() {
        let plain = plain_push(true);
        let inner = &plain[5..];
        let mut body = b"QPB1".to_vec();
        body.push(FLAG_TXN | FLAG_ZSTD);
        body.extend_from_slice(&(inner.len() as u32).to_le_bytes());
        body.extend_from_slice(&zstd::encode_all(inner, 1).unwrap_or_default());
        let a = decode(&Bytes::from(plain.clone()), LIMITS).map(|b| b.items.len());
        let b = decode(&Bytes::from(body), LIMITS).map(|b| b.items.len());
        assert_eq!(a, Ok(3));
        assert_eq!(a, b);
    }
}
