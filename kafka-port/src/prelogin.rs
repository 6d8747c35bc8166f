//! Admission of connections that have not finished TLS and login yet. They are strangers:
//! they get their own, smaller cap (`kafka_max_prelogin_connections`) and a cap per source
//! address, so that a crowd of them cannot fill the port (`max_connections`) before a
//! logged-in client gets a slot. The slot is given back once the connection has logged in
//! (or has finished its TLS handshake, on a port without SASL), or when it closes.
//!
//! A full gate closes its OLDEST stranger to admit the newcomer instead of refusing it: an
//! honest login ends within milliseconds of its connect, so whoever wants to keep honest
//! logins out must open connections faster than they log in, not merely hold a few idle
//! sockets. A full per-source share refuses only that source.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

pub struct PreLoginGate {
    total: usize,
    per_ip: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    next_id: u64,
    /// Admitted strangers by admission order (oldest first): their source key and the
    /// sender that closes them when evicted.
    queue: BTreeMap<u64, (IpAddr, oneshot::Sender<()>)>,
    /// Strangers per source key; an entry lives while it counts one.
    by_ip: HashMap<IpAddr, usize>,
}

/// One admitted connection's pre-login slot; dropping it gives the slot back.
pub struct PreLogin {
    id: u64,
    gate: Arc<PreLoginGate>,
}

/// Resolves when the gate closed this stranger to admit a newer one.
pub struct Evicted(oneshot::Receiver<()>);

impl Evicted {
    /// Waits for an eviction; a slot given back normally never resolves this.
    pub async fn wait(self) {
        if self.0.await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// What `admit` decided.
pub enum Admission {
    /// In, with the slot and the eviction signal; `evicted_oldest` when an older stranger
    /// was closed to make room.
    In {
        slot: PreLogin,
        evicted: Evicted,
        evicted_oldest: bool,
    },
    /// The source already holds its share.
    SourceFull,
}

/// The key a source is counted under: IPv4-mapped IPv6 as IPv4, other IPv6 by its /64
/// (one host usually owns a whole /64).
pub fn source_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let bits = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(Ipv6Addr::from(bits))
        }
        v4 => v4,
    }
}

impl PreLoginGate {
    pub fn new(total: usize, per_ip: usize) -> Arc<Self> {
        Arc::new(PreLoginGate {
            total: total.max(1),
            per_ip: per_ip.max(1),
            inner: Mutex::new(Inner::default()),
        })
    }

    /// A slot for a new connection from `ip`; when the gate is full, the oldest stranger is
    /// closed to make room.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Admission {
        let key = source_key(ip);
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if inner.by_ip.get(&key).copied().unwrap_or(0) >= self.per_ip {
            return Admission::SourceFull;
        }
        let mut evicted_oldest = false;
        while inner.queue.len() >= self.total {
            let Some((_, (old_key, close))) = inner.queue.pop_first() else {
                break;
            };
            inner.forget(old_key);
            // The stranger may have closed already; then there is nothing to tell.
            let _ = close.send(());
            evicted_oldest = true;
        }
        let id = inner.next_id;
        inner.next_id += 1;
        let (tx, rx) = oneshot::channel();
        inner.queue.insert(id, (key, tx));
        *inner.by_ip.entry(key).or_insert(0) += 1;
        Admission::In {
            slot: PreLogin {
                id,
                gate: self.clone(),
            },
            evicted: Evicted(rx),
            evicted_oldest,
        }
    }
}

impl Inner {
    fn forget(&mut self, key: IpAddr) {
        if let Some(n) = self.by_ip.get_mut(&key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.by_ip.remove(&key);
            }
        }
    }
}

impl Drop for PreLogin {
    fn drop(&mut self) {
        let mut inner = self.gate.inner.lock().unwrap_or_else(|e| e.into_inner());
        // An evicted stranger was forgotten when it was evicted.
        if let Some((key, _)) = inner.queue.remove(&self.id) {
            inner.forget(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admitted(gate: &Arc<PreLoginGate>, ip: IpAddr) -> (PreLogin, Evicted, bool) {
        match gate.admit(ip) {
            Admission::In {
                slot,
                evicted,
                evicted_oldest,
            } => (slot, evicted, evicted_oldest),
            Admission::SourceFull => panic!("{ip} should be admitted"),
        }
    }

    fn closed(e: &mut Evicted) -> bool {
        e.0.try_recv().is_ok()
    }

    #[test]
    fn a_full_gate_evicts_the_oldest_and_a_full_source_is_refused() {
        let gate = PreLoginGate::new(3, 2);
        let (a, b) = (IpAddr::from([10, 0, 0, 1]), IpAddr::from([10, 0, 0, 2]));
        let (a1, mut e1, x1) = admitted(&gate, a);
        let (a2, mut e2, _) = admitted(&gate, a);
        assert!(
            matches!(gate.admit(a), Admission::SourceFull),
            "a's share is 2"
        );
        let (b1, mut e3, x3) = admitted(&gate, b);
        assert!(!x1 && !x3 && !closed(&mut e1));
        // The gate holds 3: the fourth evicts the oldest (a1), not the newcomer.
        let (b2, mut e4, x4) = admitted(&gate, b);
        assert!(x4 && closed(&mut e1) && !closed(&mut e2) && !closed(&mut e3));
        // a1 was forgotten at eviction: its drop gives back nothing twice.
        drop(a1);
        assert_eq!(gate.inner.lock().expect("lock").by_ip[&a], 1);
        // b holds 2 now: a third from b is refused, and nobody is evicted for it.
        assert!(matches!(gate.admit(b), Admission::SourceFull));
        assert!(!closed(&mut e2) && !closed(&mut e4));
        drop((a2, b1, b2));
        let inner = gate.inner.lock().expect("lock");
        assert!(inner.by_ip.is_empty() && inner.queue.is_empty());
    }

    #[test]
    fn sources_are_keyed_by_ipv4_or_an_ipv6_slash_64() {
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().expect("ip");
        assert_eq!(source_key(mapped), IpAddr::from([10, 0, 0, 1]));
        let one: IpAddr = "2001:db8:1:2:aaaa::1".parse().expect("ip");
        let two: IpAddr = "2001:db8:1:2:bbbb::9".parse().expect("ip");
        let other: IpAddr = "2001:db8:1:3::1".parse().expect("ip");
        assert_eq!(source_key(one), source_key(two));
        assert_ne!(source_key(one), source_key(other));
        let gate = PreLoginGate::new(10, 1);
        let _held = admitted(&gate, one);
        assert!(matches!(gate.admit(two), Admission::SourceFull));
    }
}
