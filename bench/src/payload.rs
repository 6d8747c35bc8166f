//! The message payload every driver carries: `{"seq":n,"p":partition,"ts":micros,"pad":"xxx…"}`,
//! padded with `x` so the serialised JSON is exactly the requested size (when the requested
//! size is at least the unpadded length; smaller sizes give the unpadded payload).

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
            r#"{{"seq":{},"p":{},"ts":{},"pad":""#,
            fields.seq, fields.p, fields.ts
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
        assert!(pad.chars().all(|c| c == 'x'));
        Ok(())
    }

    #[test]
    fn too_small_a_target_gives_the_unpadded_payload() -> anyhow::Result<()> {
        let mut builder = PayloadBuilder::new(8);
        let payload = builder.build(fields());
        assert!(payload.ends_with(r#""pad":""}"#), "{payload}");
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
}
