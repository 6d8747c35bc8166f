//! A failed login's answer is delayed, longer for each recent failure from the same source
//! (an IPv4 address, an IPv6 /64): password guessing from one host slows down geometrically,
//! while a client that mistyped once waits a fraction of a second. Only the `WINDOW` forgets
//! failures, never a success: a success is not delayed anyway, and one from the same source
//! (another account, a neighbour behind the same NAT) must not reset a guesser's delay. The delay holds the connection's pre-login
//! slot, of which each IP has few (`kafka_max_prelogin_connections_per_ip`), and ends at the
//! login deadline at the latest.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Failures older than this are forgotten.
const WINDOW: Duration = Duration::from_secs(60);
/// The first failure's delay; each further one doubles it, up to `MOST`.
const FIRST: Duration = Duration::from_millis(200);
const MOST: Duration = Duration::from_secs(5);
/// Source IPs remembered at most: past it, stale ones are dropped, and if all are recent a
/// new IP gets the longest delay without being remembered.
const MAX_PEERS: usize = 4096;

#[derive(Default)]
pub struct Backoff {
    by_ip: Mutex<HashMap<IpAddr, Recent>>,
}

struct Recent {
    failures: u32,
    last: Instant,
}

impl Backoff {
    /// Records a failed login from `ip` and returns how long its answer waits.
    pub fn failed(&self, ip: IpAddr, now: Instant) -> Duration {
        let ip = crate::prelogin::source_key(ip);
        let mut by_ip = self.by_ip.lock().unwrap_or_else(|e| e.into_inner());
        if by_ip.len() >= MAX_PEERS && !by_ip.contains_key(&ip) {
            by_ip.retain(|_, r| now.saturating_duration_since(r.last) < WINDOW);
            if by_ip.len() >= MAX_PEERS {
                return MOST;
            }
        }
        let r = by_ip.entry(ip).or_insert(Recent {
            failures: 0,
            last: now,
        });
        if now.saturating_duration_since(r.last) >= WINDOW {
            r.failures = 0;
        }
        r.failures = r.failures.saturating_add(1);
        r.last = now;
        delay(r.failures)
    }
}

fn delay(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    FIRST.saturating_mul(1 << doublings).min(MOST)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_per_source_and_reset_only_after_the_window() {
        let b = Backoff::default();
        let (ip, other) = (IpAddr::from([1, 2, 3, 4]), IpAddr::from([5, 6, 7, 8]));
        let t = Instant::now();
        let got: Vec<Duration> = (0..7).map(|_| b.failed(ip, t)).collect();
        assert_eq!(got[0], FIRST);
        assert_eq!(got[1], FIRST * 2);
        assert_eq!(got[6], MOST);
        assert_eq!(b.failed(other, t), FIRST, "each IP counts its own");
        let v6 = |s: &str| s.parse::<IpAddr>().expect("ip");
        b.failed(v6("2001:db8::1"), t);
        assert_eq!(
            b.failed(v6("2001:db8::2"), t),
            FIRST * 2,
            "one /64 is one source"
        );
        assert_eq!(
            b.failed(ip, t + WINDOW),
            FIRST,
            "old failures are forgotten"
        );
    }

    #[test]
    fn the_table_stays_bounded() {
        let b = Backoff::default();
        let t = Instant::now();
        for i in 0..MAX_PEERS as u32 {
            b.failed(IpAddr::from(std::net::Ipv4Addr::from(i)), t);
        }
        let stranger = IpAddr::from([255, 255, 255, 255]);
        assert_eq!(b.failed(stranger, t), MOST);
        assert_eq!(b.by_ip.lock().expect("lock").len(), MAX_PEERS);
        // Once the others are stale, a new IP is remembered again.
        assert_eq!(b.failed(stranger, t + WINDOW), FIRST);
        assert_eq!(b.by_ip.lock().expect("lock").len(), 1);
    }
}
