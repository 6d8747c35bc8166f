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

/// What is still allowed while groups are read: items, and the bytes decoding allocates past
/// the body (decompressed groups, names copied into each item); both are the JSON body's caps,
/// so a binary body never decodes to more than a JSON one could hold.
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

    pub(crate) fn take_bytes(&mut self, n: usize, what: &str) -> Result<(), BinaryError> {
        match self.bytes.checked_sub(n) {
            Some(left) => {
                self.bytes = left;
                Ok(())
            }
            None => Err(BinaryError::TooLarge(format!(
                "{what} take more than the body limit"
            ))),
        }
    }
}

pub fn decode(body: &Bytes, limits: Limits) -> Result<PushBody, BinaryError> {
    let (flags, mut r) = head(body)?;
    let mut budget = Budget::new(limits);
    let mut items = Vec::new();
    if flags & FLAG_ZSTD != 0 {
        let raw_len = r.u32("raw_len")?;
        let z = r.rest();
        let size = zstd_capped::declared_size(z, budget.bytes, "the body")?;
        if u32::try_from(size).ok() != Some(raw_len) {
            return Err(BinaryError::malformed(format!(
                "the body decompresses to {size} bytes, raw_len says {raw_len}"
            )));
        }
        budget.bytes -= size;
        let mut dec = zstd_capped::decoder()?;
        let raw = Bytes::from(zstd_capped::inflate(&mut dec, z, size, "the body")?);
        let mut inner = Reader::new(&raw);
        plain_groups(
            &mut inner,
            &raw,
            flags & FLAG_TXN != 0,
            &mut budget,
            &mut items,
        )?;
        at_end(&inner)?;
        compact(&mut items, raw.len());
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

/// The magic and the flags, checked; the reader is left at the body.
pub(crate) fn head(body: &[u8]) -> Result<(u8, Reader<'_>), BinaryError> {
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
    Ok((flags, r))
}

pub(crate) fn at_end(r: &Reader<'_>) -> Result<(), BinaryError> {
    match r.remaining() {
        0 => Ok(()),
        n => Err(BinaryError::malformed(format!(
            "{n} bytes after the last group"
        ))),
    }
}

/// A group's queue, partition and message count, checked before anything is copied.
pub(crate) struct GroupHead<'a> {
    pub(crate) queue: &'a str,
    pub(crate) partition: &'a str,
    pub(crate) n: usize,
}

impl GroupHead<'_> {
    /// What its names weigh once copied into every one of its items.
    pub(crate) fn name_bytes(&self) -> usize {
        let partition = match self.partition {
            "" => DEFAULT_PARTITION.len(),
            p => p.len(),
        };
        self.n.saturating_mul(self.queue.len() + partition)
    }
}

/// Reads a group head: names held to the JSON limits, an empty group refused, the count taken
/// from the items left and the names' copies from the bytes left.
pub(crate) fn group_head<'a>(
    r: &mut Reader<'a>,
    budget: &mut Budget,
) -> Result<GroupHead<'a>, BinaryError> {
    let queue = r.text16("queue")?;
    check_name("queue", queue)?;
    let partition = r.text16("partition")?;
    check_name("partition", partition)?;
    let n = bounded(r.u32("item count")?, budget.items, "items in one push")?;
    if n == 0 {
        return Err(BinaryError::malformed("a group with no messages"));
    }
    budget.items -= n;
    let g = GroupHead {
        queue,
        partition,
        n,
    };
    budget.take_bytes(g.name_bytes(), "names copied into every message")?;
    Ok(g)
}

fn check_name(field: &str, value: &str) -> Result<(), BinaryError> {
    crate::limits::check_name(field, value).map_err(|e| BinaryError::malformed(e.message))
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

/// Payloads sliced out of a decompressed buffer keep all of it alive while they are queued.
/// When they hold less than half of it (frame heads, ids, names around small payloads), they
/// are copied into one buffer of their own size and the decompressed one is let go.
fn compact(items: &mut [PushItem], held: usize) {
    let total: usize = items.iter().map(|i| i.payload.len()).sum();
    if total.saturating_mul(2) >= held {
        return;
    }
    let mut buf = Vec::with_capacity(total);
    for i in items.iter() {
        buf.extend_from_slice(&i.payload);
    }
    let buf = Bytes::from(buf);
    let mut at = 0;
    for i in items.iter_mut() {
        let len = i.payload.len();
        i.payload = buf.slice(at..at + len);
        at += len;
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
        let g = group_head(r, budget)?;
        if g.n > r.remaining() / 4 {
            return Err(BinaryError::malformed(format!(
                "{} items cannot fit in the body",
                g.n
            )));
        }
        let (queue, partition) = (g.queue.to_string(), partition_name(g.partition));
        items.reserve(g.n);
        for _ in 0..g.n {
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
    let mut dec = None;
    for _ in 0..groups {
        let g = group_head(r, budget)?;
        let z = r.bytes32("compressed group")?;
        let size = zstd_capped::declared_size(z, budget.bytes, "a group")?;
        budget.bytes -= size;
        let dec = match &mut dec {
            Some(d) => d,
            None => dec.insert(zstd_capped::decoder()?),
        };
        let raw = Bytes::from(zstd_capped::inflate(dec, z, size, "a group")?);
        let frames = decode_frames(&raw, g.n)?;
        let (queue, partition) = (g.queue.to_string(), partition_name(g.partition));
        let first = items.len();
        items.reserve(g.n);
        for f in frames {
            // The client writes neither (the broker stamps the producer); refused, they could
            // only make the decompressed group, which the payloads keep alive, larger.
            if f.encrypted || f.trace_id.is_some() || f.producer.is_some() {
                return Err(BinaryError::malformed(
                    "a frame with flags other than 0 (trace id, producer or encryption)",
                ));
            }
            items.push(PushItem {
                queue: queue.clone(),
                partition: partition.clone(),
                payload: payload(&raw, f.payload),
                transaction_id: Some(f.transaction_id)
                    .filter(|t| !t.is_empty())
                    .map(str::to_string),
                trace_id: None,
            });
        }
        compact(&mut items[first..], raw.len());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binary::frames::{write_frame, Frame};
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
        body.extend_from_slice(&zstd::bulk::compress(inner, 1).unwrap_or_default());
        let a = decode(&Bytes::from(plain.clone()), LIMITS).map(|b| b.items.len());
        let b = decode(&Bytes::from(body), LIMITS).map(|b| b.items.len());
        assert_eq!(a, Ok(3));
        assert_eq!(a, b);
    }

    fn text16(out: &mut Vec<u8>, s: &[u8]) {
        out.extend_from_slice(&(s.len() as u16).to_le_bytes());
        out.extend_from_slice(s);
    }

    /// A flag-8 body of one group `q`/`p` holding `frames` (already framed) as `z`.
    fn one_group(queue: &[u8], n: u32, z: &[u8]) -> Vec<u8> {
        let mut body = b"QPB1\x08\x01\x00\x00\x00".to_vec();
        text16(&mut body, queue);
        text16(&mut body, b"p");
        body.extend_from_slice(&n.to_le_bytes());
        body.extend_from_slice(&(z.len() as u32).to_le_bytes());
        body.extend_from_slice(z);
        body
    }

    fn frames(n: usize, f: &Frame<'_>) -> Vec<u8> {
        let mut out = Vec::new();
        for _ in 0..n {
            assert!(write_frame(&mut out, f).is_some());
        }
        out
    }

    fn plain_frame() -> Frame<'static> {
        Frame {
            id: [1; 16],
            trace_id: None,
            transaction_id: "",
            producer: None,
            encrypted: false,
            payload: b"1",
        }
    }

    #[test]
    fn a_long_name_is_refused_before_it_is_copied_into_every_item() {
        // 10,000 empty items under a 60 KiB queue name: ~600 MB of copies, from ~100 KB.
        let name = vec![b'q'; 60_000];
        let mut body = b"QPB1\x00\x01\x00\x00\x00".to_vec();
        text16(&mut body, &name);
        text16(&mut body, b"");
        body.extend_from_slice(&10_000u32.to_le_bytes());
        body.extend(std::iter::repeat_n(0u8, 4 * 10_000));
        let many = Limits {
            max_bytes: 1 << 20,
            max_items: 10_000,
        };
        assert!(matches!(
            decode(&Bytes::from(body), many),
            Err(BinaryError::Malformed(m)) if m.contains("512")
        ));
    }

    #[test]
    fn names_copied_into_every_item_count_against_the_body_limit() {
        // 1,000 items under a 500-byte name: 500 KB of copies from a ~4.5 KB body.
        let name = vec![b'q'; 500];
        let mut body = b"QPB1\x00\x01\x00\x00\x00".to_vec();
        text16(&mut body, &name);
        text16(&mut body, b"p");
        body.extend_from_slice(&1000u32.to_le_bytes());
        body.extend(std::iter::repeat_n(0u8, 4 * 1000));
        let small = Limits {
            max_bytes: 100_000,
            max_items: 1000,
        };
        assert!(matches!(
            decode(&Bytes::from(body.clone()), small),
            Err(BinaryError::TooLarge(_))
        ));
        assert!(decode(&Bytes::from(body), LIMITS).is_ok());
    }

    #[test]
    fn a_group_with_no_messages_is_refused() {
        let z = zstd::bulk::compress(b"", 1).unwrap_or_default();
        assert!(decode(&Bytes::from(one_group(b"q", 0, &z)), LIMITS).is_err());
        let mut plain = b"QPB1\x00\x01\x00\x00\x00".to_vec();
        text16(&mut plain, b"q");
        text16(&mut plain, b"");
        plain.extend_from_slice(&0u32.to_le_bytes());
        assert!(decode(&Bytes::from(plain), LIMITS).is_err());
    }

    #[test]
    fn frames_with_a_trace_id_or_a_producer_are_refused() {
        let traced = Frame {
            trace_id: Some([2; 16]),
            ..plain_frame()
        };
        let produced = Frame {
            producer: Some("p"),
            ..plain_frame()
        };
        for f in [traced, produced] {
            let z = zstd::bulk::compress(&frames(1, &f), 1).unwrap_or_default();
            assert!(decode(&Bytes::from(one_group(b"q", 1, &z)), LIMITS).is_err());
        }
        let z = zstd::bulk::compress(&frames(1, &plain_frame()), 1).unwrap_or_default();
        assert!(decode(&Bytes::from(one_group(b"q", 1, &z)), LIMITS).is_ok());
    }

    #[test]
    fn bytes_after_a_groups_frame_are_refused() {
        let one = frames(1, &plain_frame());
        let mut z = zstd::bulk::compress(&one, 1).unwrap_or_default();
        z.extend_from_slice(&zstd::bulk::compress(&one, 1).unwrap_or_default());
        assert!(decode(&Bytes::from(one_group(b"q", 1, &z)), LIMITS).is_err());
        let mut z = zstd::bulk::compress(&one, 1).unwrap_or_default();
        z.push(0);
        assert!(decode(&Bytes::from(one_group(b"q", 1, &z)), LIMITS).is_err());
    }

    #[test]
    fn small_payloads_do_not_keep_their_decompressed_group_alive() {
        let txn = "t".repeat(400);
        let f = Frame {
            transaction_id: &txn,
            ..plain_frame()
        };
        let z = zstd::bulk::compress(&frames(100, &f), 1).unwrap_or_default();
        let body = decode(&Bytes::from(one_group(b"q", 100, &z)), LIMITS).expect("decodes");
        // The 100 one-byte payloads sit side by side in a buffer of their own.
        let first = body.items[0].payload.as_ptr() as usize;
        let last = body.items[99].payload.as_ptr() as usize;
        assert_eq!(last - first, 99);
    }
}
