//! Kafka's framing: every request and response is an int32 big-endian length followed by that
//! many bytes. The length is checked against the configured maximum before any buffer is
//! sized from it, and the buffer then grows only as bytes really arrive, so a client that
//! announces a large frame and sends nothing holds no more than one read's worth of memory.

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The most a frame buffer grows by per read.
const READ_CHUNK: usize = 64 * 1024;

/// Why a connection's next frame could not be read; each ends the connection.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame length {0} is negative")]
    Negative(i32),
    #[error("frame length {len} is above kafka_max_request_bytes ({max})")]
    TooLarge { len: usize, max: usize },
    #[error("connection closed inside a frame")]
    Truncated,
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Checks an announced frame length. Separate from the reading so that it is tested alone.
pub fn check_len(len: i32, max: usize) -> Result<usize, FrameError> {
    let n = usize::try_from(len).map_err(|_| FrameError::Negative(len))?;
    if n > max {
        return Err(FrameError::TooLarge { len: n, max });
    }
    Ok(n)
}

/// Reads one frame's body. `Ok(None)` is a clean close between frames.
pub async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut R,
    max: usize,
) -> Result<Option<Bytes>, FrameError> {
    match read_len(r, max).await? {
        Some(n) => read_body(r, n).await.map(Some),
        None => Ok(None),
    }
}

/// Reads and checks a frame's length. `Ok(None)` is a clean close between frames.
pub async fn read_len<R: AsyncRead + Unpin>(
    r: &mut R,
    max: usize,
) -> Result<Option<usize>, FrameError> {
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < len.len() {
        match r.read(&mut len[got..]).await? {
            0 if got == 0 => return Ok(None),
            0 => return Err(FrameError::Truncated),
            n => got += n,
        }
    }
    check_len((&len[..]).get_i32(), max).map(Some)
}

/// Reads a frame body of `n` checked bytes, growing the buffer only as bytes arrive.
pub async fn read_body<R: AsyncRead + Unpin>(r: &mut R, n: usize) -> Result<Bytes, FrameError> {
    let mut buf = BytesMut::with_capacity(n.min(READ_CHUNK));
    while buf.len() < n {
        let want = (n - buf.len()).min(READ_CHUNK);
        buf.reserve(want);
        let mut limited = (&mut *r).take(want as u64);
        if limited.read_buf(&mut buf).await? == 0 {
            return Err(FrameError::Truncated);
        }
    }
    Ok(buf.freeze())
}

/// Writes one frame: the length, then the body.
pub async fn write_frame<W: AsyncWrite + Unpin>(w: &mut W, body: &[u8]) -> std::io::Result<()> {
    let len = i32::try_from(body.len()).map_err(|_| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, "response above 2 GiB")
    })?;
    w.write_i32(len).await?;
    w.write_all(body).await?;
    w.flush().await
}

/// One frame of `head` then `body`, without joining them first.
pub async fn write_frame_parts<W: AsyncWrite + Unpin>(
    w: &mut W,
    head: &[u8],
    body: &[u8],
) -> std::io::Result<()> {
    let len = head
        .len()
        .checked_add(body.len())
        .and_then(|n| i32::try_from(n).ok())
        .ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidData, "response above 2 GiB")
        })?;
    w.write_i32(len).await?;
    w.write_all(head).await?;
    w.write_all(body).await?;
    w.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_are_checked_before_use() {
        assert!(matches!(check_len(-1, 100), Err(FrameError::Negative(-1))));
        assert!(matches!(
            check_len(i32::MIN, 100),
            Err(FrameError::Negative(_))
        ));
        assert!(matches!(
            check_len(101, 100),
            Err(FrameError::TooLarge { len: 101, max: 100 })
        ));
        assert_eq!(check_len(100, 100).ok(), Some(100));
        assert_eq!(check_len(0, 100).ok(), Some(0));
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a test runtime")
    }

    #[test]
    fn frames_read_back_and_a_clean_close_is_none() {
        rt().block_on(async {
            let mut wire = Vec::new();
            write_frame(&mut wire, b"abc").await.expect("write");
            write_frame(&mut wire, b"").await.expect("write");
            let mut r = wire.as_slice();
            let one = read_frame(&mut r, 10).await.expect("read");
            assert_eq!(one.as_deref(), Some(&b"abc"[..]));
            let two = read_frame(&mut r, 10).await.expect("read");
            assert_eq!(two.as_deref(), Some(&b""[..]));
            assert!(read_frame(&mut r, 10).await.expect("eof").is_none());
        });
    }

    #[test]
    fn bad_lengths_and_cut_frames_end_the_connection() {
        rt().block_on(async {
            let neg = [0xff, 0xff, 0xff, 0xfb];
            let mut r = &neg[..];
            assert!(matches!(
                read_frame(&mut r, 10).await,
                Err(FrameError::Negative(-5))
            ));
            // A huge announced length with no body: refused on the length alone.
            let huge = [0x7f, 0xff, 0xff, 0xff];
            let mut r = &huge[..];
            assert!(matches!(
                read_frame(&mut r, 1 << 20).await,
                Err(FrameError::TooLarge { .. })
            ));
            let cut = [0u8, 0, 0, 9, 1, 2];
            let mut r = &cut[..];
            assert!(matches!(
                read_frame(&mut r, 10).await,
                Err(FrameError::Truncated)
            ));
            let half_len = [0u8, 0];
            let mut r = &half_len[..];
            assert!(matches!(
                read_frame(&mut r, 10).await,
                Err(FrameError::Truncated)
            ));
        });
    }
}
