//! The QPB1 push body and the QTB1 transaction body, written here from docs/binary-forms.md
//! (not with the broker's protocol crate, so an encoding both sides got wrong the same way
//! cannot pass). All integers little-endian.
//!
//! A batch is split into one group per partition, in the order partitions first appear, each
//! group keeping its messages' order (the order a partition stores them in). The broker
//! answers in wire order; `Encoded::order` maps each wire position back to the batch index.

use anyhow::Context;

use crate::driver::OutMessage;

const PUSH_MAGIC: &[u8; 4] = b"QPB1";
const TXN_MAGIC: &[u8; 4] = b"QTB1";
/// Every item carries its transaction id.
const FLAG_TXN: u8 = 4;
/// Each group is one zstd frame of stored frames.
const FLAG_FRAMES: u8 = 8;
/// zstd level of the official client (`level=1`): cheap to make, and the frames are small.
const ZSTD_LEVEL: i32 = 1;
/// A transaction with no operations but its pushes.
const EMPTY_TXN_HEAD: &[u8] = br#"{"operations":[]}"#;

/// A body and, per wire position, the index of its message in the batch.
#[derive(Debug)]
pub struct Encoded {
    pub body: Vec<u8>,
    pub order: Vec<usize>,
}

/// Reusable buffers and the zstd context of one worker.
pub struct Encoder {
    zstd: zstd::bulk::Compressor<'static>,
    frames: Vec<u8>,
    /// Milliseconds of the ids' time prefix, read once per body.
    id_ms: u64,
}

/// Messages of one partition, as indexes into the batch.
struct Group {
    partition: u32,
    members: Vec<usize>,
}

fn groups(batch: &[OutMessage]) -> Vec<Group> {
    let mut out: Vec<Group> = Vec::new();
    for (i, m) in batch.iter().enumerate() {
        match out.iter_mut().find(|g| g.partition == m.partition) {
            Some(g) => g.members.push(i),
            None => out.push(Group {
                partition: m.partition,
                members: vec![i],
            }),
        }
    }
    out
}

/// The head of a group: queue, partition (named `p<n>` as in the JSON body), message count.
fn group_head(out: &mut Vec<u8>, queue: &str, g: &Group) -> anyhow::Result<()> {
    text16(out, queue, "queue name")?;
    text16(out, &format!("p{}", g.partition), "partition name")?;
    out.extend_from_slice(&u32_of(g.members.len(), "messages in a group")?);
    Ok(())
}

fn u32_of(n: usize, what: &str) -> anyhow::Result<[u8; 4]> {
    Ok(u32::try_from(n)
        .with_context(|| format!("{what} ({n}) does not fit a u32"))?
        .to_le_bytes())
}

fn text16(out: &mut Vec<u8>, text: &str, what: &str) -> anyhow::Result<()> {
    let len =
        u16::try_from(text.len()).with_context(|| format!("{what} longer than 65535 bytes"))?;
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(text.as_bytes());
    Ok(())
}

fn bytes32(out: &mut Vec<u8>, bytes: &[u8], what: &str) -> anyhow::Result<()> {
    out.extend_from_slice(&u32_of(bytes.len(), what)?);
    out.extend_from_slice(bytes);
    Ok(())
}

impl Encoder {
    pub fn new() -> anyhow::Result<Self> {
        Ok(Self {
            zstd: zstd::bulk::Compressor::new(ZSTD_LEVEL).context("zstd compressor")?,
            frames: Vec::new(),
            id_ms: 0,
        })
    }

    /// QPB1 flag 4: `u32 groups`, per group `text16 queue | text16 partition | u32 n`, then per
    /// item `text16 transactionId | bytes32 payload`.
    pub fn push_plain(
        &mut self,
        queue: &str,
        run_tag: &str,
        batch: &[OutMessage],
    ) -> anyhow::Result<Encoded> {
        let groups = groups(batch);
        let size: usize = batch.iter().map(|m| m.payload.len() + 40).sum();
        let mut body = Vec::with_capacity(16 + size + groups.len() * (queue.len() + 16));
        body.extend_from_slice(PUSH_MAGIC);
        body.push(FLAG_TXN);
        body.extend_from_slice(&u32_of(groups.len(), "groups")?);
        let mut order = Vec::with_capacity(batch.len());
        for g in &groups {
            group_head(&mut body, queue, g)?;
            for &i in &g.members {
                let m = &batch[i];
                let txn = txn_id(run_tag, m.id);
                text16(&mut body, &txn, "transaction id")?;
                bytes32(&mut body, m.payload.as_bytes(), "payload")?;
                order.push(i);
            }
        }
        Ok(Encoded { body, order })
    }

    /// QPB1 flag 8: each group `... | u32 n | bytes32 z`, z one zstd frame (with its content
    /// size) of n stored frames.
    pub fn push_frames(
        &mut self,
        queue: &str,
        run_tag: &str,
        batch: &[OutMessage],
    ) -> anyhow::Result<Encoded> {
        let mut head = PUSH_MAGIC.to_vec();
        head.push(FLAG_FRAMES);
        self.framed(head, queue, run_tag, batch)
    }

    /// QTB1: `u8 flags (0) | bytes32 head | u32 groups | groups` as in QPB1 flag 8; the head
    /// holds no operations, so the pushes are the whole transaction.
    pub fn transaction(
        &mut self,
        queue: &str,
        run_tag: &str,
        batch: &[OutMessage],
    ) -> anyhow::Result<Encoded> {
        let mut head = TXN_MAGIC.to_vec();
        head.push(0);
        bytes32(&mut head, EMPTY_TXN_HEAD, "head")?;
        self.framed(head, queue, run_tag, batch)
    }

    /// `head`, then the batch as frame groups.
    fn framed(
        &mut self,
        mut body: Vec<u8>,
        queue: &str,
        run_tag: &str,
        batch: &[OutMessage],
    ) -> anyhow::Result<Encoded> {
        body.reserve(64 + batch.len() * 64);
        let order = self.frame_groups(&mut body, queue, run_tag, batch)?;
        Ok(Encoded { body, order })
    }

    fn frame_groups(
        &mut self,
        body: &mut Vec<u8>,
        queue: &str,
        run_tag: &str,
        batch: &[OutMessage],
    ) -> anyhow::Result<Vec<usize>> {
        let groups = groups(batch);
        body.extend_from_slice(&u32_of(groups.len(), "groups")?);
        self.id_ms = now_ms();
        let mut order = Vec::with_capacity(batch.len());
        for g in &groups {
            group_head(body, queue, g)?;
            let mut frames = std::mem::take(&mut self.frames);
            frames.clear();
            for &i in &g.members {
                let m = &batch[i];
                write_frame(&mut frames, self.id_ms, m.id, &txn_id(run_tag, m.id), m)?;
                order.push(i);
            }
            let z = self.zstd.compress(&frames).context("zstd compress")?;
            self.frames = frames;
            bytes32(body, &z, "compressed group")?;
        }
        Ok(order)
    }
}

/// The transaction id every form gives a message (never a dedup hit within a run).
pub fn txn_id(run_tag: &str, id: u64) -> String {
    format!("{run_tag}-{id}")
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A version-7 UUID: the time in milliseconds, then the message's run-unique id where the
/// random bits go (unique without a random number per message). The builder keeps only the
/// low nibble of `tail[0]` and the low 6 bits of `tail[2]` (version and variant go there), so
/// the id goes in the bytes it keeps whole: its low 7 bytes in `tail[3..10]`, its top byte
/// in `tail[1]`.
fn message_id(ms: u64, id: u64) -> [u8; 16] {
    let bytes = id.to_le_bytes();
    let mut tail = [0u8; 10];
    tail[1] = bytes[7];
    tail[3..].copy_from_slice(&bytes[..7]);
    uuid::Builder::from_unix_timestamp_millis(ms, &tail)
        .into_uuid()
        .into_bytes()
}

/// `u32 body_len | u8 flags (0) | id[16] | text16 transactionId | payload`.
fn write_frame(
    out: &mut Vec<u8>,
    ms: u64,
    id: u64,
    txn: &str,
    m: &OutMessage,
) -> anyhow::Result<()> {
    let len = 1 + 16 + 2 + txn.len() + m.payload.len();
    out.extend_from_slice(&u32_of(len, "frame")?);
    out.push(0);
    out.extend_from_slice(&message_id(ms, id));
    text16(out, txn, "transaction id")?;
    out.extend_from_slice(m.payload.as_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_ids_are_version_7_and_distinct() {
        let a = uuid::Uuid::from_bytes(message_id(1_700_000_000_000, 1));
        let b = uuid::Uuid::from_bytes(message_id(1_700_000_000_000, 2));
        assert_eq!(a.get_version_num(), 7);
        assert_eq!(a.get_variant(), uuid::Variant::RFC4122);
        assert_ne!(a, b);
    }

    #[test]
    fn message_ids_of_one_millisecond_never_collide() {
        let ms = 1_700_000_000_000;
        for stride in [1u64, 4, 17, 64] {
            let ids: std::collections::HashSet<[u8; 16]> =
                (0..10_000u64).map(|k| message_id(ms, k * stride)).collect();
            assert_eq!(ids.len(), 10_000, "stride {stride}");
        }
        // The top byte of the id survives too.
        assert_ne!(message_id(ms, 0), message_id(ms, 1 << 56));
        assert_ne!(message_id(ms, 0), message_id(ms, 1 << 63));
    }
}
