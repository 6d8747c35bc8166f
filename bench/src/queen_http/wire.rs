//! The JSON bodies of the Queen HTTP API (spec/native-api.md §2.3, §2.5, §2.6, §2.8): built
//! and read here, with no I/O, so they can be tested alone.

use bytes::Bytes;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;

use crate::driver::{OutMessage, PushStatus};

/// Appends the JSON array of push items for `batch`. Partition index `n` is named `p{n}`;
/// the transaction id `{run_tag}-{id}` is unique per run, so the broker's dedup never fires.
fn write_items(out: &mut String, queue_json: &str, run_tag: &str, batch: &[OutMessage]) {
    use std::fmt::Write;
    out.push('[');
    for (i, message) in batch.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        // Writing into a String cannot fail.
        let _ = write!(
            out,
            r#"{{"queue":{queue_json},"partition":"p{}","transactionId":"{run_tag}-{}","payload":"#,
            message.partition, message.id
        );
        out.push_str(&message.payload);
        out.push('}');
    }
    out.push(']');
}

fn body_capacity(batch: &[OutMessage]) -> usize {
    batch.iter().map(|m| m.payload.len() + 96).sum::<usize>() + 64
}

/// `POST /api/v1/push` body. `queue_json` is the queue name already JSON-encoded.
pub fn push_body(queue_json: &str, run_tag: &str, batch: &[OutMessage]) -> String {
    let mut out = String::with_capacity(body_capacity(batch));
    out.push_str(r#"{"items":"#);
    write_items(&mut out, queue_json, run_tag, batch);
    out.push('}');
    out
}

/// `POST /api/v1/transaction` body: one push operation holding the whole batch.
pub fn transaction_body(queue_json: &str, run_tag: &str, batch: &[OutMessage]) -> String {
    let mut out = String::with_capacity(body_capacity(batch) + 64);
    out.push_str(r#"{"operations":[{"type":"push","items":"#);
    write_items(&mut out, queue_json, run_tag, batch);
    out.push_str(r#"}],"requiredLeases":[]}"#);
    out
}

#[derive(Deserialize)]
struct PushResult {
    #[serde(default)]
    index: Option<usize>,
    #[serde(default)]
    status: Option<String>,
}

fn push_status(status: Option<&str>) -> PushStatus {
    match status {
        Some("queued") | Some("buffered") => PushStatus::Accepted,
        Some("duplicate") => PushStatus::Duplicate,
        _ => PushStatus::Failed,
    }
}

/// Reads a 201 push answer into one status per pushed item (missing entries are failures).
pub fn parse_push_answer(body: &[u8], items: usize) -> anyhow::Result<Vec<PushStatus>> {
    let results: Vec<PushResult> = serde_json::from_slice(body)
        .map_err(|e| anyhow::anyhow!("push answer is not a result array: {e}"))?;
    let mut statuses = vec![PushStatus::Failed; items];
    for (position, result) in results.iter().enumerate() {
        let index = result.index.unwrap_or(position);
        if let Some(slot) = statuses.get_mut(index) {
            *slot = push_status(result.status.as_deref());
        }
    }
    Ok(statuses)
}

#[derive(Deserialize)]
struct TransactionAnswer {
    #[serde(default)]
    success: bool,
    #[serde(default)]
    error: Option<String>,
}

/// Reads a transaction answer: all items accepted, or the broker's reason.
pub fn parse_transaction_answer(body: &[u8], items: usize) -> anyhow::Result<Vec<PushStatus>> {
    let answer: TransactionAnswer = serde_json::from_slice(body)
        .map_err(|e| anyhow::anyhow!("transaction answer is not an object: {e}"))?;
    if !answer.success {
        anyhow::bail!(
            "transaction refused: {}",
            answer.error.as_deref().unwrap_or("success: false")
        );
    }
    Ok(vec![PushStatus::Accepted; items])
}

/// The query string of a pop (after the path).
pub fn pop_query(request: &crate::driver::PopRequest) -> String {
    let mut query = format!(
        "?batch={}&wait=true&timeout={}&partitions={}",
        request.batch, request.wait_ms, request.partitions
    );
    if let Some(group) = &request.group {
        query.push_str("&consumerGroup=");
        query.push_str(group);
        query.push_str("&subscriptionMode=all");
    }
    if let Some(secs) = request.lease_secs {
        query.push_str(&format!("&leaseSeconds={secs}"));
    }
    query
}

/// What an ack needs back: the message, its partition and the claim's lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueenAck {
    pub transaction_id: String,
    pub partition_id: String,
    pub lease_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PopMessage<'a> {
    transaction_id: String,
    #[serde(deserialize_with = "string_or_number")]
    partition_id: String,
    /// Missing reads as "", which no payload of ours names, so the delivery is refused.
    #[serde(default)]
    partition: String,
    #[serde(default)]
    lease_id: Option<String>,
    #[serde(default, borrow)]
    data: Option<&'a RawValue>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PopAnswer<'a> {
    #[serde(default, borrow)]
    messages: Vec<PopMessage<'a>>,
    #[serde(default)]
    lease_id: Option<String>,
}

/// One popped message as either answer form gives it: what an ack needs, and the payload
/// bytes exactly as the answer carried them (a view of the answer, not a copy).
#[derive(Debug, Clone)]
pub struct Popped {
    pub transaction_id: String,
    pub partition_id: String,
    /// The partition's name, checked against the payload's `p`.
    pub partition: String,
    pub lease_id: Option<String>,
    pub payload: Bytes,
}

/// Reads a 200 JSON pop answer.
pub fn parse_pop_answer(body: &Bytes) -> anyhow::Result<Vec<Popped>> {
    let answer: PopAnswer<'_> = serde_json::from_slice(body)
        .map_err(|e| anyhow::anyhow!("pop answer is not understood: {e}"))?;
    let claim_lease = answer.lease_id.filter(|l| !l.is_empty());
    Ok(answer
        .messages
        .into_iter()
        .map(|m| {
            let lease_id = m
                .lease_id
                .filter(|l| !l.is_empty())
                .or_else(|| claim_lease.clone());
            let payload = m
                .data
                .map_or_else(Bytes::new, |raw| body.slice_ref(raw.get().as_bytes()));
            Popped {
                transaction_id: m.transaction_id,
                partition_id: m.partition_id,
                partition: m.partition,
                lease_id,
                payload,
            }
        })
        .collect())
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct AckItem<'a> {
    transaction_id: &'a str,
    partition_id: &'a str,
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    lease_id: Option<&'a str>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct AckBatch<'a> {
    acknowledgments: Vec<AckItem<'a>>,
    consumer_group: Option<&'a str>,
}

/// `POST /api/v1/ack/batch` body acking every delivery as completed.
pub fn ack_body(group: Option<&str>, acks: &[QueenAck]) -> anyhow::Result<String> {
    let batch = AckBatch {
        acknowledgments: acks
            .iter()
            .map(|a| AckItem {
                transaction_id: &a.transaction_id,
                partition_id: &a.partition_id,
                status: "completed",
                lease_id: a.lease_id.as_deref(),
            })
            .collect(),
        consumer_group: group,
    };
    Ok(serde_json::to_string(&batch)?)
}

#[derive(Deserialize)]
struct AckResult {
    #[serde(default)]
    success: bool,
    #[serde(default)]
    error: Option<String>,
}

/// Reads an ack answer: (succeeded, failed, first error).
pub fn parse_ack_answer(body: &[u8], items: usize) -> anyhow::Result<(usize, Option<String>)> {
    let results: Vec<AckResult> = serde_json::from_slice(body)
        .map_err(|e| anyhow::anyhow!("ack answer is not a result array: {e}"))?;
    let ok = results
        .iter()
        .take(items)
        .filter(|r| r.success && r.error.is_none())
        .count();
    let first_error = results.iter().find_map(|r| r.error.clone());
    Ok((ok, first_error))
}

/// The `error` of a JSON error body, else the start of the body as text.
pub fn error_text(body: &[u8]) -> String {
    #[derive(Deserialize)]
    struct ErrorBody {
        error: String,
    }
    match serde_json::from_slice::<ErrorBody>(body) {
        Ok(e) => e.error,
        Err(_) => String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned(),
    }
}

fn string_or_number<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Id {
        Text(String),
        Number(u64),
    }
    Ok(match Id::deserialize(d)? {
        Id::Text(t) => t,
        Id::Number(n) => n.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::PopRequest;
    use crate::payload::{payload_fields, PayloadFields};
    use serde_json::Value;

    fn batch() -> Vec<OutMessage> {
        vec![
            OutMessage {
                id: 7,
                partition: 3,
                payload: r#"{"seq":7,"p":3,"ts":1,"pad":""}"#.into(),
            },
            OutMessage {
                id: 8,
                partition: 4,
                payload: r#"{"seq":8,"p":4,"ts":2,"pad":"x"}"#.into(),
            },
        ]
    }

    #[test]
    fn push_body_is_the_spec_shape() -> anyhow::Result<()> {
        let body: Value = serde_json::from_str(&push_body("\"q\\\"1\"", "r1", &batch()))?;
        let items = body["items"].as_array().map(Vec::len);
        assert_eq!(items, Some(2));
        assert_eq!(body["items"][0]["queue"], "q\"1");
        assert_eq!(body["items"][0]["partition"], "p3");
        assert_eq!(body["items"][1]["transactionId"], "r1-8");
        assert_eq!(body["items"][1]["payload"]["seq"], 8);
        Ok(())
    }

    #[test]
    fn transaction_body_is_the_spec_shape() -> anyhow::Result<()> {
        let body: Value = serde_json::from_str(&transaction_body("\"q\"", "r", &batch()))?;
        assert_eq!(body["operations"][0]["type"], "push");
        assert_eq!(body["operations"][0]["items"][1]["partition"], "p4");
        assert_eq!(body["requiredLeases"], serde_json::json!([]));
        Ok(())
    }

    #[test]
    fn push_answer_maps_statuses_by_index() -> anyhow::Result<()> {
        let body = br#"[{"index":1,"status":"duplicate"},{"index":0,"status":"queued"},
            {"index":2,"status":"failed","error":"full"}]"#;
        let got = parse_push_answer(body, 4)?;
        assert_eq!(
            got,
            vec![
                PushStatus::Accepted,
                PushStatus::Duplicate,
                PushStatus::Failed,
                PushStatus::Failed
            ]
        );
        assert!(parse_push_answer(br#"{"error":"x"}"#, 1).is_err());
        Ok(())
    }

    #[test]
    fn transaction_answer_success_or_reason() -> anyhow::Result<()> {
        assert_eq!(
            parse_transaction_answer(br#"{"success":true,"results":[]}"#, 2)?,
            vec![PushStatus::Accepted; 2]
        );
        let refused = parse_transaction_answer(br#"{"success":false,"error":"rolled back"}"#, 2);
        assert!(format!("{:?}", refused.err()).contains("rolled back"));
        Ok(())
    }

    #[test]
    fn pop_query_carries_group_only_when_set() {
        let mut request = PopRequest {
            group: None,
            batch: 100,
            partitions: 10,
            wait_ms: 1000,
            lease_secs: None,
            worker: 0,
            workers: 1,
        };
        assert_eq!(
            pop_query(&request),
            "?batch=100&wait=true&timeout=1000&partitions=10"
        );
        request.group = Some("g1".into());
        request.lease_secs = Some(30);
        assert_eq!(
            pop_query(&request),
            "?batch=100&wait=true&timeout=1000&partitions=10&consumerGroup=g1&subscriptionMode=all&leaseSeconds=30"
        );
    }

    #[test]
    fn pop_answer_reads_payload_bytes_and_leases() -> anyhow::Result<()> {
        let body = Bytes::from_static(
            br#"{"success":true,"leaseId":"L","messages":[
            {"transactionId":"t1","partitionId":"17","leaseId":"","data":{"seq":1,"p":2,"ts":3,"pad":"xx"}},
            {"transactionId":"t2","partitionId":18,"leaseId":"M","data":{"other":true}},
            {"transactionId":"t3","partitionId":"19","data":null}]}"#,
        );
        let got = parse_pop_answer(&body)?;
        assert_eq!(got.len(), 3);
        assert_eq!(&got[0].payload[..], br#"{"seq":1,"p":2,"ts":3,"pad":"xx"}"#);
        assert_eq!(
            payload_fields(&got[0].payload),
            Some(PayloadFields {
                seq: 1,
                p: 2,
                ts: 3
            })
        );
        assert_eq!(got[0].lease_id.as_deref(), Some("L"));
        assert_eq!(payload_fields(&got[1].payload), None);
        assert_eq!(got[1].partition_id, "18");
        assert_eq!(got[1].lease_id.as_deref(), Some("M"));
        assert_eq!(payload_fields(&got[2].payload), None);
        Ok(())
    }

    #[test]
    fn ack_body_and_answer() -> anyhow::Result<()> {
        let acks = vec![
            QueenAck {
                transaction_id: "t1".into(),
                partition_id: "17".into(),
                lease_id: Some("L".into()),
            },
            QueenAck {
                transaction_id: "t2".into(),
                partition_id: "17".into(),
                lease_id: None,
            },
        ];
        let body: Value = serde_json::from_str(&ack_body(None, &acks)?)?;
        assert_eq!(body["consumerGroup"], Value::Null);
        assert_eq!(body["acknowledgments"][0]["status"], "completed");
        assert_eq!(body["acknowledgments"][0]["leaseId"], "L");
        assert!(body["acknowledgments"][1].get("leaseId").is_none());
        let answer = br#"[{"index":0,"success":true,"error":null},
            {"index":1,"success":false,"error":"invalid or expired lease"}]"#;
        let (ok, error) = parse_ack_answer(answer, 2)?;
        assert_eq!(ok, 1);
        assert_eq!(error.as_deref(), Some("invalid or expired lease"));
        Ok(())
    }

    #[test]
    fn error_text_prefers_the_error_key() {
        assert_eq!(error_text(br#"{"error":"bad body: x"}"#), "bad body: x");
        assert_eq!(error_text(b"plain"), "plain");
    }
}
