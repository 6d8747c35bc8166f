//! TCP keepalive on every cluster connection, both sides (review s14 F7). After the Hello a
//! connection has no read deadline: a peer that vanished without a FIN or RST (power cut, a
//! dropped route) would hold the listener's task and buffers, and the caller's pooled
//! connection, for ever. The kernel probes an idle connection after 30 s and every 10 s after,
//! and closes it after 3 unanswered probes, well before anything outlives a restart of the peer.

use std::time::Duration;

use socket2::{SockRef, TcpKeepalive};
use tokio::net::TcpStream;

/// Idle time before the first probe.
pub const IDLE: Duration = Duration::from_secs(30);
/// Time between probes.
pub const INTERVAL: Duration = Duration::from_secs(10);
/// Unanswered probes before the kernel closes the connection.
pub const RETRIES: u32 = 3;

/// Turns keepalive on for `tcp` with the timings above.
pub fn enable(tcp: &TcpStream) -> std::io::Result<()> {
    let ka = TcpKeepalive::new().with_time(IDLE).with_interval(INTERVAL);
    #[cfg(any(target_os = "linux", target_os = "android", target_os = "macos"))]
    let ka = ka.with_retries(RETRIES);
    SockRef::from(tcp).set_tcp_keepalive(&ka)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn both_ends_of_a_connection_get_keepalive() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = TcpStream::connect(addr).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        for s in [&client, &server] {
            assert!(!SockRef::from(s).keepalive().unwrap());
            enable(s).unwrap();
            assert!(SockRef::from(s).keepalive().unwrap());
        }
    }
}
