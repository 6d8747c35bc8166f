//! What a membership's `BasicNode.addr` holds: the member's cluster (Raft) address, and for a
//! member added at run time its HTTP address and, when given, its Kafka address too, as
//! `host:port;http://host:port[;host:port]`. The membership is openraft's own replicated
//! entry, so every node (a node that joins later and a node restarted too) learns the
//! addresses from the log, with no row of the engine's state and no `peer_http` or
//! `peer_kafka` edit on the other nodes. Members named by `peers` at the first boot carry the
//! cluster address alone; their other addresses come from `peer_http` and `peer_kafka`.
//!
//! Older entries hold one or two parts and read as before. A node of a version before the
//! Kafka part would read a three-part addr's HTTP part as `http://..;host:port`: add members
//! with a Kafka address only once every node runs a version that knows it (docs/cluster.md).

/// Separates the addresses; neither `host:port` nor an `http://host:port` URL holds it.
const SEP: char = ';';

/// The `addr` of a member at `cluster` (`host:port`) answering HTTP at `http` and Kafka at
/// `kafka` (`host:port`), each if given.
pub fn compose(cluster: &str, http: Option<&str>, kafka: Option<&str>) -> String {
    match (http, kafka) {
        (None, None) => cluster.to_string(),
        (Some(url), None) => format!("{cluster}{SEP}{url}"),
        (http, Some(k)) => format!("{cluster}{SEP}{}{SEP}{k}", http.unwrap_or("")),
    }
}

/// The cluster address: what the network connects to.
pub fn cluster_part(addr: &str) -> &str {
    addr.split(SEP).next().unwrap_or(addr)
}

/// The HTTP address, when the member was added with one.
pub fn http_part(addr: &str) -> Option<&str> {
    addr.split(SEP).nth(1).filter(|h| !h.is_empty())
}

/// The Kafka advertised address (`host:port`), when the member was added with one.
pub fn kafka_part(addr: &str) -> Option<&str> {
    addr.split(SEP).nth(2).filter(|k| !k.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_address_travels_in_one_field() {
        let a = compose("10.0.0.4:7100", Some("http://10.0.0.4:6632"), None);
        assert_eq!(cluster_part(&a), "10.0.0.4:7100");
        assert_eq!(http_part(&a), Some("http://10.0.0.4:6632"));
        assert_eq!(kafka_part(&a), None);
        // A member from `peers`: the cluster address alone, as before.
        let p = compose("10.0.0.1:7100", None, None);
        assert_eq!((cluster_part(&p), http_part(&p)), ("10.0.0.1:7100", None));
        assert_eq!(kafka_part(&p), None);
        let k = compose(
            "10.0.0.5:7100",
            Some("http://10.0.0.5:6632"),
            Some("10.0.0.5:9092"),
        );
        assert_eq!(cluster_part(&k), "10.0.0.5:7100");
        assert_eq!(http_part(&k), Some("http://10.0.0.5:6632"));
        assert_eq!(kafka_part(&k), Some("10.0.0.5:9092"));
        let only_kafka = compose("10.0.0.6:7100", None, Some("10.0.0.6:9092"));
        assert_eq!(http_part(&only_kafka), None);
        assert_eq!(kafka_part(&only_kafka), Some("10.0.0.6:9092"));
    }

    /// Addrs written by earlier versions (one or two parts) read as they did.
    #[test]
    fn older_addrs_read_as_before() {
        assert_eq!(http_part("h:7100;http://h:6632"), Some("http://h:6632"));
        assert_eq!(kafka_part("h:7100;http://h:6632"), None);
        assert_eq!(cluster_part("h:7100"), "h:7100");
        assert_eq!((http_part("h:7100"), kafka_part("h:7100")), (None, None));
    }
}
