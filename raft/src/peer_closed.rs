//! Whether the peer of a cluster connection has gone, watched while its request is answered
//! (review s14 F6): a request's body holds its share of the listener's body budget until the
//! request is answered, and an answer nobody will read must not keep holding it (openraft may
//! take long over an append or an install).

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// Resolves once `conn` has reached its end or failed. Bytes already waiting (the peer's next
/// request, sent after an earlier one timed out on its side) mean a live peer: then it never
/// resolves. Cancel-safe: what `fill_buf` read stays in the buffer for the next request.
pub async fn closed<R: AsyncBufRead + Unpin>(conn: &mut R) {
    match conn.fill_buf().await {
        Ok([]) | Err(_) => {}
        Ok(_) => std::future::pending::<()>().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncWriteExt, BufReader};

    /// Paused time: the bound elapses only once `closed` is pending with nothing to do.
    #[tokio::test(start_paused = true)]
    async fn an_ended_peer_resolves_and_a_talking_one_keeps_its_bytes() {
        let (mut client, server) = tokio::io::duplex(64);
        let mut server = BufReader::new(server);
        client.write_all(b"next").await.unwrap();
        let talking = tokio::time::timeout(std::time::Duration::from_millis(50), async {
            closed(&mut server).await
        })
        .await;
        assert!(talking.is_err(), "a peer with bytes waiting is not gone");
        assert_eq!(server.buffer(), b"next");
        server.consume(4);
        drop(client);
        closed(&mut server).await;
    }
}
