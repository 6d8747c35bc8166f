//! What a membership's `BasicNode.addr` holds: the member's cluster (Raft) address, and for a
//! member added at run time its HTTP address too, as `host:port;http://host:port`. The
//! membership is openraft's own replicated entry, so every node (a node that joins later and a
//! node restarted too) learns both addresses from the log, with no row of the engine's state
//! and no `peer_http` edit on the other nodes. Members named by `peers` at the first boot carry
//! the cluster address alone; their HTTP address comes from `peer_http`.

/// Separates the two addresses; neither `host:port` nor an `http://host:port` URL holds it.
const SEP: char = ';';

/// The `addr` of a member at `cluster` (`host:port`) answering HTTP at `http`, if given.
pub fn compose(cluster: &str, http: Option<&str>) -> String {
    match http {
        Some(url) => format!("{cluster}{SEP}{url}"),
        None => cluster.to_string(),
    }
}

/// The cluster address: what the network connects to.
pub fn cluster_part(addr: &str) -> &str {
    addr.split_once(SEP).map_or(addr, |(c, _)| c)
}

/// The HTTP address, when the member was added with one.
pub fn http_part(addr: &str) -> Option<&str> {
    addr.split_once(SEP)
        .map(|(_, h)| h)
        .filter(|h| !h.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_addresses_travel_in_one_field() {
        let a = compose("10.0.0.4:7100", Some("http://10.0.0.4:6632"));
        assert_eq!(cluster_part(&a), "10.0.0.4:7100");
        assert_eq!(http_part(&a), Some("http://10.0.0.4:6632"));
        // A member from `peers`: the cluster address alone, as before.
        let p = compose("10.0.0.1:7100", None);
        assert_eq!((cluster_part(&p), http_part(&p)), ("10.0.0.1:7100", None));
    }
}
