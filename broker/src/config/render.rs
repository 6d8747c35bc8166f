//! `queen config print`: every key, its effective value and its origin.

use super::keys::KEYS;
use super::load::Loaded;

/// The effective configuration as TOML-like text, one key a line with its
/// origin as a comment; the secret shows as `"<set>"`, never its value.
pub fn render(loaded: &Loaded) -> String {
    let mut rows = Vec::with_capacity(KEYS.len());
    for spec in KEYS {
        let (value, human) = loaded.config.display_value(spec.name);
        let origin = loaded.source_of(spec.name).unwrap_or("default");
        let comment = match human {
            Some(h) => format!("{origin} ({h})"),
            None => origin.to_owned(),
        };
        let left = match value {
            Some(v) => format!("{} = {v}", spec.name),
            None => format!("# {} unset: {}", spec.name, unset_meaning(spec.name)),
        };
        rows.push((left, comment));
    }
    let width = rows.iter().map(|(l, _)| l.len()).max().unwrap_or(0);
    let mut out =
        String::from("# effective configuration of queen; each line: key = value  # origin\n");
    if let Some(file) = &loaded.file {
        out.push_str(&format!("# config file: {}\n", file.display()));
    }
    for (left, comment) in rows {
        out.push_str(&format!("{left:<width$}  # {comment}\n"));
    }
    for w in &loaded.warnings {
        out.push_str(&format!("# warning: {w}\n"));
    }
    out
}

/// What leaving an optional key unset means, for the commented line `config print` shows.
fn unset_meaning(name: &str) -> &'static str {
    match name {
        "jwt_secret" => "authentication off",
        "encryption_key" => "no key: queues with encryptionEnabled are refused",
        "jwt_audience" => "tokens with any audience accepted",
        "metrics_require_auth" => "metrics need a token exactly when jwt_secret is set",
        "kafka_advertised_addr" => "kafka_addr, with 127.0.0.1 for 0.0.0.0",
        "tls_cert_file" | "tls_key_file" => "plain HTTP",
        "kafka_tls_cert_file" | "kafka_tls_key_file" => "plain TCP on the Kafka port",
        "kafka_sasl_users_file" => "no SASL: the Kafka port runs only with authentication off",
        "cluster_token" | "cluster_addr" | "peers" => "a single node",
        "peer_http" => "no leaderUrl in a follower's not_leader answer",
        "peer_kafka" => "Kafka Metadata lists only this node and members added with kafkaAddr",
        _ => "default",
    }
}
