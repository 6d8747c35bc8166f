//! Checked reads of Kafka's primitive types from an answer body (non-flexible versions only).
//!
//! `kafka-protocol`'s decoders reserve `Vec::with_capacity(count)` from the count on the wire
//! before reading an element, so a broken broker claiming two billion elements would abort
//! this tool. Here a count is trusted only once the bytes left can hold that many elements
//! of at least `min_bytes` each, and every read checks the bytes left first.

use anyhow::bail;
use bytes::{Buf, Bytes};

/// A cursor over one answer body.
pub struct Reader {
    buf: Bytes,
}

impl Reader {
    pub fn new(buf: Bytes) -> Self {
        Reader { buf }
    }

    pub fn remaining(&self) -> usize {
        self.buf.remaining()
    }

    fn need(&self, n: usize, what: &str) -> anyhow::Result<()> {
        if self.buf.remaining() < n {
            bail!(
                "answer cut short: {what} needs {n} bytes, {} left",
                self.buf.remaining()
            );
        }
        Ok(())
    }

    pub fn i8(&mut self) -> anyhow::Result<i8> {
        self.need(1, "int8")?;
        Ok(self.buf.get_i8())
    }

    pub fn bool(&mut self) -> anyhow::Result<bool> {
        Ok(self.i8()? != 0)
    }

    pub fn i16(&mut self) -> anyhow::Result<i16> {
        self.need(2, "int16")?;
        Ok(self.buf.get_i16())
    }

    pub fn i32(&mut self) -> anyhow::Result<i32> {
        self.need(4, "int32")?;
        Ok(self.buf.get_i32())
    }

    pub fn i64(&mut self) -> anyhow::Result<i64> {
        self.need(8, "int64")?;
        Ok(self.buf.get_i64())
    }

    pub fn u32(&mut self) -> anyhow::Result<u32> {
        self.need(4, "uint32")?;
        Ok(self.buf.get_u32())
    }

    /// `n` raw bytes, shared with the body (no copy).
    pub fn take(&mut self, n: usize, what: &str) -> anyhow::Result<Bytes> {
        self.need(n, what)?;
        Ok(self.buf.split_to(n))
    }

    /// A nullable string (int16 length, -1 = null).
    pub fn nullable_string(&mut self) -> anyhow::Result<Option<String>> {
        let len = self.i16()?;
        if len == -1 {
            return Ok(None);
        }
        let Ok(len) = usize::try_from(len) else {
            bail!("negative string length {len}");
        };
        let bytes = self.take(len, "string")?;
        Ok(Some(String::from_utf8(bytes.to_vec())?))
    }

    pub fn string(&mut self) -> anyhow::Result<String> {
        self.nullable_string()?
            .ok_or_else(|| anyhow::anyhow!("null where a string is required"))
    }

    /// Nullable bytes (int32 length, -1 = null).
    pub fn nullable_bytes(&mut self) -> anyhow::Result<Option<Bytes>> {
        let len = self.i32()?;
        if len == -1 {
            return Ok(None);
        }
        let Ok(len) = usize::try_from(len) else {
            bail!("negative bytes length {len}");
        };
        Ok(Some(self.take(len, "bytes")?))
    }

    /// An array's element count (int32, -1 = null = empty), refused when the bytes left
    /// cannot hold that many elements of at least `min_bytes` each.
    pub fn count(&mut self, min_bytes: usize) -> anyhow::Result<usize> {
        let n = self.i32()?;
        if n == -1 {
            return Ok(0);
        }
        let Ok(n) = usize::try_from(n) else {
            bail!("negative array length {n}");
        };
        if n.saturating_mul(min_bytes.max(1)) > self.remaining() {
            bail!("array of {n} elements in {} bytes left", self.remaining());
        }
        Ok(n)
    }

    /// Reads `count(min_bytes)` elements with `each`; the vector grows as they arrive.
    pub fn array<T>(
        &mut self,
        min_bytes: usize,
        mut each: impl FnMut(&mut Reader) -> anyhow::Result<T>,
    ) -> anyhow::Result<Vec<T>> {
        let n = self.count(min_bytes)?;
        let mut out = Vec::new();
        for _ in 0..n {
            out.push(each(self)?);
        }
        Ok(out)
    }

    /// A zigzag varint of at most 5 bytes (record fields).
    pub fn varint(&mut self) -> anyhow::Result<i32> {
        let mut raw: u32 = 0;
        for shift in (0..35).step_by(7) {
            let b = self.i8()? as u8;
            raw |= u32::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(((raw >> 1) as i32) ^ -((raw & 1) as i32));
            }
        }
        bail!("varint longer than 5 bytes")
    }

    /// A zigzag varlong of at most 10 bytes (record timestamp and offset deltas).
    pub fn varlong(&mut self) -> anyhow::Result<i64> {
        let mut raw: u64 = 0;
        for shift in (0..70).step_by(7) {
            let b = self.i8()? as u8;
            raw |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64));
            }
        }
        bail!("varlong longer than 10 bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_beyond_the_bytes_left_are_refused() {
        // Two billion elements claimed in a 6-byte body.
        let mut r = Reader::new(Bytes::from_static(&[0x7f, 0xff, 0xff, 0xff, 0, 0]));
        assert!(r.count(1).is_err());
        let mut r = Reader::new(Bytes::from_static(&[0, 0, 0, 2, 0, 0]));
        assert!(r.count(2).is_err());
        let mut r = Reader::new(Bytes::from_static(&[0, 0, 0, 2, 0, 0]));
        assert_eq!(r.count(1).ok(), Some(2));
        let mut r = Reader::new(Bytes::from_static(&[0xff, 0xff, 0xff, 0xfe]));
        assert!(r.count(1).is_err());
        let mut r = Reader::new(Bytes::from_static(&[0xff, 0xff, 0xff, 0xff]));
        assert_eq!(r.count(1).ok(), Some(0));
    }

    #[test]
    fn strings_and_bytes_check_their_length() {
        let mut r = Reader::new(Bytes::from_static(&[0, 5, b'a', b'b']));
        assert!(r.string().is_err());
        let mut r = Reader::new(Bytes::from_static(&[0xff, 0xfe]));
        assert!(r.nullable_string().is_err());
        let mut r = Reader::new(Bytes::from_static(&[0xff, 0xff]));
        assert_eq!(r.nullable_string().ok(), Some(None));
        let mut r = Reader::new(Bytes::from_static(&[0x7f, 0, 0, 0, 1]));
        assert!(r.nullable_bytes().is_err());
    }

    #[test]
    fn varints_decode_zigzag_and_stop_at_their_limit() {
        let mut r = Reader::new(Bytes::from_static(&[0x01, 0x02, 0xac, 0x02]));
        assert_eq!(r.varint().ok(), Some(-1));
        assert_eq!(r.varint().ok(), Some(1));
        assert_eq!(r.varint().ok(), Some(150));
        let mut r = Reader::new(Bytes::from_static(&[0xff; 11]));
        assert!(r.varint().is_err());
        let mut r = Reader::new(Bytes::from_static(&[0xff; 11]));
        assert!(r.varlong().is_err());
    }
}
