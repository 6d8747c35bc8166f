//! The Queen HTTP/1.1 driver: one keep-alive connection per worker, JSON bodies or the binary
//! forms of docs/binary-forms.md (`Forms`).

mod binary_push;
pub use binary_push::txn_id;
#[cfg(test)]
mod binary_tests;
mod forms;
mod framed_pop;
mod wire;

use std::time::Duration;

use anyhow::bail;
use hyper::{Method, StatusCode};

use crate::driver::{AckOutcome, Connector, Delivery, Driver, OutMessage, PopRequest, PushStatus};
use crate::http_conn::{Answer, Endpoint, HttpConn, Outgoing};

use binary_push::{Encoded, Encoder};
pub use forms::{Forms, PopForm, PushForm};
use wire::Popped;
pub use wire::QueenAck;

/// `Content-Type` of the QPB1 and QTB1 bodies.
const PUSH_CONTENT_TYPE: &str = "application/x-queen-push";
/// `Content-Type` of the QPF1 answer.
const POP_CONTENT_TYPE: &str = "application/x-queen-pop";

/// Slack over the long-poll time before a pop counts as timed out (as the official client).
const POP_SLACK: Duration = Duration::from_secs(5);

#[derive(Debug, Clone)]
pub struct QueenHttp {
    endpoint: Endpoint,
    queue: String,
    queue_json: String,
    run_tag: String,
    request_timeout: Duration,
    forms: Forms,
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
            forms: Forms::default(),
        })
    }

    /// The same driver with these body and answer forms.
    pub fn with_forms(mut self, forms: Forms) -> Self {
        self.forms = forms;
        self
    }
}

impl Connector for QueenHttp {
    type Driver = QueenHttpDriver;

    fn name(&self) -> &'static str {
        "queen-http"
    }

    async fn connect(&self) -> anyhow::Result<QueenHttpDriver> {
        let encoder = match self.forms.push {
            PushForm::Json => None,
            PushForm::Qpb1 | PushForm::Qpb1Frames => Some(Encoder::new()?),
        };
        Ok(QueenHttpDriver {
            conn: HttpConn::new(self.endpoint.clone()),
            pop_path: format!("/api/v1/pop/queue/{}", self.queue),
            config: self.clone(),
            encoder,
        })
    }
}

pub struct QueenHttpDriver {
    conn: HttpConn,
    pop_path: String,
    config: QueenHttp,
    /// Present when pushes go in a binary form.
    encoder: Option<Encoder>,
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

/// Statuses read in wire order put back in batch order.
fn batch_order(wire: Vec<PushStatus>, order: &[usize], items: usize) -> Vec<PushStatus> {
    let mut out = vec![PushStatus::Failed; items];
    for (status, &at) in wire.into_iter().zip(order) {
        if let Some(slot) = out.get_mut(at) {
            *slot = status;
        }
    }
    out
}

/// A popped message as the consumer sees it: our fields only when the payload is ours, the
/// transaction id is the one it was pushed with and it came from the partition it was pushed
/// to (`p{n}`, as every push form names it).
fn delivery(run_tag: &str, p: Popped) -> Delivery<QueenAck> {
    let fields = crate::payload::payload_fields(&p.payload).filter(|f| {
        p.transaction_id == binary_push::txn_id(run_tag, f.seq)
            && p.partition.strip_prefix('p') == Some(f.p.to_string().as_str())
    });
    Delivery {
        fields,
        payload: p.payload,
        ack: QueenAck {
            transaction_id: p.transaction_id,
            partition_id: p.partition_id,
            lease_id: p.lease_id,
        },
    }
}

impl QueenHttpDriver {
    async fn post(&mut self, path: &str, body: Outgoing) -> anyhow::Result<Answer> {
        let timeout = self.config.request_timeout;
        self.conn
            .request(Method::POST, path, Some(body), timeout)
            .await
    }

    fn encoder(&mut self) -> anyhow::Result<&mut Encoder> {
        self.encoder
            .as_mut()
            .ok_or_else(|| anyhow::anyhow!("no binary encoder for push form json"))
    }

    async fn post_binary(
        &mut self,
        path: &str,
        encoded: Encoded,
    ) -> anyhow::Result<(Answer, Vec<usize>)> {
        let body = Outgoing {
            bytes: encoded.body.into(),
            content_type: PUSH_CONTENT_TYPE,
        };
        Ok((self.post(path, body).await?, encoded.order))
    }
}

impl Driver for QueenHttpDriver {
    type Ack = QueenAck;

    async fn push(&mut self, batch: &[OutMessage]) -> anyhow::Result<Vec<PushStatus>> {
        let (queue, run_tag) = (&self.config.queue, &self.config.run_tag);
        let encoded = match self.config.forms.push {
            PushForm::Json => {
                let body = wire::push_body(&self.config.queue_json, run_tag, batch);
                let answer = self.post("/api/v1/push", Outgoing::json(body)).await?;
                expect(&answer, "push", &[StatusCode::CREATED, StatusCode::OK])?;
                return wire::parse_push_answer(&answer.body, batch.len());
            }
            PushForm::Qpb1 => {
                let (queue, run_tag) = (queue.clone(), run_tag.clone());
                self.encoder()?.push_plain(&queue, &run_tag, batch)?
            }
            PushForm::Qpb1Frames => {
                let (queue, run_tag) = (queue.clone(), run_tag.clone());
                self.encoder()?.push_frames(&queue, &run_tag, batch)?
            }
        };
        let (answer, order) = self.post_binary("/api/v1/push", encoded).await?;
        expect(&answer, "push", &[StatusCode::CREATED, StatusCode::OK])?;
        let wire = wire::parse_push_answer(&answer.body, batch.len())?;
        Ok(batch_order(wire, &order, batch.len()))
    }

    async fn push_transaction(&mut self, batch: &[OutMessage]) -> anyhow::Result<Vec<PushStatus>> {
        let answer = match self.config.forms.push {
            PushForm::Json => {
                let body =
                    wire::transaction_body(&self.config.queue_json, &self.config.run_tag, batch);
                self.post("/api/v1/transaction", Outgoing::json(body))
                    .await?
            }
            PushForm::Qpb1 => {
                anyhow::bail!("QTB1 carries frames only: use --push-form qpb1-frames")
            }
            PushForm::Qpb1Frames => {
                let (queue, run_tag) = (self.config.queue.clone(), self.config.run_tag.clone());
                let encoded = self.encoder()?.transaction(&queue, &run_tag, batch)?;
                self.post_binary("/api/v1/transaction", encoded).await?.0
            }
        };
        expect(
            &answer,
            "transaction",
            &[StatusCode::OK, StatusCode::CREATED],
        )?;
        wire::parse_transaction_answer(&answer.body, batch.len())
    }

    async fn pop(&mut self, request: &PopRequest) -> anyhow::Result<Vec<Delivery<QueenAck>>> {
        let framed = self.config.forms.pop == PopForm::Qpf1;
        let mut path = format!("{}{}", self.pop_path, wire::pop_query(request));
        if framed {
            path.push_str("&frames=true");
        }
        let timeout = Duration::from_millis(request.wait_ms) + POP_SLACK;
        let answer = self.conn.request(Method::GET, &path, None, timeout).await?;
        if answer.status == StatusCode::NO_CONTENT {
            return Ok(Vec::new());
        }
        expect(&answer, "pop", &[StatusCode::OK])?;
        let got_framed = answer
            .content_type
            .as_deref()
            .is_some_and(|ct| ct.starts_with(POP_CONTENT_TYPE));
        let popped = match (framed, got_framed) {
            (true, true) => framed_pop::decode(&answer.body)?,
            (false, false) => wire::parse_pop_answer(&answer.body)?,
            // Every id this tool pushes is a UUID, so a framed pop has no reason to fall back
            // to JSON: counting it would measure JSON under the QPF1 name.
            (true, false) => anyhow::bail!(
                "pop asked for QPF1 (frames=true), the answer is {:?}",
                answer.content_type
            ),
            (false, true) => anyhow::bail!("a JSON pop was answered in QPF1"),
        };
        let run_tag = &self.config.run_tag;
        Ok(popped.into_iter().map(|p| delivery(run_tag, p)).collect())
    }

    async fn ack(&mut self, group: Option<&str>, acks: &[QueenAck]) -> anyhow::Result<AckOutcome> {
        let body = wire::ack_body(group, acks)?;
        let answer = self.post("/api/v1/ack/batch", Outgoing::json(body)).await?;
        expect(&answer, "ack", &[StatusCode::OK])?;
        let (ok, first_error) = wire::parse_ack_answer(&answer.body, acks.len())?;
        Ok(AckOutcome {
            ok,
            failed: acks.len() - ok,
            first_error,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payload::{PayloadBuilder, PayloadFields};

    #[test]
    fn statuses_go_back_to_their_batch_index() {
        // Batch partitions 3, 5, 3, 8: the encoder groups by partition, so the wire order is
        // batch items 0, 2, 1, 3. Only item 2 (wire position 1) was refused.
        let wire = vec![
            PushStatus::Accepted,
            PushStatus::Failed,
            PushStatus::Duplicate,
            PushStatus::Accepted,
        ];
        let got = batch_order(wire, &[0, 2, 1, 3], 4);
        let want = [
            PushStatus::Accepted,
            PushStatus::Duplicate,
            PushStatus::Failed,
            PushStatus::Accepted,
        ];
        assert_eq!(got, want);
        // A short answer leaves the rest failed; an index past the batch is ignored.
        let got = batch_order(vec![PushStatus::Accepted; 2], &[3, 9], 4);
        assert_eq!(got[3], PushStatus::Accepted);
        assert_eq!(got.iter().filter(|s| s.is_accepted()).count(), 1);
    }

    fn popped(transaction_id: &str, partition: &str, payload: String) -> Popped {
        Popped {
            transaction_id: transaction_id.to_string(),
            partition_id: "1".to_string(),
            partition: partition.to_string(),
            lease_id: None,
            payload: payload.into(),
        }
    }

    #[test]
    fn a_delivery_must_match_its_transaction_id_and_partition() {
        let payload = PayloadBuilder::new(128).build(PayloadFields {
            seq: 7,
            p: 3,
            ts: 1,
        });
        let ok = delivery("r1", popped("r1-7", "p3", payload.clone()));
        assert_eq!(ok.fields.map(|f| f.seq), Some(7));
        for (txn, partition) in [("r1-8", "p3"), ("r2-7", "p3"), ("r1-7", "p4"), ("r1-7", "")] {
            let d = delivery("r1", popped(txn, partition, payload.clone()));
            assert!(d.fields.is_none(), "{txn} {partition}");
        }
        let foreign = delivery("r1", popped("r1-7", "p3", r#"{"x":1}"#.to_string()));
        assert!(foreign.fields.is_none());
    }
}
