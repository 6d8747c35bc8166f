//! Where the cluster's peers connect from (review s14 F5): the addresses their `peers` entries
//! resolve to, so the listener keeps their connections waiting for a Hello in a pool that
//! anonymous connections cannot evict. A name that does not resolve yet (a peer's pod not
//! scheduled) is looked up again every `RESOLVE_EVERY`; one that stops resolving keeps the
//! addresses it last had.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use queenmq_raft::pre_hello::PeerSources;

const RESOLVE_EVERY: Duration = Duration::from_secs(30);

/// Resolves `addrs` (`host:port`) into `sources` now and every `RESOLVE_EVERY` until `stop`.
pub async fn keep_resolved(
    addrs: Vec<String>,
    sources: PeerSources,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut known: BTreeMap<String, Vec<IpAddr>> = BTreeMap::new();
    loop {
        for a in &addrs {
            match tokio::net::lookup_host(a.as_str()).await {
                Ok(found) => {
                    known.insert(a.clone(), found.map(|s| s.ip()).collect());
                    // At once: the next name may take a resolver's timeout.
                    sources.set(known.values().flatten().copied());
                }
                Err(e) => {
                    tracing::debug!(peer = %a, error = %e, "a peer's address does not resolve (yet)")
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(RESOLVE_EVERY) => {}
            r = stop.changed() => if r.is_err() || *stop.borrow() { return },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Literal addresses resolve to themselves; an unresolvable name adds nothing and stops
    /// nothing.
    #[tokio::test]
    async fn peers_resolve_into_the_sources() {
        let sources = PeerSources::default();
        let (stop_tx, stop) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(keep_resolved(
            vec![
                "127.0.0.9:7000".into(),
                "[::1]:7000".into(),
                "no-such-host.invalid:1".into(),
            ],
            sources.clone(),
            stop,
        ));
        let bound = std::time::Instant::now() + Duration::from_secs(20);
        while !sources.contains_ip("127.0.0.9".parse().unwrap()) {
            assert!(std::time::Instant::now() < bound, "never resolved");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(sources.contains_ip("::1".parse().unwrap()));
        assert!(!sources.contains_ip("127.0.0.1".parse().unwrap()));
        stop_tx.send(true).unwrap();
        task.await.unwrap();
    }
}
