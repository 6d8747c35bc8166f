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

/// Whether two addresses (`host:port`, or `http(s)://host:port`) name one socket as far as
/// can be told without DNS (review s21 membership M10): ports equal, and hosts equal once
/// lower-cased, a trailing dot dropped, brackets taken off an IPv6 address, an IP written in
/// its canonical form (an IPv4-mapped IPv6 address as the IPv4 one), and `localhost` taken
/// for both loopback addresses. The scheme is ignored: one socket cannot serve two. Two
/// names of one host that only DNS could match still pass.
pub fn same_socket(a: &str, b: &str) -> bool {
    match (socket_of(a), socket_of(b)) {
        (Some((ha, pa)), Some((hb, pb))) => pa == pb && ha.iter().any(|h| hb.contains(h)),
        _ => a.eq_ignore_ascii_case(b),
    }
}

/// The host's spellings that count as it, and the port.
fn socket_of(addr: &str) -> Option<(Vec<String>, u16)> {
    let lower = addr.to_ascii_lowercase();
    let rest = lower
        .strip_prefix("http://")
        .or_else(|| lower.strip_prefix("https://"))
        .unwrap_or(&lower);
    let (host, port) = rest.rsplit_once(':')?;
    let port: u16 = port.parse().ok()?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let host = host.strip_suffix('.').unwrap_or(host);
    if host == "localhost" {
        return Some((vec!["127.0.0.1".into(), "::1".into()], port));
    }
    let canonical = match host.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V6(v6)) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => v6.to_string(),
        },
        Ok(ip) => ip.to_string(),
        Err(_) => host.to_string(),
    };
    Some((vec![canonical], port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_of_one_socket_are_one() {
        for (a, b) in [
            ("localhost:7100", "127.0.0.1:7100"),
            ("LOCALHOST.:7100", "[::1]:7100"),
            ("Node-1.example.com.:7100", "node-1.example.com:7100"),
            ("http://localhost:6632", "http://127.0.0.1:6632"),
            ("http://10.0.0.4:6632", "HTTPS://10.0.0.4:6632"),
            ("[::ffff:10.0.0.4]:7100", "10.0.0.4:7100"),
            ("[0:0::1]:7100", "[::1]:7100"),
        ] {
            assert!(same_socket(a, b), "{a} {b}");
        }
        for (a, b) in [
            ("127.0.0.1:7100", "127.0.0.1:7101"),
            ("127.0.0.2:7100", "127.0.0.1:7100"),
            ("a.example.com:7100", "b.example.com:7100"),
            ("http://10.0.0.4:6632", "http://10.0.0.5:6632"),
        ] {
            assert!(!same_socket(a, b), "{a} {b}");
        }
    }

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
