//! A tiny in-memory stand-in for the Queen HTTP API (push, pop, ack, transaction), enough to
//! run every scenario end to end in unit tests. Pops hand each message once per group; leases
//! and ordering are not modelled. `Faults` make it misbehave, to prove the tool notices:
//! silently dropped messages, refused items, refused acks.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// A pushed item: its transaction id and its payload exactly as it arrived.
#[derive(Deserialize)]
struct Item<'a> {
    #[serde(rename = "transactionId")]
    transaction_id: String,
    #[serde(default)]
    partition: String,
    #[serde(borrow)]
    payload: &'a RawValue,
}

#[derive(Deserialize)]
struct Push<'a> {
    #[serde(borrow)]
    items: Vec<Item<'a>>,
}

#[derive(Deserialize)]
struct Operation<'a> {
    #[serde(borrow)]
    items: Vec<Item<'a>>,
}

#[derive(Deserialize)]
struct Transaction<'a> {
    #[serde(borrow)]
    operations: Vec<Operation<'a>>,
}

#[derive(Default)]
struct State {
    /// Transaction id, partition name and payload text, as pushed.
    messages: Vec<(String, String, String)>,
    cursors: HashMap<String, usize>,
    accepted: usize,
}

/// How the mock misbehaves; the default is not at all.
#[derive(Debug, Clone, Copy, Default)]
pub struct Faults {
    /// Answer `queued` for every n-th pushed item but store nothing.
    pub drop_every: Option<usize>,
    /// Answer `failed` for every n-th pushed item (and store nothing).
    pub refuse_every: Option<usize>,
    /// Answer every ack with `success: false`.
    pub refuse_acks: bool,
}

#[derive(Clone)]
pub struct MockBroker {
    state: Arc<Mutex<State>>,
    faults: Faults,
}

impl MockBroker {
    /// Starts listening on a free loopback port; returns the base URL.
    pub async fn start(faults: Faults) -> anyhow::Result<String> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr: SocketAddr = listener.local_addr()?;
        let broker = MockBroker {
            state: Arc::default(),
            faults,
        };
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let broker = broker.clone();
                tokio::spawn(async move {
                    let _ = broker.serve(stream).await;
                });
            }
        });
        Ok(format!("http://{addr}"))
    }

    async fn serve(&self, stream: TcpStream) -> anyhow::Result<()> {
        stream.set_nodelay(true)?;
        let (read, mut write) = stream.into_split();
        let mut reader = BufReader::new(read);
        loop {
            let mut request_line = String::new();
            if reader.read_line(&mut request_line).await? == 0 {
                return Ok(());
            }
            let mut length = 0usize;
            loop {
                let mut header = String::new();
                reader.read_line(&mut header).await?;
                let header = header.trim_end();
                if header.is_empty() {
                    break;
                }
                if let Some((name, value)) = header.split_once(':') {
                    if name.eq_ignore_ascii_case("content-length") {
                        length = value.trim().parse()?;
                    }
                }
            }
            let mut body = vec![0u8; length];
            reader.read_exact(&mut body).await?;
            let mut parts = request_line.split_whitespace();
            let method = parts.next().unwrap_or_default().to_string();
            let target = parts.next().unwrap_or_default().to_string();
            let (status, answer) = self.route(&method, &target, &body).await;
            let whole = format!(
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{answer}",
                answer.len()
            );
            write.write_all(whole.as_bytes()).await?;
        }
    }

    fn store(&self, items: &[Item<'_>]) -> Vec<Value> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        items
            .iter()
            .enumerate()
            .map(|(index, item)| {
                state.accepted += 1;
                let nth = |every: Option<usize>| every.is_some_and(|n| state.accepted % n == 0);
                if nth(self.faults.refuse_every) {
                    return json!({"index": index, "status": "failed", "error": "refused"});
                }
                if !nth(self.faults.drop_every) {
                    let payload = item.payload.get().to_string();
                    let stored = (item.transaction_id.clone(), item.partition.clone(), payload);
                    state.messages.push(stored);
                }
                json!({"index": index, "status": "queued",
                       "transaction_id": item.transaction_id, "message_id": "m"})
            })
            .collect()
    }

    /// The JSON text of up to `batch` messages, the payloads written as they were pushed.
    fn take(&self, group: &str, batch: usize) -> Vec<String> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let from = state.cursors.get(group).copied().unwrap_or(0);
        let to = (from + batch).min(state.messages.len());
        state.cursors.insert(group.to_string(), to);
        state.messages[from..to]
            .iter()
            .map(|(txn, partition, payload)| {
                format!(
                    r#"{{"transactionId":{},"partitionId":"1","partition":{},"leaseId":"lease","data":{payload}}}"#,
                    Value::from(txn.as_str()),
                    Value::from(partition.as_str())
                )
            })
            .collect()
    }

    async fn route(&self, method: &str, target: &str, body: &[u8]) -> (u16, String) {
        let raw = body;
        let body: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let param = |name: &str| {
            query
                .split('&')
                .filter_map(|kv| kv.split_once('='))
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        };
        match (method, path) {
            ("POST", "/api/v1/push") => {
                let items = serde_json::from_slice::<Push<'_>>(raw).map_or(Vec::new(), |p| p.items);
                (201, Value::Array(self.store(&items)).to_string())
            }
            ("POST", "/api/v1/transaction") => {
                let items = serde_json::from_slice::<Transaction<'_>>(raw)
                    .ok()
                    .and_then(|t| t.operations.into_iter().next())
                    .map_or(Vec::new(), |o| o.items);
                self.store(&items);
                (200, json!({"success": true, "results": []}).to_string())
            }
            ("POST", "/api/v1/ack/batch") => {
                let n = body["acknowledgments"].as_array().map_or(0, Vec::len);
                let results: Vec<Value> = (0..n)
                    .map(|i| match self.faults.refuse_acks {
                        false => json!({"index": i, "success": true, "error": null}),
                        true => json!({"index": i, "success": false, "error": "no such message"}),
                    })
                    .collect();
                (200, Value::Array(results).to_string())
            }
            ("GET", p) if p.starts_with("/api/v1/pop/queue/") => {
                let group = param("consumerGroup").unwrap_or_else(|| "__QUEUE_MODE__".into());
                let batch = param("batch").and_then(|b| b.parse().ok()).unwrap_or(1);
                let wait = param("timeout").and_then(|t| t.parse().ok()).unwrap_or(0);
                let until = Instant::now() + Duration::from_millis(wait);
                loop {
                    let messages = self.take(&group, batch);
                    if !messages.is_empty() {
                        let text = format!(
                            r#"{{"messages":[{}],"leaseId":"lease"}}"#,
                            messages.join(",")
                        );
                        return (200, text);
                    }
                    if Instant::now() >= until {
                        return (204, String::new());
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
            _ => (404, json!({"error": "no route"}).to_string()),
        }
    }
}
