//! Checked reads of Kafka's primitive types from a request body.
//!
//! Requests are decoded here rather than by `kafka-protocol`'s decoders: those reserve
//! `Vec::with_capacity(count)` from a client-sent count before reading a single element, so a
//! ten-byte frame claiming two billion elements would abort the process. Here a count is
//! only trusted once it is no larger than the bytes left (every element takes at least one
//! byte), and collections grow as elements actually arrive.

use bytes::{Buf, Bytes};

/// Why a request body could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed request: {0}")]
pub struct Malformed(pub &'static str);

/// A cursor over one request body. Every read checks the bytes left first.
pub struct Reader {
    buf: Bytes,
    /// Flexible versions (KIP-482) use compact lengths and carry tagged fields.
    flexible: bool,
}

impl Reader {
    pub fn new(buf: Bytes, flexible: bool) -> Self {
        Reader { buf, flexible }
    }

    pub fn set_flexible(&mut self, flexible: bool) {
        self.flexible = flexible;
    }

    pub fn remaining(&self) -> usize {
        self.buf.remaining()
    }

    fn need(&self, n: usize, what: &'static str) -> Result<(), Malformed> {
        if self.buf.remaining() < n {
            return Err(Malformed(what));
        }
        Ok(())
    }

    pub fn i8(&mut self) -> Result<i8, Malformed> {
        self.need(1, "truncated int8")?;
        Ok(self.buf.get_i8())
    }

    pub fn bool(&mut self) -> Result<bool, Malformed> {
        Ok(self.i8()? != 0)
    }

    pub fn i16(&mut self) -> Result<i16, Malformed> {
        self.need(2, "truncated int16")?;
        Ok(self.buf.get_i16())
    }

    pub fn i32(&mut self) -> Result<i32, Malformed> {
        self.need(4, "truncated int32")?;
        Ok(self.buf.get_i32())
    }

    pub fn i64(&mut self) -> Result<i64, Malformed> {
        self.need(8, "truncated int64")?;
        Ok(self.buf.get_i64())
    }

    pub fn uuid(&mut self) -> Result<[u8; 16], Malformed> {
        self.need(16, "truncated uuid")?;
        let mut out = [0u8; 16];
        self.buf.copy_to_slice(&mut out);
        Ok(out)
    }

    pub fn uvarint(&mut self) -> Result<u32, Malformed> {
        let mut value: u32 = 0;
        for shift in (0..35).step_by(7) {
            let b = self.i8()? as u8;
            value |= u32::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(Malformed("unsigned varint longer than five bytes"))
    }

    /// A zigzag-encoded signed varint (record fields), at most 10 bytes.
    pub fn varlong(&mut self) -> Result<i64, Malformed> {
        let mut raw: u64 = 0;
        for shift in (0..70).step_by(7) {
            let b = self.i8()? as u8;
            raw |= u64::from(b & 0x7f).checked_shl(shift).unwrap_or(0);
            if b & 0x80 == 0 {
                return Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64));
            }
        }
        Err(Malformed("varint longer than ten bytes"))
    }

    /// A zigzag varint that must fit an int32.
    pub fn varint(&mut self) -> Result<i32, Malformed> {
        i32::try_from(self.varlong()?).map_err(|_| Malformed("varint out of int32 range"))
    }

    /// `n` bytes as a view of the body (no copy).
    pub fn take(&mut self, n: usize) -> Result<Bytes, Malformed> {
        self.need(n, "length past the end of the request")?;
        Ok(self.buf.split_to(n))
    }

    /// A length prefix: `None` is null. Compact lengths are stored plus one.
    fn length(&mut self) -> Result<Option<usize>, Malformed> {
        let n: i64 = if self.flexible {
            i64::from(self.uvarint()?) - 1
        } else {
            i64::from(self.i16()?)
        };
        match n {
            -1 => Ok(None),
            n if n < 0 => Err(Malformed("negative string length")),
            n => usize::try_from(n)
                .map(Some)
                .map_err(|_| Malformed("string length")),
        }
    }

    pub fn nullable_string(&mut self) -> Result<Option<String>, Malformed> {
        let Some(n) = self.length()? else {
            return Ok(None);
        };
        let raw = self.take(n)?;
        String::from_utf8(raw.to_vec())
            .map(Some)
            .map_err(|_| Malformed("string is not UTF-8"))
    }

    pub fn string(&mut self) -> Result<String, Malformed> {
        self.nullable_string()?
            .ok_or(Malformed("null where a string is required"))
    }

    /// The header's `client_id`: always the classic int16-length form, even in flexible
    /// headers (it predates KIP-482 and was kept for compatibility).
    pub fn classic_nullable_string(&mut self) -> Result<Option<String>, Malformed> {
        let flexible = std::mem::replace(&mut self.flexible, false);
        let s = self.nullable_string();
        self.flexible = flexible;
        s
    }

    /// Nullable bytes (record sets): int32 length, or compact uvarint length plus one.
    pub fn nullable_bytes(&mut self) -> Result<Option<Bytes>, Malformed> {
        match self.nullable_len("negative bytes length", "bytes length")? {
            Some(n) => self.take(n).map(Some),
            None => Ok(None),
        }
    }

    /// An array's element count, `None` for a null array. The count is refused when the
    /// bytes left could not hold that many elements, so callers may trust it.
    pub fn array_len(&mut self) -> Result<Option<usize>, Malformed> {
        let n = self.nullable_len("negative array length", "array length")?;
        if n.is_some_and(|n| n > self.remaining()) {
            return Err(Malformed("array longer than the request"));
        }
        Ok(n)
    }

    /// A length that may be null: int32, or compact uvarint plus one; -1 is null.
    fn nullable_len(
        &mut self,
        negative: &'static str,
        too_long: &'static str,
    ) -> Result<Option<usize>, Malformed> {
        let n: i64 = if self.flexible {
            i64::from(self.uvarint()?) - 1
        } else {
            i64::from(self.i32()?)
        };
        match n {
            -1 => Ok(None),
            n if n < 0 => Err(Malformed(negative)),
            n => usize::try_from(n)
                .map(Some)
                .map_err(|_| Malformed(too_long)),
        }
    }

    /// Skips the tagged fields of a flexible struct (none of them matters to us yet).
    pub fn skip_tags(&mut self) -> Result<(), Malformed> {
        if !self.flexible {
            return Ok(());
        }
        let count = self.uvarint()?;
        for _ in 0..count {
            let _tag = self.uvarint()?;
            let size = self.uvarint()? as usize;
            self.take(size)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_huge_array_count_is_refused_before_anything_is_sized_from_it() {
        let mut r = Reader::new(Bytes::from_static(&[0x7f, 0xff, 0xff, 0xff, 0, 0]), false);
        assert_eq!(
            r.array_len(),
            Err(Malformed("array longer than the request"))
        );
        let mut compact = Reader::new(Bytes::from_static(&[0xff, 0xff, 0xff, 0xff, 0x0f]), true);
        assert!(compact.array_len().is_err());
    }

    #[test]
    fn strings_and_nulls_read_in_both_encodings() {
        let mut classic = Reader::new(Bytes::from_static(b"\x00\x02hi\xff\xff"), false);
        assert_eq!(classic.string().ok().as_deref(), Some("hi"));
        assert_eq!(classic.nullable_string(), Ok(None));
        let mut compact = Reader::new(Bytes::from_static(b"\x03hi\x00"), true);
        assert_eq!(compact.string().ok().as_deref(), Some("hi"));
        assert_eq!(compact.nullable_string(), Ok(None));
        let mut short = Reader::new(Bytes::from_static(b"\x00\x09hi"), false);
        assert!(short.string().is_err(), "a length past the end is refused");
    }

    #[test]
    fn varints_longer_than_five_bytes_are_refused() {
        let mut r = Reader::new(Bytes::from_static(&[0x80; 6]), true);
        assert!(r.uvarint().is_err());
        let mut ok = Reader::new(Bytes::from_static(&[0xac, 0x02]), true);
        assert_eq!(ok.uvarint(), Ok(300));
    }

    #[test]
    fn zigzag_varints_decode_signed_values() {
        let mut r = Reader::new(Bytes::from_static(&[0x01, 0x02, 0x03, 0xac, 0x02]), false);
        assert_eq!(r.varint(), Ok(-1));
        assert_eq!(r.varint(), Ok(1));
        assert_eq!(r.varint(), Ok(-2));
        assert_eq!(r.varint(), Ok(150));
        let mut wide = Reader::new(Bytes::from_static(&[0xfe, 0xff, 0xff, 0xff, 0x1f]), false);
        assert!(wide.varint().is_err(), "above int32");
    }

    #[test]
    fn tagged_fields_are_skipped_only_in_flexible_versions() {
        let mut r = Reader::new(Bytes::from_static(&[1, 7, 2, 0xaa, 0xbb, 9]), true);
        assert!(r.skip_tags().is_ok());
        assert_eq!(r.i8(), Ok(9));
        let mut classic = Reader::new(Bytes::from_static(&[1]), false);
        assert!(classic.skip_tags().is_ok());
        assert_eq!(classic.remaining(), 1);
    }
}
