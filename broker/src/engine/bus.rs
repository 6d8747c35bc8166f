//! The bus handle the doors hold: node-local commands are answered here; everything else goes
//! to the engine task over a bounded queue (back-pressure) and waits for its cycle to commit.

use std::sync::Arc;

use queenmq_protocol::{
    Bus, BusFuture, Command, CommandClass, MetricsFormat, Outcome, QueenError, RequestCtx,
};
use serde_json::json;
use tokio::sync::{mpsc, oneshot};

use super::log::SharedLog;
use super::{Job, Shared};

pub type PrometheusRender = Arc<dyn Fn() -> String + Send + Sync>;

#[derive(Clone)]
pub struct EngineBus {
    tx: mpsc::Sender<Job>,
    shared: Arc<Shared>,
    log: SharedLog,
    prometheus: PrometheusRender,
    started: std::time::Instant,
}

impl EngineBus {
    pub fn new(
        tx: mpsc::Sender<Job>,
        shared: Arc<Shared>,
        log: SharedLog,
        prometheus: PrometheusRender,
    ) -> Self {
        EngineBus {
            tx,
            shared,
            log,
            prometheus,
            started: std::time::Instant::now(),
        }
    }

    fn health(&self) -> Outcome {
        let s = self.log.status();
        let healthy = s.role == "leader" && !self.tx.is_closed();
        Outcome::Json(json!({
            "status": if healthy { "healthy" } else { "unhealthy" },
            "storageReady": !self.tx.is_closed(),
            "uptimeSeconds": self.started.elapsed().as_secs(),
            "version": env!("CARGO_PKG_VERSION"),
            "raft": {
                "role": s.role, "term": s.term, "leader": s.leader,
                "lastLogIndex": s.last_log_index, "committed": s.committed, "applied": s.applied,
            },
        }))
    }

    fn metrics_json(&self) -> Outcome {
        let st = self.shared.lock();
        let (mut pushed, mut acked, mut dlq) = (0u64, 0u64, 0u64);
        let mut queues = Vec::new();
        for q in st.queues.values() {
            pushed += q.counters.pushed;
            acked += q.counters.acked;
            dlq += q.counters.dead_lettered;
            queues.push(json!({
                "name": q.name, "partitions": q.partition_order.len(),
                "pushed": q.counters.pushed, "acked": q.counters.acked,
                "deadLettered": q.counters.dead_lettered,
            }));
        }
        let s = self.log.status();
        Outcome::Json(json!({
            "uptime": self.started.elapsed().as_secs(),
            "messages": {"pushed": pushed, "acked": acked, "deadLettered": dlq},
            "queues": queues,
            "partitions": st.partitions.len(),
            "consumerGroups": st.groups.len(),
            "raft": {"role": s.role, "term": s.term, "committed": s.committed, "applied": s.applied},
        }))
    }
}

impl Bus for EngineBus {
    fn call(&self, ctx: RequestCtx, cmd: Command) -> BusFuture {
        if cmd.meta().class == CommandClass::NodeLocal {
            let out = match cmd {
                Command::Health => Ok(self.health()),
                Command::Metrics(MetricsFormat::Json) => Ok(self.metrics_json()),
                Command::Metrics(MetricsFormat::Prometheus) => {
                    let render = self.prometheus.clone();
                    // Scrape-time gauges wait for the state lock and stat the data dir: keep
                    // that off the runtime's workers.
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
            return Box::pin(async move { out });
        }
        let tx = self.tx.clone();
        Box::pin(async move {
            let (reply, rx) = oneshot::channel();
            tx.send(Job { ctx, cmd, reply })
                .await
                .map_err(|_| QueenError::unavailable("the engine is shutting down"))?;
            rx.await
                .map_err(|_| QueenError::unavailable("the engine stopped before answering"))?
        })
    }
}
