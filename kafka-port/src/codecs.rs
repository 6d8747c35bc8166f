//! Decompression of record batch bodies with a cap on the output.
//!
//! A few compressed bytes can claim gigabytes (a zip bomb, or a snappy length header that
//! lies), and the codec crates' one-shot helpers size their output from such claims. Every
//! codec here is read through a limit instead: past `cap` bytes of output the batch is
//! refused, whatever the input said.

use std::io::Read;

use bytes::{Buf, Bytes};

/// The compression a batch's attributes name (bits 0..=2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl Codec {
    pub fn from_attributes(attributes: i16) -> Option<Codec> {
        match attributes & 0x7 {
            0 => Some(Codec::None),
            1 => Some(Codec::Gzip),
            2 => Some(Codec::Snappy),
            3 => Some(Codec::Lz4),
            4 => Some(Codec::Zstd),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    #[error("records decompress to more than {0} bytes")]
    TooLarge(usize),
    #[error("{0} data is corrupt")]
    Corrupt(&'static str),
}

/// The batch's records section, decompressed, at most `cap` bytes.
pub fn decompress(codec: Codec, data: Bytes, cap: usize) -> Result<Bytes, CodecError> {
    match codec {
        Codec::None => Ok(data),
        // Several gzip members one after the other are one stream, as Java's GZIPInputStream
        // reads them; GzDecoder would stop after the first and drop the rest.
        Codec::Gzip => read_capped(flate2::read::MultiGzDecoder::new(&data[..]), cap, "gzip"),
        Codec::Zstd => {
            let mut dec = zstd::stream::read::Decoder::new(&data[..])
                .map_err(|_| CodecError::Corrupt("zstd"))?;
            // A frame names its own window, and the decoder allocates it (up to 128 MiB by
            // default) before producing a byte. Clients stream-compress with a window of 2 MiB
            // (level 3) to 8 MiB (level 19) whatever the batch's size, so those always pass;
            // a larger one only when the output may be that large anyway.
            dec.window_log_max(zstd_window_log(cap))
                .map_err(|_| CodecError::Corrupt("zstd"))?;
            read_capped(dec, cap, "zstd")
        }
        Codec::Lz4 => {
            let dec = lz4::Decoder::new(&data[..]).map_err(|_| CodecError::Corrupt("lz4"))?;
            read_capped(dec, cap, "lz4")
        }
        Codec::Snappy => snappy(&data, cap),
    }
}

/// The largest zstd window (log2) a batch may ask for: the smallest that holds `cap` bytes,
/// at least 2^23 (what clients' levels up to 19 use) and at most 2^27 (zstd's default).
fn zstd_window_log(cap: usize) -> u32 {
    let bits = usize::BITS - cap.saturating_sub(1).leading_zeros();
    bits.clamp(23, 27)
}

/// Reads everything `r` yields, refusing past `cap` bytes (one byte more is asked for, so a
/// stream of exactly `cap` bytes is accepted and a longer one is not).
fn read_capped<R: Read>(r: R, cap: usize, name: &'static str) -> Result<Bytes, CodecError> {
    let mut out = Vec::new();
    let limit = u64::try_from(cap).unwrap_or(u64::MAX).saturating_add(1);
    r.take(limit)
        .read_to_end(&mut out)
        .map_err(|_| CodecError::Corrupt(name))?;
    if out.len() > cap {
        return Err(CodecError::TooLarge(cap));
    }
    Ok(Bytes::from(out))
}

/// The Java client's xerial framing: this magic, two int32 versions, then blocks of
/// `int32 length | raw snappy block`.
const XERIAL_MAGIC: &[u8] = b"\x82SNAPPY\x00";

/// Snappy as Kafka clients write it: xerial-framed (the Java client and most others) or one
/// raw block (librdkafka without framing). Each block's announced length is checked against
/// what is left of the cap before its buffer exists.
fn snappy(data: &[u8], cap: usize) -> Result<Bytes, CodecError> {
    let mut out = Vec::new();
    if let Some(mut rest) = data.strip_prefix(XERIAL_MAGIC) {
        rest = rest.get(8..).ok_or(CodecError::Corrupt("snappy"))?;
        while !rest.is_empty() {
            let (len, tail) = rest
                .split_at_checked(4)
                .ok_or(CodecError::Corrupt("snappy"))?;
            let len = (&len[..]).get_i32();
            let len = usize::try_from(len).map_err(|_| CodecError::Corrupt("snappy"))?;
            let (block, tail) = tail
                .split_at_checked(len)
                .ok_or(CodecError::Corrupt("snappy"))?;
            raw_block(block, cap, &mut out)?;
            rest = tail;
        }
    } else {
        raw_block(data, cap, &mut out)?;
    }
    Ok(Bytes::from(out))
}

fn raw_block(block: &[u8], cap: usize, out: &mut Vec<u8>) -> Result<(), CodecError> {
    let n = snap::raw::decompress_len(block).map_err(|_| CodecError::Corrupt("snappy"))?;
    if n > cap.saturating_sub(out.len()) {
        return Err(CodecError::TooLarge(cap));
    }
    let start = out.len();
    out.resize(start + n, 0);
    snap::raw::Decoder::new()
        .decompress(block, &mut out[start..])
        .map_err(|_| CodecError::Corrupt("snappy"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BufMut;
    use std::io::Write;

    fn gzip(data: &[u8]) -> Bytes {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).expect("gzip");
        Bytes::from(e.finish().expect("gzip"))
    }

    #[test]
    fn every_codec_reads_back_what_was_compressed() {
        let data = b"hello hello hello kafka".repeat(20);
        let z = zstd::encode_all(&data[..], 3).expect("zstd");
        let mut lz = lz4::EncoderBuilder::new().build(Vec::new()).expect("lz4");
        lz.write_all(&data).expect("lz4");
        let (lz, res) = lz.finish();
        res.expect("lz4");
        let raw = snap::raw::Encoder::new()
            .compress_vec(&data)
            .expect("snappy");
        let mut xerial = XERIAL_MAGIC.to_vec();
        xerial.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1]);
        xerial.put_i32(raw.len() as i32);
        xerial.extend_from_slice(&raw);
        for (codec, input) in [
            (Codec::None, Bytes::from(data.clone())),
            (Codec::Gzip, gzip(&data)),
            (Codec::Zstd, Bytes::from(z)),
            (Codec::Lz4, Bytes::from(lz)),
            (Codec::Snappy, Bytes::from(raw)),
            (Codec::Snappy, Bytes::from(xerial)),
        ] {
            let out = decompress(codec, input, data.len());
            assert_eq!(out.as_deref(), Ok(&data[..]), "{codec:?}");
        }
    }

    #[test]
    fn concatenated_gzip_members_read_as_one_stream() {
        let mut two = gzip(b"first ").to_vec();
        two.extend_from_slice(&gzip(b"second"));
        let out = decompress(Codec::Gzip, Bytes::from(two), 100);
        assert_eq!(out.as_deref(), Ok(&b"first second"[..]));
    }

    fn zstd_frame(data: &[u8], window_log: u32) -> Bytes {
        let mut enc = zstd::stream::write::Encoder::new(Vec::new(), 3).expect("zstd");
        enc.window_log(window_log).expect("window");
        enc.include_contentsize(false).expect("size");
        enc.write_all(data).expect("zstd");
        Bytes::from(enc.finish().expect("zstd"))
    }

    #[test]
    fn a_zstd_window_is_bounded_by_the_cap_past_what_clients_use() {
        let data = vec![7u8; 64 << 10];
        // A 64 MiB window for 64 KiB of data: the frame header makes the decoder allocate it.
        let huge = zstd_frame(&data, 26);
        assert!(decompress(Codec::Zstd, huge.clone(), 1 << 20).is_err());
        assert_eq!(
            decompress(Codec::Zstd, huge, 64 << 20).as_deref(),
            Ok(&data[..])
        );
        // What clients send (level 3 streams a 2 MiB window; level 19, 8 MiB) passes with a
        // small cap.
        for log in [21, 23] {
            let z = zstd_frame(&data, log);
            assert_eq!(
                decompress(Codec::Zstd, z, 64 << 10).as_deref(),
                Ok(&data[..])
            );
        }
        assert_eq!(zstd_window_log(4096), 23);
        assert_eq!(zstd_window_log((32 << 20) + 1), 26);
        assert_eq!(zstd_window_log(usize::MAX), 27);
    }

    #[test]
    fn output_past_the_cap_is_refused() {
        let big = vec![0u8; 1 << 20];
        assert_eq!(
            decompress(Codec::Gzip, gzip(&big), 1000),
            Err(CodecError::TooLarge(1000))
        );
        // A raw snappy block whose header claims 2^31 bytes: refused before any buffer.
        let lying = Bytes::from_static(&[0x80, 0x80, 0x80, 0x80, 0x08, 0x00]);
        assert_eq!(
            decompress(Codec::Snappy, lying, 1 << 20),
            Err(CodecError::TooLarge(1 << 20))
        );
        assert!(decompress(Codec::Zstd, Bytes::from_static(b"nope"), 10).is_err());
        assert_eq!(Codec::from_attributes(5), None);
        assert_eq!(Codec::from_attributes(0x13), Some(Codec::Lz4));
    }
}
