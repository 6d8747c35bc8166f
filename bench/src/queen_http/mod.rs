//! The Queen HTTP/1.1 JSON driver: one keep-alive connection per worker.

mod wire;

use std::time::Duration;

use anyhow::bail;
use hyper::{Method, StatusCode};

use crate::driver::{AckOutcome, Connector, Delivery, Driver, OutMessage, PopRequest, PushStatus};
use crate::http_conn::{Answer, Endpoint, HttpConn};

pub use wire::QueenAck;

/// Slack over the long-poll time before a pop counts as timed out (as the official client).
const POP_SLACK: Duration = Duration::from_secs(5);

#[derive(Debug, Clone)]
pub struct QueenHttp {
    endpoint: Endpoint,
    queue: String,
    queue_json: String,
    run_tag: String,
    request_timeout: Duration,
}

impl QueenHttp {
    pub fn new(
        endpoint: Endpoint,
        queue: &str,
        run_tag: &str,
        request_timeout: Duration,
    ) -> anyhow::Result<Self> {
        if queue.is_empty()
            || !queue
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        {
            // Queue names travel unescaped in the pop path (spec §1.1).
            bail!("queue name {queue:?}: use letters, digits, '-', '_' or '.'");
        }
        Ok(Self {
            endpoint,
            queue: queue.to_string(),
            queue_json: serde_json::to_string(queue)?,
            run_tag: run_tag.to_string(),
            request_timeout,
        })
    }
}

impl Connector for QueenHttp {
    type Driver = QueenHttpDriver;

    fn name(&self) -> &'static str {
        "queen-http"
    }

    async fn connect(&self) -> anyhow::Result<QueenHttpDriver> {
        Ok(QueenHttpDriver {
            conn: HttpConn::new(self.endpoint.clone()),
            pop_path: format!("/api/v1/pop/queue/{}", self.queue),
            config: self.clone(),
        })
    }
}

pub struct QueenHttpDriver {
    conn: HttpConn,
    pop_path: String,
    config: QueenHttp,
}

/// Fails unless the answer has the expected status.
fn expect(answer: &Answer, what: &str, ok: &[StatusCode]) -> anyhow::Result<()> {
    if ok.contains(&answer.status) {
        return Ok(());
    }
    bail!(
        "{what}: HTTP {}: {}",
        answer.status.as_u16(),
        wire::error_text(&answer.body)
    )
}

impl QueenHttpDriver {
    async fn post(&mut self, path: &str, body: String) -> anyhow::Result<Answer> {
        let timeout = self.config.request_timeout;
        self.conn
            .request(Method::POST, path, Some(body), timeout)
            .await
    }
}

impl Driver for QueenHttpDriver {
    type Ack = QueenAck;

    async fn push(&mut self, batch: &[OutMessage]) -> anyhow::Result<Vec<PushStatus>> {
        let body = wire::push_body(&self.config.queue_json, &self.config.run_tag, batch);
        let answer = self.post("/api/v1/push", body).await?;
        expect(&answer, "push", &[StatusCode::CREATED, StatusCode::OK])?;
        wire::parse_push_answer(&answer.body, batch.len())
    }

    async fn push_transaction(&mut self, batch: &[OutMessage]) -> anyhow::Result<Vec<PushStatus>> {
        let body = wire::transaction_body(&self.config.queue_json, &self.config.run_tag, batch);
        let answer = self.post("/api/v1/transaction", body).await?;
        expect(
            &answer,
            "transaction",
            &[StatusCode::OK, StatusCode::CREATED],
        )?;
        wire::parse_transaction_answer(&answer.body, batch.len())
    }

    async fn pop(&mut self, request: &PopRequest) -> anyhow::Result<Vec<Delivery<QueenAck>>> {
        let path = format!("{}{}", self.pop_path, wire::pop_query(request));
        let timeout = Duration::from_millis(request.wait_ms) + POP_SLACK;
        let answer = self.conn.request(Method::GET, &path, None, timeout).await?;
        if answer.status == StatusCode::NO_CONTENT {
            return Ok(Vec::new());
        }
        expect(&answer, "pop", &[StatusCode::OK])?;
        Ok(wire::parse_pop_answer(&answer.body)?
            .into_iter()
            .map(|(fields, ack)| Delivery { fields, ack })
            .collect())
    }

    async fn ack(&mut self, group: Option<&str>, acks: &[QueenAck]) -> anyhow::Result<AckOutcome> {
        let body = wire::ack_body(group, acks)?;
        let answer = self.post("/api/v1/ack/batch", body).await?;
        expect(&answer, "ack", &[StatusCode::OK])?;
        let (ok, first_error) = wire::parse_ack_answer(&answer.body, acks.len())?;
        Ok(AckOutcome {
            ok,
            failed: acks.len() - ok,
            first_error,
        })
    }
}
