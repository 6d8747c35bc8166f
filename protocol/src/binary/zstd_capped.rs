//! One zstd frame decoded through an output cap and a window cap: the frame's own content size
//! is not trusted, and the decoder never allocates a window larger than the cap needs.

use std::io::Read;

use super::BinaryError;

/// The largest window (log2) a frame may ask for: the smallest that holds `cap` bytes, at least
/// 2^20 (level 1 uses far less) and at most 2^27 (zstd's default).
fn window_log(cap: usize) -> u32 {
    let bits = usize::BITS - cap.saturating_sub(1).leading_zeros();
    bits.clamp(20, 27)
}

pub(crate) fn decompress(data: &[u8], cap: usize, what: &str) -> Result<Vec<u8>, BinaryError> {
    let bad = || BinaryError::malformed(format!("{what} is not a valid zstd frame"));
    let mut dec = zstd::stream::read::Decoder::new(data).map_err(|_| bad())?;
    dec.window_log_max(window_log(cap)).map_err(|_| bad())?;
    // One zstd frame only: trailing frames would be read as more of this one.
    let dec = dec.single_frame();
    let mut out = Vec::new();
    let limit = u64::try_from(cap).unwrap_or(u64::MAX).saturating_add(1);
    dec.take(limit).read_to_end(&mut out).map_err(|_| bad())?;
    if out.len() > cap {
        return Err(BinaryError::TooLarge(format!(
            "{what} decompresses past the limit of {cap} bytes"
        )));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_is_capped_and_garbage_refused() {
        let raw = vec![7u8; 10_000];
        let z = zstd::encode_all(&raw[..], 1).unwrap_or_default();
        assert_eq!(decompress(&z, 10_000, "x").as_deref(), Ok(&raw[..]));
        assert!(matches!(
            decompress(&z, 9_999, "x"),
            Err(BinaryError::TooLarge(_))
        ));
        assert!(matches!(
            decompress(b"nope", 100, "x"),
            Err(BinaryError::Malformed(_))
        ));
    }
}
