//! The sender's side of a snapshot as openraft reads it: `AsyncRead + AsyncSeek` over a
//! `SnapshotSource`, each read one blocking pread or redb read of at most `READ_MAX` bytes on
//! tokio's blocking pool, so a runtime worker never waits on the disk. Writes fail: a sender's
//! reader is never written (docs/storage-format.md "Never whole in memory"). Not yet what
//! openraft's `SnapshotData` is: that is the install's stage (issue 13).

use std::future::Future;
use std::io::{self, SeekFrom};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use queenmq_storage::{SnapshotHeader, SnapshotSource};
use tokio::io::{AsyncRead, AsyncSeek, AsyncWrite, ReadBuf};
use tokio::task::JoinHandle;

/// The most one read asks of the disk: openraft's chunk (`snapshot_max_chunk_size`, 3 MiB by
/// default) fits, and a larger buffer costs no more than this in flight.
const READ_MAX: usize = 4 << 20;

pub struct SnapshotReader {
    source: Arc<SnapshotSource>,
    pos: u64,
    /// The read in flight on the blocking pool, if any.
    reading: Option<JoinHandle<io::Result<Vec<u8>>>>,
}

impl SnapshotReader {
    pub fn new(source: SnapshotSource) -> SnapshotReader {
        SnapshotReader {
            source: Arc::new(source),
            pos: 0,
            reading: None,
        }
    }

    pub fn header(&self) -> &SnapshotHeader {
        self.source.header()
    }
}

impl AsyncRead for SnapshotReader {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.reading.is_none() {
            let (source, pos) = (self.source.clone(), self.pos);
            let want = buf.remaining().min(READ_MAX);
            self.reading = Some(tokio::task::spawn_blocking(move || {
                let mut bytes = vec![0u8; want];
                let n = source.read_at(pos, &mut bytes).map_err(io::Error::other)?;
                bytes.truncate(n);
                Ok(bytes)
            }));
        }
        let Some(handle) = self.reading.as_mut() else {
            return Poll::Ready(Err(io::Error::other("no read in flight")));
        };
        let joined = ready!(Pin::new(handle).poll(cx));
        self.reading = None;
        let bytes = joined.map_err(io::Error::other)??;
        // A read started for a larger buffer than this call's is cut to it: the rest is read
        // again at the new position, never lost.
        let n = bytes.len().min(buf.remaining());
        buf.put_slice(&bytes[..n]);
        self.pos += n as u64;
        Poll::Ready(Ok(()))
    }
}

impl AsyncSeek for SnapshotReader {
    fn start_seek(mut self: Pin<&mut Self>, to: SeekFrom) -> io::Result<()> {
        if self.reading.is_some() {
            return Err(io::Error::other("seek while a read is in flight"));
        }
        let pos = match to {
            SeekFrom::Start(n) => Some(n),
            SeekFrom::End(d) => self.source.header().stream_len().checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos = pos.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "seek before the stream's start",
            )
        })?;
        Ok(())
    }

    fn poll_complete(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<u64>> {
        Poll::Ready(Ok(self.pos))
    }
}

impl AsyncWrite for SnapshotReader {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        _buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "a snapshot sender's reader is not written",
        )))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl Drop for SnapshotReader {
    /// A read still on the blocking pool finishes there; its bytes are dropped with it.
    fn drop(&mut self) {
        if let Some(h) = self.reading.take() {
            h.abort();
        }
    }
}
