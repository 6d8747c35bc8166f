//! The cluster listener's connections that have not said `Hello` yet (review s14 F5). Until
//! its Hello a connection is anonymous, so anything may open one; these are capped so a flood
//! of silent sockets costs a bounded number of tasks, each for at most the Hello deadline.
//!
//! One global FIFO let a single source evict every real peer's fresh connection. So the cap
//! is per source (an IPv4 address, an IPv6 /64: one host, or one subnet a host can pick its
//! addresses from), evicting that source's own oldest; and connections from the addresses
//! `peers` resolves to sit in a pool of their own that anonymous connections never evict.
//! Peers are matched and capped by their exact address, not their /64: nodes sharing a
//! subnet (a cloud subnet, a k8s node's range) each keep their own cap, and another host in
//! that subnet is anonymous, not a peer.
//! The anonymous pool keeps a total cap too (many sources at once), evicting its oldest.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use tokio::task::AbortHandle;

/// Whom a per-source cap counts together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    V4(Ipv4Addr),
    /// The top 64 bits of an IPv6 address.
    V6Prefix(u64),
    /// A peer's exact address (IPv4-mapped ones as IPv4).
    Peer(IpAddr),
}

/// `ip` with an IPv4-mapped IPv6 address as the IPv4 one it maps.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(a) => a.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    }
}

impl Source {
    /// An anonymous connection's source.
    pub fn of(ip: IpAddr) -> Source {
        match ip {
            IpAddr::V4(a) => Source::V4(a),
            // A dual-stack listener sees IPv4 peers as mapped addresses.
            IpAddr::V6(a) => match a.to_ipv4_mapped() {
                Some(v4) => Source::V4(v4),
                None => Source::V6Prefix((u128::from(a) >> 64) as u64),
            },
        }
    }
}

/// The sources the peers' configured addresses resolve to. Clones share them; the broker
/// sets them at start and again as the names resolve (a peer's name may not resolve yet).
#[derive(Clone, Default)]
pub struct PeerSources(Arc<RwLock<HashSet<IpAddr>>>);

impl PeerSources {
    pub fn set(&self, ips: impl IntoIterator<Item = IpAddr>) {
        let set = ips.into_iter().map(canonical).collect();
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = set;
    }

    /// Whether a connection from `ip` counts as a peer's: its exact address is one of theirs.
    pub fn contains_ip(&self, ip: IpAddr) -> bool {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(&canonical(ip))
    }
}

/// Why a connection was closed before its Hello (the `reason` of
/// `queen_cluster_connections_closed_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Eviction {
    /// Its source opened more than `max_pre_hello_per_source`.
    SourceCap,
    /// The anonymous pool held more than `max_pre_hello`.
    PoolCap,
}

impl Eviction {
    pub fn name(self) -> &'static str {
        match self {
            Eviction::SourceCap => "pre_hello_source_cap",
            Eviction::PoolCap => "pre_hello_pool_cap",
        }
    }
}

struct Waiting {
    id: u64,
    source: Source,
    handle: AbortHandle,
}

#[derive(Default)]
struct Queues {
    anonymous: VecDeque<Waiting>,
    peers: VecDeque<Waiting>,
    by_source: HashMap<Source, usize>,
}

impl Queues {
    fn count(&mut self, s: Source, up: bool) {
        let n = self.by_source.entry(s).or_insert(0);
        if up {
            *n += 1;
        } else {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.by_source.remove(&s);
            }
        }
    }
}

/// The connections waiting for their Hello.
pub struct PreHello {
    queues: Mutex<Queues>,
    per_source: usize,
    max_anonymous: usize,
    peers: PeerSources,
}

impl PreHello {
    /// Both caps must be above 0 (the listener checks: at 0 every connection is closed).
    pub fn new(max_anonymous: usize, per_source: usize, peers: PeerSources) -> PreHello {
        PreHello {
            queues: Mutex::default(),
            per_source,
            max_anonymous,
            peers,
        }
    }

    /// Starts connection `id` from `ip` with `spawn` and queues it, closing what the caps
    /// then evict (never the new one). The lock is held across the spawn, so the task cannot
    /// leave the queue before it is in it.
    pub fn admit(&self, id: u64, ip: IpAddr, spawn: impl FnOnce() -> AbortHandle) -> Vec<Eviction> {
        // A peer's key never equals an anonymous one, so a source's count lies in one pool
        // even if a name's resolution moves an address between them.
        let peer = self.peers.contains_ip(ip);
        let source = if peer {
            Source::Peer(canonical(ip))
        } else {
            Source::of(ip)
        };
        let mut q = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
        let handle = spawn();
        let waiting = Waiting { id, source, handle };
        if peer {
            q.peers.push_back(waiting);
        } else {
            q.anonymous.push_back(waiting);
        }
        q.count(source, true);
        let mut evicted = Vec::new();
        if q.by_source.get(&source).copied().unwrap_or(0) > self.per_source {
            let pool = if peer { &mut q.peers } else { &mut q.anonymous };
            if let Some(at) = pool.iter().position(|w| w.source == source) {
                if let Some(old) = pool.remove(at) {
                    old.handle.abort();
                    q.count(source, false);
                    evicted.push(Eviction::SourceCap);
                }
            }
        }
        while q.anonymous.len() > self.max_anonymous {
            let Some(old) = q.anonymous.pop_front() else {
                break;
            };
            old.handle.abort();
            q.count(old.source, false);
            evicted.push(Eviction::PoolCap);
        }
        evicted
    }

    /// Connection `id` is past its Hello (or failed it): it no longer counts.
    pub fn leave(&self, id: u64) {
        let mut guard = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
        let q = &mut *guard;
        let found = [&mut q.anonymous, &mut q.peers]
            .into_iter()
            .find_map(|pool| {
                let at = pool.iter().position(|w| w.id == id)?;
                pool.remove(at)
            });
        if let Some(w) = found {
            q.count(w.source, false);
        }
    }

    /// How many wait now, anonymous and from peers.
    #[cfg(test)]
    fn waiting(&self) -> (usize, usize) {
        let q = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
        (q.anonymous.len(), q.peers.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv6Addr;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn an_ipv6_source_is_its_64_prefix_and_a_mapped_ipv4_its_address() {
        assert_eq!(
            Source::of(ip("2001:db8:1:2:aaaa::1")),
            Source::of(ip("2001:db8:1:2:bbbb::9"))
        );
        assert_ne!(
            Source::of(ip("2001:db8:1:2::1")),
            Source::of(ip("2001:db8:1:3::1"))
        );
        let mapped = IpAddr::V6(Ipv4Addr::new(10, 0, 0, 7).to_ipv6_mapped());
        assert_eq!(Source::of(mapped), Source::of(ip("10.0.0.7")));
        assert_ne!(Source::of(ip("10.0.0.7")), Source::of(ip("10.0.0.8")));
        assert_ne!(
            Source::of(IpAddr::V6(Ipv6Addr::LOCALHOST)),
            Source::of(ip("127.0.0.1"))
        );
    }

    /// A task that never ends unless aborted, and a way to see whether it was.
    fn parked() -> (tokio::task::JoinHandle<()>, AbortHandle) {
        let t = tokio::spawn(std::future::pending::<()>());
        let h = t.abort_handle();
        (t, h)
    }

    async fn aborted(t: tokio::task::JoinHandle<()>) -> bool {
        t.await.is_err_and(|e| e.is_cancelled())
    }

    #[tokio::test]
    async fn one_source_evicts_only_its_own_oldest() {
        let gate = PreHello::new(10, 3, PeerSources::default());
        let (other, h) = parked();
        assert!(gate.admit(1, ip("127.0.0.2"), || h).is_empty());
        let mut flood = Vec::new();
        for id in 2..50 {
            let (t, h) = parked();
            let e = gate.admit(id, ip("127.0.0.1"), || h);
            assert!(e.iter().all(|e| *e == Eviction::SourceCap), "{e:?}");
            flood.push(t);
        }
        assert_eq!(gate.waiting(), (4, 0));
        let kept = flood.split_off(flood.len() - 3);
        for t in flood {
            assert!(aborted(t).await);
        }
        for t in kept {
            assert!(!t.is_finished());
            t.abort();
        }
        assert!(!other.is_finished());
        gate.leave(1);
        assert_eq!(gate.waiting(), (3, 0));
        other.abort();
    }

    #[tokio::test]
    async fn many_sources_never_evict_a_peer() {
        let peers = PeerSources::default();
        peers.set([ip("10.0.0.2")]);
        let gate = PreHello::new(4, 2, peers);
        let (peer, h) = parked();
        assert!(gate.admit(1, ip("10.0.0.2"), || h).is_empty());
        let mut anon = Vec::new();
        for (id, n) in (2..).zip(0..40u8) {
            let (t, h) = parked();
            let e = gate.admit(id, IpAddr::V4(Ipv4Addr::new(192, 168, 0, n)), || h);
            assert!(e.iter().all(|e| *e == Eviction::PoolCap), "{e:?}");
            anon.push(t);
        }
        assert_eq!(gate.waiting(), (4, 1));
        let kept = anon.split_off(anon.len() - 4);
        for t in anon {
            assert!(aborted(t).await);
        }
        assert!(!peer.is_finished());
        // A peer over its own per-source cap evicts its own oldest, in its pool.
        let mut more = Vec::new();
        for id in 100..102 {
            let (t, h) = parked();
            assert_eq!(
                gate.admit(id, ip("10.0.0.2"), || h),
                if id == 101 {
                    vec![Eviction::SourceCap]
                } else {
                    vec![]
                }
            );
            more.push(t);
        }
        assert!(aborted(peer).await);
        assert_eq!(gate.waiting(), (4, 2));
        for t in kept.into_iter().chain(more) {
            assert!(!t.is_finished());
            t.abort();
        }
    }

    /// Two peers in one /64 each keep their own cap, and a third host of that /64 is
    /// anonymous: its flood evicts neither.
    #[tokio::test]
    async fn peers_are_matched_by_their_exact_address_not_their_64() {
        let peers = PeerSources::default();
        peers.set([ip("::1"), ip("::2")]);
        let gate = PreHello::new(4, 2, peers.clone());
        assert!(!peers.contains_ip(ip("::3")));
        let mut kept = Vec::new();
        for (id, from) in [(1, "::1"), (2, "::1"), (3, "::2"), (4, "::2")] {
            let (t, h) = parked();
            assert!(gate.admit(id, ip(from), || h).is_empty(), "{from}");
            kept.push(t);
        }
        let mut flood = Vec::new();
        for id in 10..60 {
            let (t, h) = parked();
            let e = gate.admit(id, ip("::3"), || h);
            assert!(e.iter().all(|e| *e == Eviction::SourceCap), "{e:?}");
            flood.push(t);
        }
        assert_eq!(gate.waiting(), (2, 4));
        for t in kept {
            assert!(!t.is_finished());
            t.abort();
        }
        for t in flood {
            t.abort();
        }
    }
}
