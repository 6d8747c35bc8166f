//! The QPF1 framed pop answer, read here from docs/binary-forms.md (not with the broker's
//! protocol crate). Every length is checked against what is left before it is used.
//!
//! `QPF1 | u8 version (1) | bytes32 own keys | text16 queue | text16 leaseId |
//! text16 consumerGroup | u32 claims`, per claim `u64 partitionId | text16 partition |
//! u64 start | u64 end | u32 deliveryAttempt | u32 records`, per record `u64 base_offset |
//! i64 created_at_us | u32 count | u8 codec | bytes32 frames`; a frame is
//! `u32 body_len | u8 flags | id[16] | [trace[16], flag 1] | text16 transactionId |
//! [text16 producer, flag 2] | payload`.

use anyhow::{anyhow, bail, Context};
use bytes::Bytes;

use super::wire::Popped;

const MAGIC: &[u8; 4] = b"QPF1";
const FLAG_TRACE: u8 = 1;
const FLAG_PRODUCER: u8 = 2;
const FLAG_ENCRYPTED: u8 = 4;
const CODEC_RAW: u8 = 0;
const CODEC_ZSTD: u8 = 1;
/// A zstd record may not claim to expand past this (the broker writes raw records today).
const MAX_RECORD: usize = 64 << 20;

/// Little-endian fields off a buffer; reading past the end is an error, never a panic.
struct In<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> In<'a> {
    fn new(data: &'a [u8]) -> Self {
        Self { data, at: 0 }
    }

    fn take(&mut self, n: usize, what: &str) -> anyhow::Result<&'a [u8]> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.data.len())
            .ok_or_else(|| anyhow!("framed pop answer: truncated at {what}"))?;
        let piece = &self.data[self.at..end];
        self.at = end;
        Ok(piece)
    }

    fn array<const N: usize>(&mut self, what: &str) -> anyhow::Result<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }

    fn u8(&mut self, what: &str) -> anyhow::Result<u8> {
        Ok(self.array::<1>(what)?[0])
    }

    fn u16(&mut self, what: &str) -> anyhow::Result<u16> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }

    fn u32(&mut self, what: &str) -> anyhow::Result<usize> {
        Ok(u32::from_le_bytes(self.array(what)?) as usize)
    }

    fn u64(&mut self, what: &str) -> anyhow::Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    fn text(&mut self, what: &str) -> anyhow::Result<&'a str> {
        let n = self.u16(what)? as usize;
        std::str::from_utf8(self.take(n, what)?)
            .with_context(|| format!("framed pop answer: {what} is not UTF-8"))
    }

    fn bytes32(&mut self, what: &str) -> anyhow::Result<&'a [u8]> {
        let n = self.u32(what)?;
        self.take(n, what)
    }

    fn rest(&mut self) -> &'a [u8] {
        let piece = &self.data[self.at..];
        self.at = self.data.len();
        piece
    }
}

/// The delivered messages of a framed answer, each with the claim's lease.
pub fn decode(body: &Bytes) -> anyhow::Result<Vec<Popped>> {
    let mut r = In::new(body);
    if r.take(4, "magic")? != MAGIC {
        bail!("framed pop answer: it does not start with QPF1");
    }
    let version = r.u8("version")?;
    if version != 1 {
        bail!("framed pop answer: unknown version {version}");
    }
    r.bytes32("own keys")?;
    r.text("queue")?;
    let lease = r.text("leaseId")?;
    let lease_id = (!lease.is_empty()).then(|| lease.to_string());
    r.text("consumerGroup")?;
    let claims = r.u32("claims")?;
    let mut out = Vec::new();
    for _ in 0..claims {
        let partition_id = r.u64("partitionId")?.to_string();
        let partition = r.text("partition")?;
        let start = r.u64("start")?;
        let end = r.u64("end")?;
        r.u32("deliveryAttempt")?;
        let records = r.u32("records")?;
        for _ in 0..records {
            let base = r.u64("base_offset")?;
            r.u64("created_at")?;
            let count = r.u32("count")?;
            let codec = r.u8("codec")?;
            let raw = r.bytes32("frames")?;
            let frames = match codec {
                CODEC_RAW => body.slice_ref(raw),
                CODEC_ZSTD => inflate(raw, MAX_RECORD)?,
                other => bail!("framed pop answer: unknown codec {other}"),
            };
            let mut f = In::new(&frames);
            for i in 0..count {
                let offset = base.saturating_add(i as u64);
                let frame = f.bytes32("a frame")?;
                if (start..=end).contains(&offset) {
                    let (transaction_id, payload) = read_frame(frame)?;
                    out.push(Popped {
                        transaction_id: transaction_id.to_string(),
                        partition_id: partition_id.clone(),
                        partition: partition.to_string(),
                        lease_id: lease_id.clone(),
                        payload: frames.slice_ref(payload),
                    });
                }
            }
            if f.at != frames.len() {
                bail!("framed pop answer: bytes after the {count} frames of a record");
            }
        }
    }
    if r.at != body.len() {
        bail!("framed pop answer: bytes after the last claim");
    }
    Ok(out)
}

/// A zstd record's frames. The buffer is sized from the size the zstd frame declares, which
/// must be present and at most `cap`: a fixed `cap`-sized buffer per record would set aside
/// 64 MiB for each one and keep it alive as long as any of its payloads.
pub(super) fn inflate(raw: &[u8], cap: usize) -> anyhow::Result<Bytes> {
    let declared = zstd::zstd_safe::get_frame_content_size(raw)
        .map_err(|_| anyhow!("framed pop answer: a zstd record is not a zstd frame"))?
        .ok_or_else(|| anyhow!("framed pop answer: a zstd record does not declare its size"))?;
    let size = usize::try_from(declared)
        .ok()
        .filter(|&n| n <= cap)
        .ok_or_else(|| {
            anyhow!("framed pop answer: a zstd record of {declared} bytes (cap {cap})")
        })?;
    let frames = zstd::bulk::decompress(raw, size).context("framed pop answer: zstd")?;
    if frames.len() != size {
        bail!(
            "framed pop answer: a zstd record declares {size} bytes and holds {}",
            frames.len()
        );
    }
    Ok(Bytes::from(frames))
}

/// A frame's transaction id and payload.
fn read_frame(frame: &[u8]) -> anyhow::Result<(&str, &[u8])> {
    let mut f = In::new(frame);
    let flags = f.u8("frame flags")?;
    if flags & FLAG_ENCRYPTED != 0 {
        bail!("framed pop answer: an encrypted frame");
    }
    f.take(16, "message id")?;
    if flags & FLAG_TRACE != 0 {
        f.take(16, "trace id")?;
    }
    let transaction_id = f.text("transactionId")?;
    if flags & FLAG_PRODUCER != 0 {
        f.text("producer")?;
    }
    Ok((transaction_id, f.rest()))
}
