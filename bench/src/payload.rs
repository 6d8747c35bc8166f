//! The message payload every driver carries:
//! `{"seq":n,"p":partition,"ts":micros,"pad":"<16 hex digits>xxx…"}`, padded with `x` so the
//! serialised JSON is exactly the requested size (when the requested size is at least the
//! length with no `x`; smaller sizes give that length).
//!
//! The pad starts with a digest of (`seq`, `p`, `ts`) under a key of this tool, so a consumer
//! that rebuilds a payload from the fields it reads back also checks those fields: a broker
//! that changed `p` or `ts` (same number of digits) no longer yields the same bytes.

use serde::Deserialize;

/// What a consumer reads back from a payload; `pad` is skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct PayloadFields {
    /// Run-unique message id (see `ledger`).
    pub seq: u64,
    /// Partition index the message was pushed to.
    pub p: u32,
    /// Microseconds since the Unix epoch at which the push was sent (open loop: scheduled).
    pub ts: u64,
}

/// Our payload fields, each optional so a foreign payload is reported, not fatal.
#[derive(Deserialize, Default)]
#[serde(default)]
struct LooseFields {
    seq: Option<u64>,
    p: Option<u32>,
    ts: Option<u64>,
}

/// Our fields of a payload, `None` when it is not one of ours.
pub fn payload_fields(payload: &[u8]) -> Option<PayloadFields> {
    let d: LooseFields = serde_json::from_slice(payload).ok()?;
    Some(PayloadFields {
        seq: d.seq?,
        p: d.p?,
        ts: d.ts?,
    })
}

/// Hex digits of the fields' digest at the head of the pad.
const DIGEST_CHARS: usize = 16;
/// FNV-1a 64 offset basis, mixed with a constant of this tool so the digest is ours.
const DIGEST_KEY: u64 = 0xcbf2_9ce4_8422_2325 ^ 0x5175_6565_6e42_656e;

/// FNV-1a 64 over the fields' little-endian bytes: not for secrecy, to catch any change.
fn digest(fields: PayloadFields) -> u64 {
    let mut hash = DIGEST_KEY;
    let bytes = (fields.seq.to_le_bytes().into_iter())
        .chain(fields.p.to_le_bytes())
        .chain(fields.ts.to_le_bytes());
    for byte in bytes {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// Builds padded payloads of one target size, reusing its buffer.
#[derive(Debug)]
pub struct PayloadBuilder {
    target_bytes: usize,
    buf: String,
}

impl PayloadBuilder {
    pub fn new(target_bytes: usize) -> Self {
        Self {
            target_bytes,
            buf: String::with_capacity(target_bytes.max(64)),
        }
    }

    /// Appends the payload JSON for `fields` to `out` and returns its length in bytes.
    pub fn write_to(&mut self, fields: PayloadFields, out: &mut String) -> usize {
        use std::fmt::Write;
        self.buf.clear();
        // Writing into a String cannot fail.
        let _ = write!(
            self.buf,
            r#"{{"seq":{},"p":{},"ts":{},"pad":"{:0w$x}"#,
            fields.seq,
            fields.p,
            fields.ts,
            digest(fields),
            w = DIGEST_CHARS
        );
        // The closing `"}` adds two bytes.
        let pad = self.target_bytes.saturating_sub(self.buf.len() + 2);
        let start = out.len();
        out.push_str(&self.buf);
        out.extend(std::iter::repeat_n('x', pad));
        out.push_str("\"}");
        out.len() - start
    }

    /// The payload JSON for `fields` as a new string.
    pub fn build(&mut self, fields: PayloadFields) -> String {
        let mut out = String::with_capacity(self.target_bytes.max(64));
        self.write_to(fields, &mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields() -> PayloadFields {
        PayloadFields {
            seq: 123_456,
            p: 42,
            ts: 1_767_225_600_000_000,
        }
    }

    #[test]
    fn payload_is_exactly_the_requested_size() {
        let mut builder = PayloadBuilder::new(256);
        for seq in [0u64, 9, 10, 99_999, u64::MAX] {
            let payload = builder.build(PayloadFields { seq, ..fields() });
            assert_eq!(payload.len(), 256, "{payload}");
        }
    }

    #[test]
    fn payload_round_trips_through_serde() -> anyhow::Result<()> {
        let mut builder = PayloadBuilder::new(1024);
        let payload = builder.build(fields());
        let back: PayloadFields = serde_json::from_str(&payload)?;
        assert_eq!(back, fields());
        let value: serde_json::Value = serde_json::from_str(&payload)?;
        let pad = value["pad"].as_str().unwrap_or_default();
        let (digest_hex, xs) = pad.split_at(DIGEST_CHARS);
        assert_eq!(u64::from_str_radix(digest_hex, 16)?, digest(fields()));
        assert!(xs.chars().all(|c| c == 'x'));
        Ok(())
    }

    #[test]
    fn too_small_a_target_gives_the_digest_alone() -> anyhow::Result<()> {
        let mut builder = PayloadBuilder::new(8);
        let payload = builder.build(fields());
        let tail = format!(r#""pad":"{:016x}"}}"#, digest(fields()));
        assert!(payload.ends_with(&tail), "{payload}");
        let back: PayloadFields = serde_json::from_str(&payload)?;
        assert_eq!(back, fields());
        Ok(())
    }

    #[test]
    fn write_to_appends_and_reports_length() {
        let mut builder = PayloadBuilder::new(100);
        let mut out = String::from("[");
        let n = builder.write_to(fields(), &mut out);
        assert_eq!(n, 100);
        assert_eq!(out.len(), 101);
        assert!(out.starts_with("[{\"seq\":123456,"));
    }

    #[test]
    fn every_field_changes_the_digest() {
        let base = digest(fields());
        for other in [
            PayloadFields {
                seq: 123_457,
                ..fields()
            },
            PayloadFields { p: 43, ..fields() },
            PayloadFields {
                ts: 9_767_225_600_000_000,
                ..fields()
            },
        ] {
            assert_ne!(digest(other), base, "{other:?}");
        }
    }
}
