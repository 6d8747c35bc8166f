//! One Kafka connection, owned by one worker: a request goes out as a length-prefixed frame
//! and its answer is read back whole before the next one. A failed or timed-out request
//! drops the connection; the next request reconnects.

use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::{Encodable, HeaderVersion};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::reader::Reader;
use super::requests;

/// The largest answer read: fetches ask for at most `FETCH_MAX_BYTES` of records, so anything
/// much larger is a broken broker, refused before a buffer is sized from its length.
pub const MAX_ANSWER_BYTES: usize = 64 << 20;

pub struct KafkaConn {
    addr: String,
    stream: Option<TcpStream>,
    correlation_id: i32,
}

impl KafkaConn {
    pub fn new(addr: &str) -> Self {
        Self {
            addr: addr.to_string(),
            stream: None,
            correlation_id: 0,
        }
    }

    /// Sends `message` as `api` and returns a reader over the answer after its header.
    pub async fn request<M: Encodable + HeaderVersion>(
        &mut self,
        api: (ApiKey, i16),
        message: &M,
        timeout: Duration,
    ) -> anyhow::Result<Reader> {
        self.correlation_id = self.correlation_id.wrapping_add(1);
        let id = self.correlation_id;
        let body = requests::frame(api, id, message)?;
        let result = tokio::time::timeout(timeout, self.exchange(body))
            .await
            .unwrap_or_else(|_| Err(anyhow!("no answer within {} ms", timeout.as_millis())));
        let mut answer = match result {
            Ok(answer) => answer,
            Err(error) => {
                // The connection's state is unknown (e.g. an answer still in flight).
                self.stream = None;
                return Err(error.context(format!("{:?} v{}", api.0, api.1)));
            }
        };
        // Every API used here answers with header v0: the correlation id alone.
        if answer.remaining() < 4 {
            self.stream = None;
            bail!("{:?} answer shorter than its header", api.0);
        }
        let got = answer.get_i32();
        if got != id {
            self.stream = None;
            bail!("{:?} answer for correlation id {got}, sent {id}", api.0);
        }
        Ok(Reader::new(answer))
    }

    async fn exchange(&mut self, body: Bytes) -> anyhow::Result<Bytes> {
        if self.stream.is_none() {
            let stream = TcpStream::connect(&self.addr)
                .await
                .with_context(|| format!("connecting to {}", self.addr))?;
            stream.set_nodelay(true).context("setting TCP_NODELAY")?;
            self.stream = Some(stream);
        }
        let stream = self
            .stream
            .as_mut()
            .ok_or_else(|| anyhow!("no connection to {}", self.addr))?;
        let len = u32::try_from(body.len()).context("request larger than 4 GiB")?;
        // One write: with TCP_NODELAY a separate length would go out as its own packet.
        let mut frame = BytesMut::with_capacity(4 + body.len());
        frame.put_u32(len);
        frame.extend_from_slice(&body);
        stream.write_all(&frame).await?;
        let len = stream
            .read_i32()
            .await
            .context("reading the answer length")?;
        let len = usize::try_from(len)
            .ok()
            .filter(|&n| n <= MAX_ANSWER_BYTES)
            .ok_or_else(|| anyhow!("answer length {len} outside 0..={MAX_ANSWER_BYTES}"))?;
        let mut buf = vec![0u8; len];
        stream
            .read_exact(&mut buf)
            .await
            .context("reading the answer")?;
        Ok(Bytes::from(buf))
    }
}
