//! The bus handle the doors hold: node-local commands are answered here; everything else goes
//! to the engine of the caller's tenant (`ctx.tenant`, crate::group::registry) over its
//! bounded queue (back-pressure) and waits for its cycle to commit.

use std::sync::Arc;

use queenmq_protocol::{
    Bus, BusFuture, Command, CommandClass, GroupCounts, HealthView, MetricsFormat, MetricsView,
    Outcome, QueenError, RaftView, RequestCtx,
};
use tokio::sync::oneshot;

use super::bus_waits::BusWaits;
use super::Job;
use crate::group::{Down, Registry};

pub type PrometheusRender = Arc<dyn Fn() -> String + Send + Sync>;

#[derive(Clone)]
pub struct EngineBus {
    /// The node's groups, one per tenant.
    groups: Arc<Registry>,
    prometheus: PrometheusRender,
    started: std::time::Instant,
    /// The node's memory budget: admission of writes and the requests pool.
    memory: Option<Arc<crate::memory::Memory>>,
    waits: BusWaits,
    /// Counts what the bus serves and answers the node's sampled series.
    node: Option<Arc<crate::node_metrics::NodeMetrics>>,
}

impl EngineBus {
    pub fn new(groups: Arc<Registry>, prometheus: PrometheusRender) -> Self {
        EngineBus {
            groups,
            prometheus,
            started: std::time::Instant::now(),
            memory: None,
            waits: BusWaits::default(),
            node: None,
        }
    }

    /// Counts every command it serves into `node` and answers its series.
    pub fn with_node_metrics(mut self, node: Arc<crate::node_metrics::NodeMetrics>) -> Self {
        self.node = Some(node);
        self
    }

    /// Replaces the default bounds on a request's wait (tests use short ones).
    pub fn with_waits(mut self, waits: BusWaits) -> Self {
        self.waits = waits;
        self
    }

    /// Refuses writes (retriably) while the node is at its memory budget, and counts the
    /// requests queued for the engine.
    pub fn with_memory(mut self, memory: Arc<crate::memory::Memory>) -> Self {
        self.memory = Some(memory);
        self
    }

    /// The node is healthy while its `default` group serves. A tenant's group being rebuilt
    /// is counted in `groups` but does not make the node unhealthy: an orchestrator that
    /// restarted the pod would take every other tenant down with it, and the rebuild happens
    /// in the process anyway. The probe is public, so it names no tenant. A cluster member is
    /// healthy only while its Raft core answers: its role is what the core last reported,
    /// and a core frozen on its own disk reports nothing (review s19 lead M2).
    fn health(&self) -> Outcome {
        let uptime_seconds = self.started.elapsed().as_secs();
        let version = env!("CARGO_PKG_VERSION");
        let running = self.groups.running();
        let groups = GroupCounts {
            running: running.len(),
            rebuilding: running.iter().filter(|g| g.live.get().is_err()).count(),
        };
        let Some(default) = self.groups.get(queenmq_protocol::DEFAULT_TENANT) else {
            return Outcome::Health(HealthView::NoStorage {
                error: "the default group is not running".into(),
                uptime_seconds,
                version,
                groups,
            });
        };
        let live = match default.live.get_or_down() {
            Ok(live) => live,
            Err(down) => return Outcome::Health(health_down(down, uptime_seconds, groups)),
        };
        let s = live.log.status();
        let storage_ready = !default.tx.is_closed();
        Outcome::Health(HealthView::Running {
            healthy: serving(s.role, s.clustered) && storage_ready && !live.log.core_frozen(),
            storage_ready,
            uptime_seconds,
            version,
            raft: raft_view(&s),
            groups,
        })
    }

    /// Served from the engine's copy of the state (engine/metrics_sample.rs), off the
    /// runtime's workers since it may wait for a fresh copy.
    /// The caller's tenant's numbers only: a tenant never sees another's queues.
    fn metrics_json(&self, tenant: String) -> BusFuture {
        let groups = self.groups.clone();
        let uptime = self.started.elapsed().as_secs();
        Box::pin(async move {
            let live = groups
                .group(&tenant)
                .await?
                .live
                .get()
                .map_err(QueenError::unavailable)?;
            let shared = live.shared.clone();
            let s = live.log.status();
            let sample = tokio::task::spawn_blocking(move || shared.sample.get())
                .await
                .map_err(|e| {
                    QueenError::new(
                        queenmq_protocol::ErrorCode::Internal,
                        format!("reading the metrics failed: {e}"),
                    )
                })?;
            Ok(Outcome::Metrics(MetricsView {
                counters: sample.map(|s| s.counters.clone()),
                uptime_seconds: uptime,
                raft: raft_view(&s),
            }))
        })
    }
}

/// The default group is down: unhealthy, unless it is reloading after a deposition, which
/// is a cluster event the node recovers from by itself (review s17 C2: a liveness probe that
/// failed through a long replay would restart the node into another replay).
fn health_down(down: Down, uptime_seconds: u64, groups: GroupCounts) -> HealthView {
    let version = env!("CARGO_PKG_VERSION");
    if down.reloading {
        HealthView::Reloading {
            reason: down.why,
            uptime_seconds,
            version,
            groups,
        }
    } else {
        HealthView::NoStorage {
            error: down.why,
            uptime_seconds,
            version,
            groups,
        }
    }
}

/// Whether a node in this Raft role is alive for the liveness probe. A cluster member that is
/// not the leader serves too (it refuses writes, naming the leader); a candidate or a learner
/// is a member waiting for or catching up with a leader, and a probe that failed it would
/// restart a node cut off from the leader into another replay (review s18 K6). A single node
/// serves only as its own leader; a stopped core serves nothing.
fn serving(role: &str, clustered: bool) -> bool {
    match role {
        "leader" => true,
        "follower" | "candidate" | "learner" => clustered,
        _ => false,
    }
}

fn raft_view(s: &super::log::LogStatus) -> RaftView {
    RaftView {
        role: s.role,
        term: s.term,
        leader: s.leader,
        last_log_index: s.last_log_index,
        committed: s.committed,
        applied: s.applied,
        clustered: s.clustered,
        quorum_contact: s.clustered && s.quorum_contact,
        proposal_fresh: s.clustered && s.proposal_fresh,
    }
}

impl Bus for EngineBus {
    fn call(&self, ctx: RequestCtx, cmd: Command) -> BusFuture {
        self.dispatch(ctx, cmd)
    }
}

impl EngineBus {
    fn dispatch(&self, ctx: RequestCtx, mut cmd: Command) -> BusFuture {
        // Counted when taken (atomics, no lock: every door's task passes here); the answer's
        // messages inside the one future below, or here for an answer known at once.
        let node = self.node.as_ref();
        if let Some(n) = node {
            n.started(crate::node_metrics::Counted::of(&cmd));
        }
        let at_once = |out: Result<Outcome, QueenError>| -> BusFuture {
            if let Some(n) = node {
                n.answered(&out);
            }
            Box::pin(async move { out })
        };
        // Whichever door it came through, a command is refused here unless the caller's
        // roles grant its row of the command table.
        if let Err(e) = ctx.authorize(cmd.meta()) {
            return at_once(Err(e));
        }
        cmd.stamp_access(&ctx);
        if cmd.meta().class == CommandClass::NodeLocal {
            let out = match cmd {
                Command::Health => Ok(self.health()),
                Command::StatsRefresh => Ok(Outcome::StatsLive),
                Command::NodeMetrics(_) if ctx.tenant != queenmq_protocol::DEFAULT_TENANT => {
                    Err(QueenError::new(
                        queenmq_protocol::ErrorCode::Forbidden,
                        "the node's process series cover every tenant's requests: they are \
                         served to tokens without a tenant claim",
                    ))
                }
                Command::NodeMetrics(q) => match &self.node {
                    Some(n) => n.query(&q).map(Outcome::NodeMetrics),
                    None => Err(QueenError::new(
                        queenmq_protocol::ErrorCode::Internal,
                        "this bus keeps no node series",
                    )),
                },
                Command::Metrics(MetricsFormat::Json) => return self.metrics_json(ctx.tenant),
                Command::Metrics(MetricsFormat::Prometheus)
                    if ctx.tenant != queenmq_protocol::DEFAULT_TENANT =>
                {
                    Err(QueenError::new(
                        queenmq_protocol::ErrorCode::Forbidden,
                        "the node's Prometheus page shows every tenant's queues: it is served \
                         to tokens without a tenant claim (GET /metrics answers for your tenant)",
                    ))
                }
                Command::Metrics(MetricsFormat::Prometheus) => {
                    let render = self.prometheus.clone();
                    // Scrape-time gauges may wait for the engine's copy and stat the data dir:
                    // keep that off the runtime's workers.
                    return Box::pin(async move {
                        tokio::task::spawn_blocking(move || Outcome::Text(render()))
                            .await
                            .map_err(|e| {
                                QueenError::new(
                                    queenmq_protocol::ErrorCode::Internal,
                                    format!("rendering the metrics failed: {e}"),
                                )
                            })
                    });
                }
                _ => Err(QueenError::new(
                    queenmq_protocol::ErrorCode::Internal,
                    "command table and bus disagree",
                )),
            };
            return at_once(out);
        }
        let groups = self.groups.clone();
        let running = groups.get(&ctx.tenant);
        // A cluster member's tenant is declared by its first write, never by a read.
        let writes = cmd.meta().class == CommandClass::ReplicatedWrite;
        let mut queued = None;
        if let Some(m) = &self.memory {
            let group_held = running
                .as_ref()
                .map_or(0, |g| g.held.load(std::sync::atomic::Ordering::Relaxed));
            if let Err(e) = m.admit(&cmd, group_held) {
                return at_once(Err(e));
            }
            queued = Some(crate::memory::Queued::new(m.clone(), &cmd));
        }
        let waits = self.waits;
        let answer_bound = waits.answer_bound(&cmd);
        let node = node.cloned();
        Box::pin(async move {
            let out =
                async move {
                    let (reply, rx) = oneshot::channel();
                    let enqueue = async {
                        let group = match running {
                            Some(g) => g,
                            None => groups.group_or_declare(&ctx.tenant, writes).await?,
                        };
                        group
                            .tx
                            .send(Job { ctx, cmd, reply })
                            .await
                            .map_err(|_| QueenError::unavailable("the engine is shutting down"))
                    };
                    match tokio::time::timeout(waits.enqueue, enqueue).await {
                        Ok(sent) => sent?,
                        Err(_) => return Err(QueenError::unavailable(
                            "this queue group takes no commands (its engine is stalled, e.g. on a \
                         hung disk); retry",
                        )),
                    }
                    // In the engine's queue now: the engine subtracts it when it takes it.
                    if let Some(q) = queued {
                        q.handed_over();
                    }
                    match tokio::time::timeout(answer_bound, rx).await {
                        Ok(answer) => answer.map_err(|_| {
                            QueenError::unavailable("the engine stopped before answering")
                        })?,
                        Err(_) => Err(QueenError::unavailable(
                            "the engine did not answer in time (a stalled disk?); the outcome is \
                     unknown: retry with the same transaction id",
                        )),
                    }
                }
                .await;
            if let Some(n) = node {
                n.answered(&out);
            }
            out
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const COUNTS: GroupCounts = GroupCounts {
        running: 1,
        rebuilding: 1,
    };

    /// Review s17 C2: a default group down for its reload after a deposition answers the
    /// health probe as alive; down for any other reason, as before.
    #[test]
    fn a_reload_after_a_deposition_is_not_a_fault() {
        let reloading = Down {
            why: "the group is being reloaded".into(),
            reloading: true,
        };
        assert!(matches!(
            health_down(reloading, 1, COUNTS),
            HealthView::Reloading { .. }
        ));
        let failed = Down {
            why: "the group is being rebuilt".into(),
            reloading: false,
        };
        assert!(matches!(
            health_down(failed, 1, COUNTS),
            HealthView::NoStorage { .. }
        ));
    }

    /// Review s18 K6: a cluster member cut off from its leader campaigns; it is alive (not
    /// ready: render/node.rs), where a lone node that is not leading is not.
    #[test]
    fn a_campaigning_cluster_member_is_alive() {
        for role in ["leader", "follower", "candidate", "learner"] {
            assert!(serving(role, true), "{role}");
        }
        assert!(!serving("shutdown", true));
        assert!(serving("leader", false));
        for role in ["follower", "candidate", "learner", "shutdown"] {
            assert!(!serving(role, false), "{role}");
        }
    }
}
