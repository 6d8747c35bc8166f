//! One test per layer and per refusal; the environment is always injected.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::load::load_with;
use super::*;

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// A config file in a fresh temp dir (kept alive by the returned guard).
fn file(contents: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("queen.toml");
    let mut f = std::fs::File::create(&path).expect("create");
    f.write_all(contents.as_bytes()).expect("write");
    (dir, path)
}

/// The key an error is about, if it is about one.
trait KeyOf {
    fn key(&self) -> Option<&str>;
}

impl KeyOf for ConfigError {
    fn key(&self) -> Option<&str> {
        match self {
            Self::ReadFile { .. } | Self::Syntax { .. } => None,
            Self::UnknownKey { key, .. }
            | Self::Invalid { key, .. }
            | Self::OutOfRange { key, .. } => Some(key),
        }
    }
}

fn no_implicit() -> &'static Path {
    Path::new("/nonexistent/queen-config-test/queen.toml")
}

fn load_env(args: &ConfigArgs, pairs: &[(&str, &str)]) -> Result<Loaded, ConfigError> {
    load_with(args, env(pairs), no_implicit())
}

fn with_file(path: &Path) -> ConfigArgs {
    ConfigArgs {
        config: Some(path.to_path_buf()),
        ..ConfigArgs::default()
    }
}

#[test]
fn defaults_alone() {
    let loaded = load_env(&ConfigArgs::default(), &[]).expect("defaults load");
    assert_eq!(loaded.config, Config::default());
    assert_eq!(loaded.config.http_addr.to_string(), "0.0.0.0:6632");
    assert_eq!(loaded.config.max_body_bytes, 67_108_864);
    assert_eq!(loaded.config.jwt_secret, None);
    assert!(
        loaded.sources.iter().all(|(_, s)| s == "default"),
        "{:?}",
        loaded.sources
    );
    // Every key has a source (an unset optional key's is "default" too).
    assert_eq!(loaded.sources.len(), super::keys::KEYS.len());
    assert!(loaded.warnings.is_empty());
    assert!(loaded.file.is_none());
    Config::default().validate().expect("defaults are valid");
}

#[test]
fn file_overrides_defaults() {
    let (_d, path) =
        file("data_dir = \"/var/lib/queen\"\nsegment_bytes = 2097152\nlog_json = true\n");
    let loaded = load_env(&with_file(&path), &[]).expect("file loads");
    assert_eq!(loaded.config.data_dir, PathBuf::from("/var/lib/queen"));
    assert_eq!(loaded.config.segment_bytes, 2 * 1024 * 1024);
    assert!(loaded.config.log_json);
    let from_file = format!("file {}", path.display());
    assert_eq!(loaded.source_of("data_dir"), Some(from_file.as_str()));
    assert_eq!(loaded.source_of("http_addr"), Some("default"));
    assert_eq!(loaded.file.as_deref(), Some(path.as_path()));
}

#[test]
fn config_file_from_env_and_implicit_file() {
    let (_d, path) = file("commit_max_batch = 10\n");
    let p = path.to_string_lossy().into_owned();
    let loaded = load_env(&ConfigArgs::default(), &[("QUEEN_CONFIG", &p)]).expect("QUEEN_CONFIG");
    assert_eq!(loaded.config.commit_max_batch, 10);
    assert!(
        loaded.warnings.is_empty(),
        "QUEEN_CONFIG is known: {:?}",
        loaded.warnings
    );

    let implicit = load_with(&ConfigArgs::default(), env(&[]), &path).expect("implicit file");
    assert_eq!(implicit.config.commit_max_batch, 10);
}

#[test]
fn missing_file_is_fine_without_flag_but_fatal_with_it() {
    load_env(&ConfigArgs::default(), &[]).expect("no implicit file is fine");
    let err = load_env(&with_file(Path::new("/nonexistent/q.toml")), &[])
        .expect_err("named file missing");
    assert!(matches!(err, ConfigError::ReadFile { .. }), "{err}");
    let err = load_env(
        &ConfigArgs::default(),
        &[("QUEEN_CONFIG", "/nonexistent/q.toml")],
    )
    .expect_err("QUEEN_CONFIG file missing");
    assert!(matches!(err, ConfigError::ReadFile { .. }), "{err}");
}

#[test]
fn env_overrides_file() {
    let (_d, path) = file("http_addr = \"127.0.0.1:7000\"\nshutdown_grace_secs = 5\n");
    let loaded = load_env(
        &with_file(&path),
        &[
            ("QUEEN_HTTP_ADDR", "127.0.0.1:7001"),
            ("QUEEN_LOG_JSON", "true"),
            ("QUEEN_JWT_SECRET", "s3cret"),
        ],
    )
    .expect("env loads");
    assert_eq!(loaded.config.http_addr.port(), 7001);
    assert_eq!(loaded.config.shutdown_grace_secs, 5);
    assert!(loaded.config.log_json);
    assert_eq!(
        loaded.config.jwt_secret.as_ref().map(Secret::expose),
        Some("s3cret")
    );
    assert_eq!(loaded.source_of("http_addr"), Some("env QUEEN_HTTP_ADDR"));
    assert_eq!(loaded.source_of("jwt_secret"), Some("env QUEEN_JWT_SECRET"));
    assert!(loaded
        .source_of("shutdown_grace_secs")
        .is_some_and(|s| s.starts_with("file ")));
    assert!(
        loaded.warnings.iter().any(|w| w.contains("shorter than")),
        "{:?}",
        loaded.warnings
    );
}

#[test]
fn numeric_env_is_parsed_but_secret_stays_text() {
    let loaded = load_env(
        &ConfigArgs::default(),
        &[
            ("QUEEN_COMMIT_MAX_BYTES", " 131072 "),
            ("QUEEN_JWT_SECRET", "12345678901234567890123456789012345"),
        ],
    )
    .expect("loads");
    assert_eq!(loaded.config.commit_max_bytes, 131_072);
    assert_eq!(
        loaded.config.jwt_secret.as_ref().map(Secret::expose),
        Some("12345678901234567890123456789012345")
    );
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
}

#[test]
fn flags_override_env() {
    let args = ConfigArgs {
        data_dir: Some(PathBuf::from("/flag")),
        http_addr: Some("127.0.0.1:9999".into()),
        max_body_bytes: Some(2048),
        config: None,
        ..ConfigArgs::default()
    };
    let loaded = load_env(
        &args,
        &[
            ("QUEEN_DATA_DIR", "/env"),
            ("QUEEN_HTTP_ADDR", "127.0.0.1:1"),
            ("QUEEN_MAX_BODY_BYTES", "4096"),
        ],
    )
    .expect("flags load");
    assert_eq!(loaded.config.data_dir, PathBuf::from("/flag"));
    assert_eq!(loaded.config.http_addr.port(), 9999);
    assert_eq!(loaded.config.max_body_bytes, 2048);
    assert_eq!(loaded.source_of("data_dir"), Some("flag --data-dir"));
    assert_eq!(
        loaded.source_of("max_body_bytes"),
        Some("flag --max-body-bytes")
    );
}

#[test]
fn log_falls_back_to_rust_log() {
    let loaded = load_env(&ConfigArgs::default(), &[("RUST_LOG", "debug")]).expect("loads");
    assert_eq!(loaded.config.log, "debug");
    assert_eq!(loaded.source_of("log"), Some("env RUST_LOG"));
    let loaded = load_env(
        &ConfigArgs::default(),
        &[("RUST_LOG", "debug"), ("QUEEN_LOG", "warn")],
    )
    .expect("loads");
    assert_eq!(loaded.config.log, "warn");
    assert_eq!(loaded.source_of("log"), Some("env QUEEN_LOG"));
}

#[test]
fn refuses_unknown_file_key() {
    let (_d, path) = file("data_dir = \"/x\"\nmax_body_byte = 2048\n");
    let err = load_env(&with_file(&path), &[]).expect_err("unknown key");
    assert_eq!(err.key(), Some("max_body_byte"));
    let msg = err.to_string();
    assert!(msg.contains("unknown key `max_body_byte`"), "{msg}");
    assert!(msg.contains("did you mean `max_body_bytes`"), "{msg}");
    assert!(msg.contains(&path.display().to_string()), "{msg}");
}

#[test]
fn refuses_nested_table_as_unknown_key() {
    let (_d, path) = file("[server]\nhttp_addr = \"0.0.0.0:1\"\n");
    let err = load_env(&with_file(&path), &[]).expect_err("nested table");
    assert_eq!(err.key(), Some("server"));
}

#[test]
fn refuses_bad_toml() {
    let (_d, path) = file("data_dir = \n");
    let err = load_env(&with_file(&path), &[]).expect_err("syntax");
    assert!(matches!(err, ConfigError::Syntax { .. }), "{err}");
}

#[test]
fn refuses_wrong_type_in_file() {
    let (_d, path) = file("max_body_bytes = \"big\"\n");
    let err = load_env(&with_file(&path), &[]).expect_err("wrong type");
    assert_eq!(err.key(), Some("max_body_bytes"));
    let msg = err.to_string();
    assert!(msg.contains("file "), "{msg}");

    let (_d, path) = file("log_json = 1\n");
    let err = load_env(&with_file(&path), &[]).expect_err("wrong type");
    assert_eq!(err.key(), Some("log_json"));

    let (_d, path) = file("http_addr = \"not an address\"\n");
    let err = load_env(&with_file(&path), &[]).expect_err("bad address");
    assert_eq!(err.key(), Some("http_addr"));

    let (_d, path) = file("segment_bytes = -5\n");
    let err = load_env(&with_file(&path), &[]).expect_err("negative");
    assert_eq!(err.key(), Some("segment_bytes"));
}

#[test]
fn refuses_wrong_type_in_env() {
    let err = load_env(&ConfigArgs::default(), &[("QUEEN_SEGMENT_BYTES", "64MiB")])
        .expect_err("bad number");
    assert_eq!(err.key(), Some("segment_bytes"));
    assert!(err.to_string().contains("env QUEEN_SEGMENT_BYTES"), "{err}");

    let err =
        load_env(&ConfigArgs::default(), &[("QUEEN_LOG_JSON", "maybe")]).expect_err("bad bool");
    assert_eq!(err.key(), Some("log_json"));

    let err = load_env(&ConfigArgs::default(), &[("QUEEN_HTTP_ADDR", "localhost")])
        .expect_err("bad addr");
    assert_eq!(err.key(), Some("http_addr"));
    assert!(err.to_string().contains("env QUEEN_HTTP_ADDR"), "{err}");
}

#[test]
fn refuses_out_of_range_from_each_layer() {
    let (_d, path) = file("commit_max_batch = 0\n");
    let err = load_env(&with_file(&path), &[]).expect_err("file range");
    assert!(
        matches!(&err, ConfigError::OutOfRange { key, value: 0, min: 1, max: 65_536, origin } if key == "commit_max_batch" && origin.starts_with("file ")),
        "{err}"
    );

    let err = load_env(
        &ConfigArgs::default(),
        &[("QUEEN_CHECKPOINT_INTERVAL_SECS", "3601")],
    )
    .expect_err("env range");
    assert!(
        matches!(&err, ConfigError::OutOfRange { key, origin, .. } if key == "checkpoint_interval_secs" && origin == "env QUEEN_CHECKPOINT_INTERVAL_SECS"),
        "{err}"
    );

    let args = ConfigArgs {
        max_body_bytes: Some(1023),
        ..ConfigArgs::default()
    };
    let err = load_env(&args, &[]).expect_err("flag range");
    assert!(
        matches!(&err, ConfigError::OutOfRange { key, origin, .. } if key == "max_body_bytes" && origin == "flag --max-body-bytes"),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "`max_body_bytes` = 1023 from flag --max-body-bytes is out of range 1024..=267386880"
    );
}

#[test]
fn fetch_session_slots_may_be_zero_but_are_bounded() {
    for (value, ok) in [(0, true), (100_000, true), (100_001, false)] {
        let (_d, path) = file(&format!("kafka_fetch_session_slots = {value}\n"));
        let res = load_env(&with_file(&path), &[]);
        assert_eq!(res.is_ok(), ok, "{value}: {:?}", res.err());
    }
}

#[test]
fn dedup_hot_ids_is_derived_at_zero_and_else_at_least_sixteen() {
    // 0 (the default since session 35) derives the bound from the memory budget; a set
    // value below 16 would write an id file per push.
    assert_eq!(Config::default().dedup_hot_ids, 0);
    for (value, ok) in [
        (0, true),
        (1, false),
        (15, false),
        (16, true),
        (1 << 30, true),
        ((1 << 30) + 1, false),
    ] {
        let (_d, path) = file(&format!("dedup_hot_ids = {value}\n"));
        let res = load_env(&with_file(&path), &[]);
        assert_eq!(res.is_ok(), ok, "{value}: {:?}", res.err());
    }
    assert_eq!(
        crate::memory::Memory::dedup_hot_ids(16, 0),
        16,
        "a set value stands"
    );
    assert_eq!(
        crate::memory::Memory::dedup_hot_ids(0, 256 << 20),
        294_337,
        "256 MiB / 16 / 57 B"
    );
}

#[test]
fn every_range_bound_is_enforced() {
    let cases: &[(&str, u64, u64)] = &[
        ("max_body_bytes", 1024, 255 << 20),
        ("max_new_partitions_per_request", 1, 10_000_000),
        ("max_long_polls", 1, 1_000_000),
        ("forward_max_inflight", 1, 100_000),
        ("max_tenants", 1, 4_096),
        ("segment_bytes", 1 << 20, 1 << 30),
        ("commit_max_batch", 1, 65_536),
        ("commit_max_bytes", 64 << 10, 256 << 20),
        ("entry_cache_bytes", 1 << 20, 64 << 30),
        ("checkpoint_interval_secs", 1, 3_600),
        ("retention_interval_ms", 10, 3_600_000),
        ("shutdown_grace_secs", 1, 600),
        ("memory_limit_bytes", 32 << 20, 16 << 40),
        ("kafka_max_request_bytes", 1024, 255 << 20),
        ("kafka_default_partitions", 1, 10_000),
        ("kafka_producer_id_expiration_ms", 1_000, 365 * 86_400_000),
        ("kafka_max_producer_ids", 1, 1_000_000),
        ("kafka_max_aborted_per_partition", 1, 1_000_000),
        ("kafka_max_transactional_ids", 1, 1_000_000),
        ("kafka_max_open_transactions", 1, 100_000),
        ("kafka_max_partitions_per_transaction", 1, 50_000),
        ("kafka_transaction_max_timeout_ms", 1_000, 86_400_000),
        (
            "kafka_transactional_id_expiration_ms",
            1_000,
            365 * 86_400_000,
        ),
    ];
    for (key, min, max) in cases {
        for (value, ok) in [
            (*min, true),
            (*max, true),
            (min - 1, false),
            (max + 1, false),
        ] {
            let (_d, path) = file(&format!("{key} = {value}\n"));
            let res = load_env(&with_file(&path), &[]);
            assert_eq!(res.is_ok(), ok, "{key} = {value}: {:?}", res.err());
        }
    }
}

#[test]
fn a_transaction_end_beyond_one_entry_is_refused_as_configuration() {
    // 100_000 was the key's maximum before review M2: its end could pass the entry limit.
    let (_d, path) = file("kafka_max_partitions_per_transaction = 100000\n");
    let err = load_env(&with_file(&path), &[]).expect_err("above the entry limit's room");
    assert_eq!(err.key(), Some("kafka_max_partitions_per_transaction"));
}

#[test]
fn refuses_empty_secret_and_bad_log_filter() {
    let err =
        load_env(&ConfigArgs::default(), &[("QUEEN_JWT_SECRET", "")]).expect_err("empty secret");
    assert_eq!(err.key(), Some("jwt_secret"));
    let err = load_env(
        &ConfigArgs::default(),
        &[("QUEEN_LOG", "info,queenmq=loud")],
    )
    .expect_err("bad filter");
    assert_eq!(err.key(), Some("log"));
    assert!(err.to_string().contains("env QUEEN_LOG"), "{err}");
}

#[test]
fn unknown_env_warns_and_does_not_fail() {
    let loaded = load_env(
        &ConfigArgs::default(),
        &[
            ("QUEEN_DATADIR", "/x"),
            ("QUEEN_FROBNICATE", "1"),
            ("OTHER_THING", "1"),
        ],
    )
    .expect("unknown env is not fatal");
    assert_eq!(loaded.config.data_dir, Config::default().data_dir);
    assert_eq!(loaded.warnings.len(), 2, "{:?}", loaded.warnings);
    assert!(loaded
        .warnings
        .iter()
        .any(|w| w.contains("QUEEN_DATADIR") && w.contains("did you mean QUEEN_DATA_DIR")));
    assert!(loaded
        .warnings
        .iter()
        .any(|w| w.contains("QUEEN_FROBNICATE")));
    assert!(!loaded.warnings.iter().any(|w| w.contains("OTHER_THING")));
}

#[test]
fn kubernetes_service_links_are_skipped_silently() {
    let injected = [
        ("QUEEN_SERVICE_HOST", "10.96.0.12"),
        ("QUEEN_SERVICE_PORT", "6632"),
        ("QUEEN_SERVICE_PORT_HTTP", "6632"),
        ("QUEEN_PORT", "tcp://10.96.0.12:6632"),
        ("QUEEN_PORT_6632_TCP", "tcp://10.96.0.12:6632"),
        ("QUEEN_PORT_6632_TCP_PROTO", "tcp"),
        ("QUEEN_PORT_6632_TCP_PORT", "6632"),
        ("QUEEN_PORT_6632_TCP_ADDR", "10.96.0.12"),
        ("QUEEN_HEADLESS_SERVICE_HOST", "10.96.0.13"),
        ("QUEEN_HEADLESS_PORT_6632_TCP", "tcp://10.96.0.13:6632"),
    ];
    let loaded = load_env(&ConfigArgs::default(), &injected).expect("k8s env is fine");
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);

    // The same names with values Kubernetes would never inject are typos.
    let loaded = load_env(&ConfigArgs::default(), &[("QUEEN_PORT", "7000")]).expect("not fatal");
    assert_eq!(loaded.warnings.len(), 1, "{:?}", loaded.warnings);
}

#[test]
fn render_shows_every_key_origin_and_hides_secret() {
    let (_d, path) = file("segment_bytes = 2097152\n");
    let args = ConfigArgs {
        http_addr: Some("127.0.0.1:7777".into()),
        ..with_file(&path)
    };
    let loaded = load_env(
        &args,
        &[
            ("QUEEN_JWT_SECRET", "do-not-print-this-value-anywhere-ok"),
            ("QUEEN_BOGUS", "x"),
        ],
    )
    .expect("loads");
    let text = render(&loaded);
    for spec in super::keys::KEYS {
        assert!(
            text.contains(spec.name),
            "{} missing from\n{text}",
            spec.name
        );
    }
    assert!(!text.contains("do-not-print"), "{text}");
    assert!(text.contains("jwt_secret"), "{text}");
    assert!(text.contains("\"<set>\""), "{text}");
    assert!(text.contains("# env QUEEN_JWT_SECRET"), "{text}");
    assert!(text.contains("http_addr"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("http_addr = \"127.0.0.1:7777\"")
                && l.ends_with("# flag --http-addr")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("segment_bytes = 2097152") && l.contains("(2 MiB)")),
        "{text}"
    );
    assert!(
        text.contains("# warning: unknown environment variable QUEEN_BOGUS"),
        "{text}"
    );
    assert!(
        !format!("{loaded:?}").contains("do-not-print"),
        "Debug leaks the secret"
    );

    let unset = render(&load_env(&ConfigArgs::default(), &[]).expect("loads"));
    assert!(
        unset.contains("# jwt_secret unset: authentication off"),
        "{unset}"
    );
}

#[test]
fn door_keys_from_env_and_metrics_auth_default() {
    let plain = load_env(&ConfigArgs::default(), &[]).expect("loads").config;
    assert!(!plain.metrics_need_token(), "no secret: metrics stay open");
    let secret = [(
        "QUEEN_JWT_SECRET",
        "a-secret-long-enough-for-the-warning-0123",
    )];
    let authed = load_env(&ConfigArgs::default(), &secret)
        .expect("loads")
        .config;
    assert!(
        authed.metrics_need_token(),
        "auth on: metrics need a token by default"
    );
    let open = load_env(
        &ConfigArgs::default(),
        &[
            secret[0],
            ("QUEEN_METRICS_REQUIRE_AUTH", "false"),
            ("QUEEN_JWT_AUDIENCE", "queen-prod"),
            ("QUEEN_HTTP_HEADER_TIMEOUT_MS", "2500"),
            ("QUEEN_MAX_PUSH_ITEMS", "7"),
        ],
    )
    .expect("loads")
    .config;
    assert!(!open.metrics_need_token());
    assert_eq!(open.jwt_audience.as_deref(), Some("queen-prod"));
    assert_eq!(open.http_header_timeout_ms, 2_500);
    assert_eq!(open.max_push_items, 7);
    let err = load_env(
        &ConfigArgs::default(),
        &[("QUEEN_HTTP_MAX_CONNECTIONS", "0")],
    );
    assert!(err.is_err(), "a zero connection limit is refused");
}

#[test]
fn the_body_limit_stays_below_the_log_record_limit() {
    let record = u64::from(queenmq_storage::LogOptions::default().max_record_bytes);
    assert!(super::keys::MAX_BODY_BYTES < record);
    let err = load_env(
        &ConfigArgs::default(),
        &[("QUEEN_MAX_BODY_BYTES", "536870912")],
    )
    .expect_err("a body limit above the record limit");
    assert_eq!(err.key(), Some("max_body_bytes"));
}

#[test]
fn accept_data_loss_is_off_by_default_and_set_by_env_or_flag() {
    let loaded = load_env(&ConfigArgs::default(), &[]).expect("loads");
    assert!(!loaded.config.accept_data_loss);
    let loaded = load_env(
        &ConfigArgs::default(),
        &[("QUEEN_ACCEPT_DATA_LOSS", "true")],
    )
    .expect("env loads");
    assert!(loaded.config.accept_data_loss);
    let args = ConfigArgs {
        accept_data_loss: true,
        ..ConfigArgs::default()
    };
    let loaded = load_env(&args, &[]).expect("flag loads");
    assert!(loaded.config.accept_data_loss);
    assert_eq!(
        loaded.source_of("accept_data_loss"),
        Some("flag --accept-data-loss")
    );
}

#[test]
fn memory_limit_zero_derives_and_a_tiny_one_is_refused() {
    let (_d, path) = file("memory_limit_bytes = 0\n");
    assert!(load_env(&with_file(&path), &[]).is_ok());
    let (_d, path) = file("memory_limit_bytes = 1\n");
    let err = load_env(&with_file(&path), &[]).unwrap_err();
    assert!(err.to_string().contains("memory_limit_bytes"), "{err}");
    let loaded = load_env(
        &ConfigArgs::default(),
        &[("QUEEN_MEMORY_LIMIT_BYTES", "268435456")],
    )
    .expect("loads");
    assert_eq!(loaded.config.memory_limit_bytes, 256 << 20);
}

#[test]
fn kafka_keys_load_from_env_and_flag_and_advertise_a_reachable_address() {
    let loaded = load_env(&ConfigArgs::default(), &[]).expect("defaults load");
    let c = &loaded.config;
    assert!(c.kafka_enabled);
    assert_eq!(c.kafka_addr.to_string(), "0.0.0.0:9092");
    assert_eq!(c.kafka_max_request_bytes, 100 << 20);
    assert_eq!(c.kafka_default_partitions, 1);
    assert_eq!(c.kafka_advertised(9092), ("127.0.0.1".to_owned(), 9092));

    let loaded = load_env(
        &ConfigArgs::default(),
        &[
            ("QUEEN_KAFKA_ADDR", "127.0.0.2:0"),
            ("QUEEN_KAFKA_ENABLED", "false"),
            ("QUEEN_KAFKA_DEFAULT_PARTITIONS", "8"),
        ],
    )
    .expect("env loads");
    let c = &loaded.config;
    assert!(!c.kafka_enabled);
    assert_eq!(c.kafka_default_partitions, 8);
    assert_eq!(
        c.kafka_advertised(40_000),
        ("127.0.0.2".to_owned(), 40_000),
        "port 0 advertises the bound port"
    );

    let args = ConfigArgs {
        kafka_addr: Some("127.0.0.1:19092".into()),
        ..ConfigArgs::default()
    };
    let loaded = load_env(
        &args,
        &[("QUEEN_KAFKA_ADVERTISED_ADDR", "kafka.example:29092")],
    )
    .expect("flag loads");
    assert_eq!(loaded.config.kafka_addr.port(), 19092);
    assert_eq!(
        loaded.config.kafka_advertised(19092),
        ("kafka.example".to_owned(), 29092)
    );
}

#[test]
fn a_kafka_advertised_addr_without_a_port_is_refused() {
    for bad in ["kafka.example", "kafka.example:0", ":9092", "host:x"] {
        let err = load_env(
            &ConfigArgs::default(),
            &[("QUEEN_KAFKA_ADVERTISED_ADDR", bad)],
        )
        .expect_err(bad);
        assert_eq!(err.key(), Some("kafka_advertised_addr"), "{bad}");
    }
    let err = load_env(&ConfigArgs::default(), &[("QUEEN_KAFKA_ADDR", "nope")])
        .expect_err("not an address");
    assert_eq!(err.key(), Some("kafka_addr"));
}

#[test]
fn reclaim_is_on_by_default_and_turned_off_by_env() {
    let loaded = load_env(&ConfigArgs::default(), &[]).expect("defaults load");
    assert!(loaded.config.reclaim_enabled);
    let loaded = load_env(
        &ConfigArgs::default(),
        &[("QUEEN_RECLAIM_ENABLED", "false")],
    )
    .expect("env loads");
    assert!(!loaded.config.reclaim_enabled);
}

#[test]
fn compaction_is_on_by_default_and_turned_off_alone_by_env() {
    let loaded = load_env(&ConfigArgs::default(), &[]).expect("defaults load");
    assert!(loaded.config.compaction_enabled);
    let loaded = load_env(
        &ConfigArgs::default(),
        &[("QUEEN_COMPACTION_ENABLED", "false")],
    )
    .expect("env loads");
    assert!(!loaded.config.compaction_enabled);
    assert!(loaded.config.reclaim_enabled, "reclamation stays on");
}

#[test]
fn a_metrics_ring_past_its_share_of_the_budget_is_refused() {
    let sample = crate::node_metrics::SAMPLE_BYTES;
    // 10 % of a 32 MiB budget.
    let fits = (32u64 << 20) / 10 / sample;
    let (_d, path) = file(&format!(
        "memory_limit_bytes = {}\nmetrics_history_samples = {fits}\n",
        32u64 << 20
    ));
    assert!(load_env(&with_file(&path), &[]).is_ok());
    let (_d, path) = file(&format!(
        "memory_limit_bytes = {}\nmetrics_history_samples = {}\n",
        32u64 << 20,
        fits + 1
    ));
    let err = load_env(&with_file(&path), &[]).unwrap_err();
    assert!(err.to_string().contains("metrics_history_samples"), "{err}");
    // The default ring fits the smallest budget.
    let (_d, path) = file(&format!("memory_limit_bytes = {}\n", 32u64 << 20));
    assert!(load_env(&with_file(&path), &[]).is_ok());
}

const CLUSTER_TOKEN: &str = "0123456789abcdef0123456789abcdef";

#[test]
fn no_cluster_key_is_the_single_node_broker() {
    let loaded = load_env(&ConfigArgs::default(), &[]).expect("defaults load");
    assert_eq!(loaded.config.cluster().expect("valid"), None);
    assert_eq!(loaded.config.node_id, 1);
}

#[test]
fn a_cluster_loads_from_file_and_env_with_the_token_from_env() {
    let (_d, path) = file(
        "node_id = 2\ncluster_addr = \"127.0.0.1:7100\"\npeers = \"1=10.0.0.1:7100, 2=127.0.0.1:7100,3=queen-2.queen:7100\"\n",
    );
    let loaded = load_env(&with_file(&path), &[("QUEEN_CLUSTER_TOKEN", CLUSTER_TOKEN)])
        .expect("a cluster loads");
    let c = loaded.config.cluster().expect("valid").expect("a cluster");
    assert_eq!(c.node_id, 2);
    assert_eq!(c.addr.to_string(), "127.0.0.1:7100");
    assert_eq!(
        c.peers.into_iter().collect::<Vec<_>>(),
        vec![
            (1, "10.0.0.1:7100".to_string()),
            (2, "127.0.0.1:7100".to_string()),
            (3, "queen-2.queen:7100".to_string()),
        ]
    );
    assert_eq!(
        loaded.source_of("cluster_token"),
        Some("env QUEEN_CLUSTER_TOKEN")
    );
    assert!(!render(&loaded).contains(CLUSTER_TOKEN));
}

#[test]
fn cluster_refusals_name_their_key() {
    let full = |token: &str, node: &str, peers: &str| {
        vec![
            ("QUEEN_CLUSTER_TOKEN", token.to_string()),
            ("QUEEN_CLUSTER_ADDR", "127.0.0.1:7100".to_string()),
            ("QUEEN_NODE_ID", node.to_string()),
            ("QUEEN_PEERS", peers.to_string()),
        ]
    };
    let cases: Vec<(Vec<(&str, String)>, &str)> = vec![
        (
            full(&CLUSTER_TOKEN[..31], "1", "1=a:1,2=b:1"),
            "cluster_token",
        ),
        (full(CLUSTER_TOKEN, "1", "1=a:1,1=b:1"), "peers"),
        // Review s14 F8: a token too long for a Hello.
        (full(&"t".repeat(1009), "1", "1=a:7100"), "cluster_token"),
        (full(CLUSTER_TOKEN, "3", "1=a:1,2=b:1"), "peers"),
        (full(CLUSTER_TOKEN, "1", "1=a:1,x=b:1"), "peers"),
        (full(CLUSTER_TOKEN, "1", "1=a:1,0=b:1"), "peers"),
        (full(CLUSTER_TOKEN, "1", "1=a:1,2=b"), "peers"),
        (full(CLUSTER_TOKEN, "1", "1=a:1,2"), "peers"),
        (full(CLUSTER_TOKEN, "0", "1=a:1"), "node_id"),
        // Review s14 F1: two ids at one address, and a listener port its peers do not use.
        (full(CLUSTER_TOKEN, "1", "1=a:7100,2=a:7100"), "peers"),
        (full(CLUSTER_TOKEN, "1", "1=a:7100,2=A:7100"), "peers"),
        // Review s21 membership M10: other spellings of one socket.
        (
            full(CLUSTER_TOKEN, "1", "1=localhost:7100,2=127.0.0.1.:7100"),
            "peers",
        ),
        (
            full(CLUSTER_TOKEN, "1", "1=a:7101,2=b:7100"),
            "cluster_addr",
        ),
        (vec![("QUEEN_PEERS", "1=a:1".to_string())], "cluster_token"),
        (
            vec![
                ("QUEEN_PEERS", "1=a:1".to_string()),
                ("QUEEN_CLUSTER_TOKEN", CLUSTER_TOKEN.to_string()),
            ],
            "cluster_addr",
        ),
        (
            vec![
                ("QUEEN_CLUSTER_ADDR", "127.0.0.1:7100".to_string()),
                ("QUEEN_CLUSTER_TOKEN", CLUSTER_TOKEN.to_string()),
            ],
            "peers",
        ),
    ];
    for (pairs, key) in cases {
        let refs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let err = load_env(&ConfigArgs::default(), &refs).expect_err(key);
        assert_eq!(err.key(), Some(key), "{refs:?}: {err}");
        assert!(!err.to_string().contains(CLUSTER_TOKEN), "{err}");
    }
    // The control: the same keys, right.
    let pairs = full(CLUSTER_TOKEN, "2", "1=a:7100,2=b:7100");
    let refs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let loaded = load_env(&ConfigArgs::default(), &refs).expect("valid");
    assert!(loaded.config.cluster().expect("valid").is_some());
}

/// The cluster the env `pairs` configure; they must be valid.
fn cluster_of(pairs: &[(&str, String)]) -> cluster::Cluster {
    let refs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
    load_env(&ConfigArgs::default(), &refs)
        .expect("valid")
        .config
        .cluster()
        .expect("valid")
        .expect("a cluster")
}

/// Asserts the env `pairs` are refused, naming `key`.
fn assert_refused(pairs: &[(&str, String)], key: &str, case: &str) {
    let refs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let err = load_env(&ConfigArgs::default(), &refs).expect_err(case);
    assert_eq!(err.key(), Some(key), "{case}: {err}");
}

#[test]
fn peer_http_is_range_checked() {
    let with = |http: &str| {
        vec![
            ("QUEEN_CLUSTER_TOKEN", CLUSTER_TOKEN.to_string()),
            ("QUEEN_CLUSTER_ADDR", "127.0.0.1:7100".to_string()),
            ("QUEEN_NODE_ID", "1".to_string()),
            ("QUEEN_PEERS", "1=a:7100,2=b:7100".to_string()),
            ("QUEEN_PEER_HTTP", http.to_string()),
        ]
    };
    for bad in [
        "0=http://c:6632",
        "1=ftp://a:6632",
        "1=http://a",
        "1=http://a:6632/x",
        "1=http://a:6632,1=http://b:6632",
        "x=http://a:6632",
        "1",
    ] {
        assert_refused(&with(bad), "peer_http", bad);
    }
    let c = cluster_of(&with("1=http://127.0.0.1:6632, 2=https://b:443"));
    assert_eq!(c.peer_http[&1], "http://127.0.0.1:6632");
    assert_eq!(c.peer_http[&2], "https://b:443");
    // Review s21 membership M8: a node joining at run time names itself alone in `peers` and
    // the first boot's members here.
    let mut pairs = with("1=http://a:6632,2=http://b:6632,3=http://c:6632");
    pairs[3].1 = "1=a:7100".to_string();
    let refs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let c = load_env(&ConfigArgs::default(), &refs)
        .expect("valid")
        .config
        .cluster()
        .expect("ids outside peers are accepted")
        .expect("a cluster");
    assert_eq!(c.peer_http[&3], "http://c:6632");
}

#[test]
fn peer_kafka_is_range_checked() {
    let with = |kafka: &str| {
        vec![
            ("QUEEN_CLUSTER_TOKEN", CLUSTER_TOKEN.to_string()),
            ("QUEEN_CLUSTER_ADDR", "127.0.0.1:7100".to_string()),
            ("QUEEN_NODE_ID", "1".to_string()),
            (
                "QUEEN_PEERS",
                "1=a:7100,2=b:7100,3000000000=c:7100".to_string(),
            ),
            ("QUEEN_PEER_KAFKA", kafka.to_string()),
        ]
    };
    for bad in [
        "0=c:9092",
        "1=localhost:9092,2=127.0.0.1:9092",
        "1=a",
        "1=a:0",
        "1=http://a:9092",
        "1=a:9092,1=b:9092",
        "1=a:9092,2=A:9092",
        "x=a:9092",
        "3000000000=c:9092",
        "1",
    ] {
        assert_refused(&with(bad), "peer_kafka", bad);
    }
    // An id outside peers is accepted, as in peer_http (a node joining at run time).
    let c = cluster_of(&with("1=127.0.0.1:9092, 2=b:19092, 4=d:9092"));
    assert_eq!(c.peer_kafka[&1], "127.0.0.1:9092");
    assert_eq!(c.peer_kafka[&2], "b:19092");
    assert!(!c.peer_kafka.contains_key(&3_000_000_000));
}

/// Review s16 B5: a cluster's heartbeat and election timeout are keys, with defaults wider
/// than a single node's 100 ms (the heartbeat is openraft's whole append timeout, a
/// follower's fsync included), and an election timeout too close to the heartbeat is refused.
#[test]
fn cluster_timing_has_wide_defaults_and_a_checked_ratio() {
    let with = |extra: &[(&'static str, &str)]| {
        let mut v = vec![
            ("QUEEN_CLUSTER_TOKEN", CLUSTER_TOKEN.to_string()),
            ("QUEEN_CLUSTER_ADDR", "127.0.0.1:7100".to_string()),
            ("QUEEN_NODE_ID", "1".to_string()),
            ("QUEEN_PEERS", "1=a:7100,2=b:7100".to_string()),
        ];
        v.extend(extra.iter().map(|(k, val)| (*k, val.to_string())));
        v
    };
    let cluster = |pairs: Vec<(&'static str, String)>| {
        let refs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
        load_env(&ConfigArgs::default(), &refs).map(|l| {
            l.config
                .cluster()
                .expect("checked at load")
                .expect("a cluster")
        })
    };
    let t = cluster(with(&[])).unwrap().timing;
    assert_eq!((t.heartbeat_ms, t.election_timeout_ms), (500, 5_000));
    let t = cluster(with(&[
        ("QUEEN_CLUSTER_HEARTBEAT_MS", "300"),
        ("QUEEN_CLUSTER_ELECTION_TIMEOUT_MS", "1500"),
    ]))
    .unwrap()
    .timing;
    assert_eq!((t.heartbeat_ms, t.election_timeout_ms), (300, 1500));
    // Review s17 lead H2: the lease keeps three heartbeats at the least ratio.
    assert_eq!(t.lease_ms(), 3 * t.heartbeat_ms);
    let err = cluster(with(&[
        ("QUEEN_CLUSTER_HEARTBEAT_MS", "300"),
        ("QUEEN_CLUSTER_ELECTION_TIMEOUT_MS", "1499"),
    ]))
    .expect_err("under five heartbeats");
    assert_eq!(err.key(), Some("cluster_election_timeout_ms"), "{err}");
    let err = cluster(with(&[("QUEEN_CLUSTER_HEARTBEAT_MS", "49")])).expect_err("range");
    assert_eq!(err.key(), Some("cluster_heartbeat_ms"), "{err}");
    // Review s17 C4: 4 x the election timeout (the write limit) stays under the 30 s answer
    // bound.
    let err = cluster(with(&[("QUEEN_CLUSTER_ELECTION_TIMEOUT_MS", "7001")])).expect_err("range");
    assert_eq!(err.key(), Some("cluster_election_timeout_ms"), "{err}");
    // Review s17 lead L1: the heartbeat's range is what the ratio lets through.
    let err = cluster(with(&[
        ("QUEEN_CLUSTER_HEARTBEAT_MS", "1401"),
        ("QUEEN_CLUSTER_ELECTION_TIMEOUT_MS", "7000"),
    ]))
    .expect_err("range");
    assert_eq!(err.key(), Some("cluster_heartbeat_ms"), "{err}");
}

/// Review s17 lead L1: for every timing a configuration accepts, the write limit, the one
/// heartbeat its check may come late and a second for the request's wait before its cycle
/// stay under the bus's answer bound, so a write that does not commit is given up by the
/// leader before the bus answers it "a stalled disk?" (4 x 7000 ms did not, at 1400 ms).
#[test]
fn every_accepted_timing_gives_a_write_up_before_the_answer_bound() {
    let answer = crate::engine::BusWaits::default().answer;
    let mut accepted = 0;
    let grid = |lo: u64, hi: u64| (lo..=hi + 100).step_by(50).chain([hi, hi + 1]);
    for hb in grid(50, 1_400) {
        for eto in grid(150, 7_000) {
            let (hb_s, eto_s) = (hb.to_string(), eto.to_string());
            let env = [
                ("QUEEN_CLUSTER_TOKEN", CLUSTER_TOKEN),
                ("QUEEN_CLUSTER_ADDR", "127.0.0.1:7100"),
                ("QUEEN_NODE_ID", "1"),
                ("QUEEN_PEERS", "1=a:7100,2=b:7100"),
                ("QUEEN_CLUSTER_HEARTBEAT_MS", hb_s.as_str()),
                ("QUEEN_CLUSTER_ELECTION_TIMEOUT_MS", eto_s.as_str()),
            ];
            let Ok(Ok(Some(c))) =
                load_env(&ConfigArgs::default(), &env).map(|l| l.config.cluster())
            else {
                continue;
            };
            accepted += 1;
            let t = c.timing;
            // The check comes up to a heartbeat late, and the request waited for the cycle
            // before it (a second of margin) before its proposal started.
            let late = std::time::Duration::from_millis(t.heartbeat_ms + 1_000);
            assert!(
                t.write_limit() + late < answer,
                "heartbeat {hb} ms, election timeout {eto} ms"
            );
            assert!(t.lease_ms() >= 3 * t.heartbeat_ms, "{hb}, {eto}");
        }
    }
    assert!(accepted > 1000, "{accepted} timings accepted");
}

#[test]
fn cluster_tenant_groups_is_on_by_default_and_runs_with_snapshot_catch_up() {
    let with = |extra: &[(&'static str, &str)]| {
        let mut v = vec![
            ("QUEEN_CLUSTER_TOKEN", CLUSTER_TOKEN.to_string()),
            ("QUEEN_CLUSTER_ADDR", "127.0.0.1:7100".to_string()),
            ("QUEEN_NODE_ID", "1".to_string()),
            ("QUEEN_PEERS", "1=a:7100,2=b:7100".to_string()),
        ];
        v.extend(extra.iter().map(|(k, val)| (*k, val.to_string())));
        v
    };
    // On by default since session 33 (review s28 M-3's bound built: the joining horizon is
    // a commit read from `default`'s leader).
    assert!(cluster_of(&with(&[])).tenant_groups);
    assert!(!cluster_of(&with(&[("QUEEN_CLUSTER_TENANT_GROUPS", "false")])).tenant_groups);
    // Snapshot catch-up is on by default (session 28).
    assert!(cluster_of(&with(&[])).snapshot_keep.is_some());
    let tenants_only = [
        ("QUEEN_CLUSTER_TENANT_GROUPS", "true"),
        ("QUEEN_CLUSTER_SNAPSHOT_CATCH_UP", "false"),
    ];
    assert!(cluster_of(&with(&tenants_only)).tenant_groups);
    // Together with snapshot catch-up, on by default: a snapshot of `default` carries the
    // declarations (checkpoint section 9), so a node caught up by one still hosts them.
    let both = with(&[("QUEEN_CLUSTER_TENANT_GROUPS", "true")]);
    let c = cluster_of(&both);
    assert!(c.tenant_groups && c.snapshot_keep.is_some());
    assert_refused(
        &with(&[("QUEEN_CLUSTER_TENANT_GROUPS", "yes please")]),
        "cluster_tenant_groups",
        "not a bool",
    );
    // A single node ignores it, as it does every cluster tuning key.
    let refs = [("QUEEN_CLUSTER_TENANT_GROUPS", "true")];
    let loaded = load_env(&ConfigArgs::default(), &refs).expect("valid");
    assert!(loaded.config.cluster().expect("valid").is_none());
}
