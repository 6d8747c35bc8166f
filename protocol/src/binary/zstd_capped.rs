//! One zstd frame, sized before it is decoded. The frame must declare its content size (the
//! official clients write it), fill its slice exactly (nothing may follow its end), and decode
//! to exactly that size in one pass into a buffer of that size: the caller counts the bytes
//! before they exist, and the decoder keeps no window or stream buffer of its own.

use zstd::bulk::Decompressor;
use zstd::zstd_safe;

use super::BinaryError;

/// A zstd frame starts with these bytes (skippable frames, which carry nothing, do not).
const FRAME_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// What `data` decodes to, as its one frame declares it; refused past `cap`.
pub(crate) fn declared_size(data: &[u8], cap: usize, what: &str) -> Result<usize, BinaryError> {
    let bad = |why: &str| BinaryError::malformed(format!("{what} is not one zstd frame: {why}"));
    if !data.starts_with(&FRAME_MAGIC) {
        return Err(bad("no zstd frame header"));
    }
    match zstd_safe::find_frame_compressed_size(data) {
        Ok(n) if n == data.len() => {}
        Ok(n) => return Err(bad(&format!("{} bytes follow its end", data.len() - n))),
        Err(_) => return Err(bad("its blocks are invalid")),
    }
    let size = match zstd_safe::get_frame_content_size(data) {
        Ok(Some(n)) => n,
        _ => return Err(bad("it does not declare its content size")),
    };
    match usize::try_from(size) {
        Ok(n) if n <= cap => Ok(n),
        _ => Err(BinaryError::TooLarge(format!(
            "{what} decompresses to {size} bytes; the limit is {cap}"
        ))),
    }
}

/// One decoder for a whole body: its context is set up once, not once per group.
pub(crate) fn decoder() -> Result<Decompressor<'static>, BinaryError> {
    Decompressor::new().map_err(|e| BinaryError::malformed(format!("no zstd decoder: {e}")))
}

/// Decodes `data` (checked by [`declared_size`]) into exactly `size` bytes.
pub(crate) fn inflate(
    dec: &mut Decompressor<'_>,
    data: &[u8],
    size: usize,
    what: &str,
) -> Result<Vec<u8>, BinaryError> {
    let bad = || BinaryError::malformed(format!("{what} is not a valid zstd frame"));
    let out = dec.decompress(data, size).map_err(|_| bad())?;
    if out.len() != size {
        return Err(bad());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn z(raw: &[u8]) -> Vec<u8> {
        zstd::bulk::compress(raw, 1).unwrap_or_default()
    }

    #[test]
    fn output_is_sized_by_the_frame_and_capped() {
        let raw = vec![7u8; 10_000];
        let z = z(&raw);
        assert_eq!(declared_size(&z, 10_000, "x"), Ok(10_000));
        let mut dec = decoder().expect("decoder");
        assert_eq!(inflate(&mut dec, &z, 10_000, "x").as_deref(), Ok(&raw[..]));
        assert!(matches!(
            declared_size(&z, 9_999, "x"),
            Err(BinaryError::TooLarge(_))
        ));
        assert!(matches!(
            declared_size(b"nope", 100, "x"),
            Err(BinaryError::Malformed(_))
        ));
    }

    #[test]
    fn bytes_after_the_frame_are_refused() {
        let mut two = z(b"[1]");
        two.extend_from_slice(&z(b"[2]"));
        assert!(declared_size(&two, 100, "x").is_err());
        let mut tail = z(b"[1]");
        tail.push(0);
        assert!(declared_size(&tail, 100, "x").is_err());
    }

    #[test]
    fn a_frame_without_its_content_size_is_refused() {
        // The streaming encoder does not know the size up front and leaves it out.
        let streamed = zstd::encode_all(&b"[1]"[..], 1).unwrap_or_default();
        assert!(matches!(
            declared_size(&streamed, 100, "x"),
            Err(BinaryError::Malformed(_))
        ));
    }
}
