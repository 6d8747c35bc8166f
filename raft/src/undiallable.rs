//! The address a member is given when no address of it is known and none ever will be (a
//! voter of a tenant's declaration removed from the cluster since: docs/cluster.md
//! "Membership with tenant groups"). It is a name under the reserved `.invalid` top-level
//! domain (RFC 6761), and the network never dials it: going through the resolver would cost
//! a blocking lookup per reconnect, search domains first (`ndots`), and a wildcard record or
//! an NXDOMAIN-hijacking resolver would answer it with a host that then gets Raft traffic
//! (review s31 member L5).

/// The undiallable cluster address of member `id`.
pub fn address(id: u64) -> String {
    format!("removed-voter-{id}.invalid:1")
}

/// Whether `cluster_addr` (`host:port`) names a host under `.invalid`, with or without the
/// trailing dot and in any case: such an address is refused without a lookup or a dial.
pub fn is_undiallable(cluster_addr: &str) -> bool {
    let host = cluster_addr
        .rsplit_once(':')
        .map_or(cluster_addr, |(h, _)| h);
    let host = host.strip_suffix('.').unwrap_or(host);
    let tld = host.rsplit('.').next().unwrap_or(host);
    host.contains('.') && tld.eq_ignore_ascii_case("invalid")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_names_under_invalid_are_undiallable() {
        assert!(is_undiallable(&address(3)));
        assert!(is_undiallable(&address(u64::MAX)));
        assert!(is_undiallable("removed-voter-3.INVALID.:1"));
        assert!(is_undiallable("x.invalid"));
        for dialled in [
            "127.0.0.1:7100",
            "invalid:7100",
            "node.invalid-domain.com:7100",
            "invalid.example.com:7100",
            "[::1]:7100",
            "",
            ":",
        ] {
            assert!(!is_undiallable(dialled), "{dialled}");
        }
    }
}
