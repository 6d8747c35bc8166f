//! Start-up and shutdown of a node: lock the data dir, size the memory budget, start the
//! groups (crate::group::registry: the `default` one and every tenant's found on disk, each
//! with its storage, checkpoint, Raft replay and engine) and the HTTP door; on SIGTERM/SIGINT
//! stop accepting, drain, checkpoint every group, exit.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::config::Config;
use crate::engine::{EngineBus, EngineConfig};
use crate::group::{Registry, RegistryOptions};
use crate::scrape::Scrape;
use anyhow::{anyhow, Context};
use fs4::fs_std::FileExt;
use queenmq_native_api::ApiOptions;

/// Holds the data-dir lock for the life of the process.
pub struct DirLock(#[allow(dead_code)] File);

/// Creates the data dir durably (each created level's parent fsynced, so a power cut cannot
/// leave the broker's files in a directory that no longer has a name), then takes `LOCK`.
pub fn lock_data_dir(dir: &Path) -> anyhow::Result<DirLock> {
    queenmq_storage::create_dir_durable(dir)
        .with_context(|| format!("cannot create data dir {}", dir.display()))?;
    let path = dir.join("LOCK");
    let f = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    queenmq_storage::sync_parent(&path)
        .with_context(|| format!("cannot fsync the directory of {}", path.display()))?;
    match f.try_lock_exclusive() {
        Ok(true) => Ok(DirLock(f)),
        Ok(false) | Err(_) => Err(anyhow!(
            "data dir {} is locked by another queen process; refusing to start",
            dir.display()
        )),
    }
}

/// The node's free-space gate and its reading thread; None when `min_free_disk_bytes` is 0.
/// The broker key of `encryption_key` (checked by `Config::validate`); its id, never the key,
/// is logged so operators can tell which key sealed what.
fn payload_key(cfg: &Config) -> anyhow::Result<Option<Arc<crate::encryption::PayloadKey>>> {
    let Some(secret) = &cfg.encryption_key else {
        crate::key_record::check(&cfg.data_dir, None)?;
        tracing::info!("no encryption_key: queues with encryptionEnabled are refused");
        return Ok(None);
    };
    let bytes =
        crate::encryption::parse_key(secret.expose()).map_err(|e| anyhow!("encryption_key {e}"))?;
    let key =
        crate::encryption::PayloadKey::new(&bytes).map_err(|e| anyhow!("encryption_key: {e}"))?;
    let key = key.bound_to(&cfg.data_dir)?;
    tracing::info!(key_id = %key.id_text(), "payloads of encrypted queues are sealed with AES-256-GCM");
    Ok(Some(Arc::new(key)))
}

fn disk_gate(cfg: &Config) -> anyhow::Result<Option<Arc<crate::disk_gate::DiskGate>>> {
    use crate::disk_gate::{DiskGate, StatVfs, REFRESH};
    if cfg.min_free_disk_bytes == 0 {
        return Ok(None);
    }
    let gate = DiskGate::new(
        Box::new(StatVfs(cfg.data_dir.clone())),
        cfg.min_free_disk_bytes,
    );
    DiskGate::spawn_refresher(&gate, REFRESH).context("starting the free-space reader thread")?;
    Ok(Some(gate))
}

pub async fn serve(
    cfg: Config,
    prometheus: crate::engine::bus_prometheus::Render,
) -> anyhow::Result<()> {
    let cluster = cfg.cluster()?;
    let _lock = lock_data_dir(&cfg.data_dir)?;
    // Certificates and users are read before anything starts: a bad file stops the start.
    let http_tls = match (&cfg.tls_cert_file, &cfg.tls_key_file) {
        (Some(cert), Some(key)) => Some(crate::tls::acceptor(cert, key, "tls_cert_file")?),
        _ => None,
    };
    let kafka_security = kafka_security(&cfg)?;
    let memory = crate::memory::Memory::from_config(cfg.memory_limit_bytes);
    let cache_bytes = memory.budget.cache_bytes(cfg.entry_cache_bytes);
    // A configured budget was checked with the config; a derived one is known only now.
    memory
        .budget
        .check_metrics_ring(
            cfg.metrics_history_samples,
            crate::node_metrics::SAMPLE_BYTES,
        )
        .map_err(|e| anyhow!("metrics_history_samples {e}"))?;
    tracing::info!(
        budget = memory.budget.total,
        from = memory.budget.source,
        entry_cache = cache_bytes,
        held_share = memory.budget.held_bytes(),
        "memory budget"
    );
    // Each group derives the same value when it opens (`Memory::dedup_hot_ids`).
    tracing::info!(
        dedup_hot_ids =
            crate::memory::Memory::dedup_hot_ids(cfg.dedup_hot_ids, cfg.memory_limit_bytes),
        derived = cfg.dedup_hot_ids == 0,
        "transaction ids each group keeps in memory before spilling to id files"
    );
    let door_caps = crate::memory::door::caps(
        &memory,
        usize::try_from(cfg.http_max_connections).unwrap_or(usize::MAX),
        usize::try_from(cfg.http_probe_reserve_connections).unwrap_or(usize::MAX),
        usize::try_from(cfg.max_long_polls).unwrap_or(usize::MAX),
    );
    tracing::info!(
        connections = door_caps.connections,
        long_polls = door_caps.long_polls,
        share = memory.budget.connections_bytes(),
        "connection limits under the memory budget"
    );
    let max_groups = usize::try_from(cfg.max_tenants).unwrap_or(usize::MAX);
    let (default_cache, tenant_cache) = split_cache(
        cache_bytes,
        cfg.jwt_secret.is_some() || kafka_security.users.is_some(),
        max_groups,
    );
    // One cap on parked polls for the node: the engines' and the ephemeral store's.
    let long_polls = crate::engine::LongPollSlots::new(door_caps.long_polls);
    let ecfg = EngineConfig {
        max_batch: cfg.commit_max_batch as usize,
        max_bytes: cfg.commit_max_bytes as usize,
        checkpoint_interval: cfg.checkpoint_interval(),
        retention_interval: cfg.retention_interval(),
        kafka_transactional_id_expiration_ms: cfg.kafka_transactional_id_expiration_ms,
        cache_bytes: default_cache,
        memory: Some(memory.clone()),
        max_new_partitions: usize::try_from(cfg.max_new_partitions_per_request)
            .unwrap_or(usize::MAX),
        long_polls: long_polls.clone(),
        disk: disk_gate(&cfg)?,
        reclaim: crate::engine::reclaim::Reclaimer::new(
            cfg.reclaim_enabled,
            Some(cfg.data_dir.join(crate::engine::reclaim::PAUSE_FILE)),
        ),
        compaction_enabled: cfg.compaction_enabled,
        encryption: payload_key(&cfg)?,
        ..EngineConfig::default()
    };
    // At 0 on a single node too: one set of series whatever the node's role.
    queenmq_raft::register_listener_series();
    let (cluster_stop_tx, cluster_stop_rx) = tokio::sync::watch::channel(false);
    let (ecfg, cluster_listener, member) = match &cluster {
        None => (ecfg, None, None),
        Some(c) => {
            // With `cluster_tenant_groups` the registry opens the tenants the hosted records
            // name and refuses a tenant directory without one (group::hosted).
            if !c.tenant_groups {
                refuse_tenants_in_cluster(&cfg.data_dir)?;
            }
            let token = cfg
                .cluster_token
                .as_ref()
                .ok_or_else(|| anyhow!("cluster_token is unset"))?;
            let mut member = crate::cluster_member::Member::new(c, token.expose());
            if c.tenant_groups {
                member.declarations = Some(
                    crate::group::hosted::Declarations::new(cfg.data_dir.clone())
                        .with_max_tenants(cfg.max_tenants),
                );
            }
            // Before the group starts: a leader must reach this node for it to catch up.
            let listening = member.listen(c.addr, cluster_stop_rx, &memory).await?;
            tracing::info!(
                node = c.node_id,
                peers = c.peers.len(),
                "starting as a cluster member"
            );
            let ecfg = EngineConfig {
                // One entry must fit one Raft append to a follower (review s15 A5).
                record_limit: ecfg
                    .record_limit
                    .min(queenmq_raft::CLUSTER_ENTRY_MAX as usize),
                cluster: Some(member.clone()),
                ..ecfg
            };
            (ecfg, Some(listening), Some(member))
        }
    };
    // SIGTERM hands the lead over with it (`Member::hand_over_all`).
    let handing = member.clone();
    // A default group that fails to start stops the process with its reason: the operator
    // must act.
    let groups = Registry::open(
        cfg.clone(),
        ecfg,
        RegistryOptions {
            max_groups,
            tenant_cache_bytes: tenant_cache,
            log_backends: Default::default(),
        },
    )
    .await?;
    let prometheus = Scrape {
        groups: groups.clone(),
        data_dir: cfg.data_dir.clone(),
        memory: memory.clone(),
        render: prometheus,
    }
    .into_render();
    let node = crate::node_metrics::NodeMetrics::new(
        cfg.metrics_sample_s,
        usize::try_from(cfg.metrics_history_samples).unwrap_or(usize::MAX),
    );
    let bus = Arc::new(
        EngineBus::new(groups.clone(), prometheus)
            .with_memory(memory.clone())
            .with_node_metrics(node.clone()),
    );

    let ephemeral = Arc::new(crate::ephemeral::Store::new(
        crate::ephemeral::StoreLimits {
            enabled: cfg.ephemeral_enabled,
            max_bytes: cfg.ephemeral_max_bytes,
            tenant_max_bytes: match cfg.ephemeral_tenant_max_bytes {
                0 => cfg.ephemeral_max_bytes,
                n => n.min(cfg.ephemeral_max_bytes),
            },
            implicit_idle: Duration::from_secs(cfg.ephemeral_implicit_idle_s),
        },
        Some(memory.clone()),
        long_polls,
    ));
    let sweeper = crate::ephemeral::spawn_sweeper(ephemeral.clone());
    let listener = tokio::net::TcpListener::bind(cfg.http_addr)
        .await
        .with_context(|| format!("binding {}", cfg.http_addr))?;
    node.set_port(
        listener
            .local_addr()
            .map_or(cfg.http_addr.port(), |a| a.port()),
    );
    let sampler = crate::node_metrics::spawn(node.clone(), groups.clone());
    tracing::info!(addr = %cfg.http_addr, data_dir = %cfg.data_dir.display(), tls = http_tls.is_some(), "queen is serving");
    let api = ApiOptions {
        jwt_secret: cfg.jwt_secret.as_ref().map(|s| s.expose().to_string()),
        jwt_audience: cfg.jwt_audience.clone(),
        metrics_require_auth: cfg.metrics_need_token(),
        max_body_bytes: cfg.max_body_bytes as usize,
        header_timeout: Duration::from_millis(cfg.http_header_timeout_ms),
        body_timeout: Duration::from_millis(cfg.http_body_timeout_ms),
        idle_timeout: Duration::from_millis(cfg.http_idle_timeout_ms),
        max_connections: door_caps.connections,
        probe_reserve_connections: usize::try_from(cfg.http_probe_reserve_connections)
            .unwrap_or(usize::MAX),
        min_write_rate: cfg.http_min_write_rate_bytes,
        write_rate_window: Duration::from_millis(cfg.http_write_rate_window_ms),
        meter: Some(Arc::new(crate::memory::door::DoorMeter(
            memory.clone(),
            Some(node.clone()),
        ))),
        max_push_items: cfg.max_push_items as usize,
        max_ack_items: cfg.max_ack_items as usize,
        max_txn_ops: cfg.max_txn_ops as usize,
        max_trace_bytes: cfg.max_trace_bytes as usize,
        streams_state_max_keys: cfg.streams_state_max_keys,
        streams_state_max_bytes: cfg.streams_state_max_bytes,
        ephemeral: Some(ephemeral.clone()),
        cluster: member.as_ref().map(|m| {
            Arc::new(crate::cluster_admin::GroupMembership {
                groups: groups.clone(),
                node_id: m.node_id,
                peer_http: m.peer_http().clone(),
                tenant_groups: m.tenant_groups,
                data_dir: cfg.data_dir.clone(),
                carrying: tokio::sync::Mutex::new(()),
            }) as Arc<dyn queenmq_native_api::cluster_admin::ClusterAdmin>
        }),
        // A follower relays what the leader must answer (docs/cluster.md "Forwarding").
        forward: member.map(|m| {
            let relays = crate::leader_lookup::relay_cap(
                usize::try_from(cfg.forward_max_inflight).unwrap_or(usize::MAX),
                door_caps.connections,
                cluster.as_ref().map_or(1, |c| c.peers.len()),
            );
            tracing::info!(relays, "requests relayed to the leader at once, at most");
            if cfg.memory_limit_bytes == 0 {
                tracing::warn!("memory_limit_bytes is 0: this member sizes its budget from its own machine, so its limits (the relay cap among them) may differ from the other members'; give every member the same memory_limit_bytes (docs/cluster.md)");
            }
            crate::leader_lookup::forward_options(groups.clone(), m, cfg.data_dir.clone(), relays)
        }),
    };
    let (kafka_stop_tx, kafka_stop_rx) = tokio::sync::watch::channel(false);
    // Kafka request bytes in flight: two of the largest requests, within a quarter of the
    // connections share (docs/kafka-compat.md "Limits").
    let kafka_inflight = usize::try_from(cfg.kafka_max_request_bytes)
        .unwrap_or(usize::MAX)
        .saturating_mul(2)
        .min(memory.budget.connections_bytes() / 4);
    let kafka_limits = KafkaLimits {
        connections: door_caps.connections,
        inflight_bytes: kafka_inflight,
        // The big admin answers' room (DescribeProducers, DescribeTransactions): another
        // quarter of the share (docs/memory.md).
        answer_bytes: memory.budget.connections_bytes() / 4,
        max_records: cfg.max_push_items as usize,
    };
    let kafka = start_kafka(
        &cfg,
        bus.clone(),
        kafka_stop_rx,
        kafka_limits,
        kafka_security,
        cluster.as_ref().map(|c| KafkaMember {
            groups: groups.clone(),
            node_id: c.node_id,
            peer_kafka: c.peer_kafka.clone(),
            tenant_groups: c.tenant_groups,
        }),
    )
    .await?;
    let (http_stop_tx, http_stop_rx) = tokio::sync::oneshot::channel::<()>();
    let http = tokio::spawn(queenmq_native_api::run(
        listener,
        bus,
        api,
        http_tls,
        async move {
            let _ = http_stop_rx.await;
        },
    ));

    shutdown_signal().await?;
    // Before the doors close: meanwhile this node answers not_leader, and once another node
    // leads it relays there like any follower (docs/cluster.md "Hand-over").
    if let Some(m) = &handing {
        m.hand_over_all(&groups).await;
    }
    sweeper.abort();
    sampler.abort();
    tracing::info!("shutdown requested: draining in-flight requests");
    let _ = kafka_stop_tx.send(true);
    let _ = http_stop_tx.send(());
    if let Some(kafka) = kafka {
        if let Err(e) = kafka.await {
            tracing::warn!(error = %e, "kafka listener task failed");
        }
    }
    let grace = cfg.shutdown_grace();
    match tokio::time::timeout(grace, http).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => tracing::warn!(error = %e, "http server ended with an error"),
        Ok(Err(e)) => tracing::warn!(error = %e, "http task failed"),
        Err(_) => tracing::warn!("in-flight requests outlived the grace period"),
    }
    let remaining = grace
        .saturating_sub(Duration::from_millis(100))
        .max(Duration::from_secs(1));
    groups.stop_all(remaining).await;
    let _ = cluster_stop_tx.send(true);
    if let Some(listening) = cluster_listener {
        if let Err(e) = listening.await {
            tracing::warn!(error = %e, "raft cluster listener task failed");
        }
    }
    tracing::info!("stopped cleanly");
    Ok(())
}

/// Only the `default` tenant is clustered: a data directory holding other tenants' groups
/// cannot start as a cluster member (they would stay single-node beside the cluster).
fn refuse_tenants_in_cluster(data_dir: &Path) -> anyhow::Result<()> {
    let dir = data_dir.join(crate::group::TENANTS_DIR);
    let Some(entries) = crate::group::dir_listing::entries_if_any(&dir)? else {
        return Ok(());
    };
    for entry in entries {
        let entry = entry.with_context(|| format!("listing {}", dir.display()))?;
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            anyhow::bail!(
                "{} holds tenant groups ({:?}), but a cluster member serves only the default \
                 tenant: tenant groups are not clustered yet (docs/cluster.md); unset the \
                 cluster keys or use a data directory without tenants",
                dir.display(),
                entry.file_name()
            );
        }
    }
    Ok(())
}

/// The Kafka port's TLS and SASL users, from their files.
fn kafka_security(cfg: &Config) -> anyhow::Result<queenmq_kafka_port::Security> {
    let tls = match (&cfg.kafka_tls_cert_file, &cfg.kafka_tls_key_file) {
        (Some(cert), Some(key)) => Some(crate::tls::acceptor(cert, key, "kafka_tls_cert_file")?),
        _ => None,
    };
    let users = match &cfg.kafka_sasl_users_file {
        Some(path) => Some(Arc::new(crate::sasl_users::load(path)?)),
        None => None,
    };
    Ok(queenmq_kafka_port::Security { tls, users })
}

/// What the Kafka port of a cluster member shows of the cluster (`kafka_cluster`).
struct KafkaMember {
    groups: Arc<Registry>,
    node_id: u64,
    peer_kafka: std::collections::BTreeMap<u64, String>,
    /// `cluster_tenant_groups`: a tenant's Metadata names its own group's leader.
    tenant_groups: bool,
}

/// What the memory budget and the HTTP door's limits allow the Kafka port.
struct KafkaLimits {
    connections: usize,
    inflight_bytes: usize,
    answer_bytes: usize,
    max_records: usize,
}

/// Binds the Kafka listener and runs it on the same bus as the HTTP API, unless it is
/// disabled — or authentication is on without SASL users: a Kafka client must not reach
/// data the HTTP API would refuse it.
async fn start_kafka(
    cfg: &Config,
    bus: Arc<EngineBus>,
    stop: tokio::sync::watch::Receiver<bool>,
    limits: KafkaLimits,
    security: queenmq_kafka_port::Security,
    member: Option<KafkaMember>,
) -> anyhow::Result<Option<tokio::task::JoinHandle<()>>> {
    if !cfg.kafka_enabled {
        return Ok(None);
    }
    if cfg.jwt_secret.is_some() && security.users.is_none() {
        tracing::warn!(
            "the Kafka port is not started: jwt_secret is set and no SASL users are \
             configured (kafka_sasl_users_file; or set kafka_enabled = false to silence this)"
        );
        return Ok(None);
    }
    let listener = tokio::net::TcpListener::bind(cfg.kafka_addr)
        .await
        .with_context(|| format!("binding the Kafka port {}", cfg.kafka_addr))?;
    let bound = listener
        .local_addr()
        .with_context(|| format!("the address of the Kafka port {}", cfg.kafka_addr))?;
    let (host, port) = cfg.kafka_advertised(bound.port());
    tracing::info!(
        addr = %bound,
        advertised = %format!("{host}:{port}"),
        tls = security.tls.is_some(),
        sasl = security.users.is_some(),
        "kafka port is serving"
    );
    if security.users.is_some() && security.tls.is_none() {
        tracing::warn!(
            "the Kafka port asks SASL logins without TLS (SASL_PLAINTEXT): PLAIN passwords \
             cross the network in clear and SCRAM exchanges can be recorded for offline \
             guessing; set kafka_tls_cert_file and kafka_tls_key_file unless the network \
             is trusted"
        );
    }
    // A cluster member is its Raft node id to Kafka clients (the broker ids of Metadata);
    // a single node stays broker 0.
    let node_id = match &member {
        None => 0,
        Some(m) => i32::try_from(m.node_id).map_err(|_| {
            anyhow!(
                "node_id {} is above 2147483647, the largest Kafka broker id: give this member \
                 a smaller id or set kafka_enabled = false",
                m.node_id
            )
        })?,
    };
    if let Some(m) = &member {
        if let Some(named) = m.peer_kafka.get(&m.node_id) {
            if *named != format!("{host}:{port}") {
                tracing::warn!(
                    peer_kafka = %named,
                    advertised = %format!("{host}:{port}"),
                    "peer_kafka names this node at another address than its Kafka port \
                     advertises; the other members send clients to the peer_kafka one"
                );
            }
        }
    }
    let cluster = member.map(|m| {
        Arc::new(
            crate::kafka_cluster::KafkaCluster::new(
                m.groups,
                m.node_id,
                (host.clone(), port),
                m.peer_kafka,
                bus.clone(),
            )
            .with_tenant_groups(m.tenant_groups),
        ) as Arc<dyn queenmq_kafka_port::cluster::ClusterView>
    });
    let kcfg = queenmq_kafka_port::KafkaConfig {
        node_id,
        cluster,
        advertised_host: host,
        advertised_port: port,
        // A request larger than the in-flight room could never be read.
        max_request_bytes: usize::try_from(cfg.kafka_max_request_bytes)
            .unwrap_or(usize::MAX)
            .min(limits.inflight_bytes.max(64 << 10)),
        max_records: limits.max_records,
        max_connections: limits.connections,
        max_prelogin_connections: usize::try_from(cfg.kafka_max_prelogin_connections)
            .unwrap_or(usize::MAX)
            .min(limits.connections),
        max_prelogin_per_ip: usize::try_from(cfg.kafka_max_prelogin_connections_per_ip)
            .unwrap_or(usize::MAX),
        inflight_bytes: limits.inflight_bytes.max(64 << 10),
        answer_bytes: limits.answer_bytes,
        idle_timeout: Duration::from_secs(600),
        io_timeout: Duration::from_secs(60),
        handshake_timeout: Duration::from_secs(10),
        default_partitions: u32::try_from(cfg.kafka_default_partitions).unwrap_or(u32::MAX),
        producer_id_expiration_ms: cfg.kafka_producer_id_expiration_ms,
        max_producer_ids: cfg.kafka_max_producer_ids,
        producer_evict_min_idle_ms: cfg.kafka_producer_evict_min_idle_ms,
        txn_limits: queenmq_protocol::kafka_txns::TxnLimits {
            max_aborted: cfg.kafka_max_aborted_per_partition,
            max_ids: cfg.kafka_max_transactional_ids,
            max_open: cfg.kafka_max_open_transactions,
            max_partitions: cfg.kafka_max_partitions_per_transaction,
            // The key's range (at most a day) fits a u32 of ms.
            max_timeout_ms: u32::try_from(cfg.kafka_transaction_max_timeout_ms).unwrap_or(u32::MAX),
        },
        ctx: queenmq_protocol::RequestCtx {
            tenant: queenmq_protocol::DEFAULT_TENANT.to_owned(),
            principal: None,
            access: queenmq_protocol::Access::Open,
        },
        log_dir: cfg.data_dir.display().to_string(),
        fetch_session_slots: usize::try_from(cfg.kafka_fetch_session_slots).unwrap_or(usize::MAX),
    };
    Ok(Some(tokio::spawn(queenmq_kafka_port::run(
        listener, bus, kcfg, security, stop,
    ))))
}

/// The entry cache share, split between the groups so that all of them together stay within
/// it: without JWT authentication there is only the `default` group and it gets all of it;
/// with it, `default` keeps half and each of the other `max_groups - 1` an equal part of the
/// other half — no floor, so the sum never passes the share however many tenants the cap
/// allows (a group with a tiny cache reads its messages back from the segment files).
fn split_cache(cache_bytes: usize, tenants_possible: bool, max_groups: usize) -> (usize, usize) {
    if !tenants_possible || max_groups <= 1 {
        return (cache_bytes, 0);
    }
    let half = cache_bytes / 2;
    let each = (cache_bytes - half) / (max_groups - 1);
    (half, each)
}

/// SIGTERM (Kubernetes) or SIGINT. Refuses to run when the handler cannot be installed.
async fn shutdown_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}
