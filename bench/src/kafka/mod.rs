//! The Kafka driver: the same scenarios through the broker's Kafka door, as a plain Kafka
//! client would drive it. Push = one Produce (acks=-1) per batch; pop = Fetch from the
//! partitions this consumer owns by static assignment (consumer `i` of `n` owns the
//! partitions `p` with `p % n == i`), starting at the group's committed offset; ack =
//! OffsetCommit of the next offset per partition as a simple consumer (generation -1, no
//! member id). Kafka has no per-message transaction id or lease: a record's key carries the
//! run tag and the message id instead (`{run_tag}-{id}`, as the HTTP driver's transaction id),
//! so a record another run left in a reused topic is refused as malformed, never counted as
//! this run's; the partition it was produced to is checked on the way back.

mod answers;
#[cfg(test)]
mod answers_tests;
mod conn;
#[cfg(test)]
pub mod mock_kafka;
mod reader;
mod records;
mod requests;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context};
use bytes::Bytes;
use tokio::sync::OnceCell;

use crate::driver::{AckOutcome, Connector, Delivery, Driver, OutMessage, PopRequest, PushStatus};
use crate::payload::payload_fields;
use crate::queen_http::txn_id;

use conn::KafkaConn;
use records::Fetched;

/// Most record bytes one fetch asks for, over all partitions, and per partition.
const FETCH_MAX_BYTES: i32 = 16 << 20;
const FETCH_PARTITION_MAX_BYTES: i32 = 1 << 20;
/// Slack over the long-poll time before a fetch counts as timed out.
const FETCH_SLACK: Duration = Duration::from_secs(5);
/// Slack over the broker's produce timeout before the tool gives up on the answer: the
/// broker's REQUEST_TIMED_OUT must arrive before the client drops the connection.
const PRODUCE_SLACK: Duration = Duration::from_secs(5);
/// Kafka's own limit on topic names.
const MAX_TOPIC_BYTES: usize = 249;

#[derive(Debug, Clone)]
pub struct Kafka {
    addr: String,
    topic: String,
    /// This run's tag: every record key carries it.
    run_tag: Arc<str>,
    /// Partitions to create the topic with.
    partitions: i32,
    request_timeout: Duration,
    /// The topic's real partition count, learnt once per run by the first worker.
    topic_partitions: Arc<OnceCell<i32>>,
}

impl Kafka {
    pub fn new(
        addr: &str,
        topic: &str,
        run_tag: &str,
        partitions: u32,
        request_timeout: Duration,
    ) -> anyhow::Result<Self> {
        if topic.is_empty()
            || topic.len() > MAX_TOPIC_BYTES
            || !topic
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        {
            bail!("topic name {topic:?}: 1 to 249 letters, digits, '-', '_' or '.'");
        }
        Ok(Self {
            addr: addr.to_string(),
            topic: topic.to_string(),
            run_tag: run_tag.into(),
            partitions: i32::try_from(partitions).context("--partitions above 2^31")?,
            request_timeout,
            topic_partitions: Arc::default(),
        })
    }

    fn timeout_ms(&self) -> i32 {
        i32::try_from(self.request_timeout.as_millis()).unwrap_or(i32::MAX)
    }

    /// Checks the broker serves every API version used, creates the topic (or finds it) and
    /// answers its partition count.
    async fn set_up(&self, conn: &mut KafkaConn) -> anyhow::Result<i32> {
        let timeout = self.request_timeout;
        let answer = conn
            .request(requests::API_VERSIONS, &requests::api_versions(), timeout)
            .await?;
        let served = answers::api_versions(answer)?;
        for (key, version) in requests::NEEDED {
            match served.get(&(key as i16)) {
                Some(&(min, max)) if (min..=max).contains(&version) => {}
                other => bail!(
                    "the broker serves {key:?} {:?}, this tool needs v{version}",
                    other.map(|(min, max)| format!("v{min}..=v{max}"))
                ),
            }
        }
        let create = requests::create_topic(&self.topic, self.partitions, self.timeout_ms());
        let answer = conn
            .request(requests::CREATE_TOPICS, &create, timeout)
            .await?;
        for (name, error, message) in answers::create_topics(answer)? {
            if name == self.topic && !matches!(error, answers::NONE | answers::TOPIC_ALREADY_EXISTS)
            {
                bail!(
                    "creating topic {name}: {} {}",
                    answers::error_name(error),
                    message.unwrap_or_default()
                );
            }
        }
        let answer = conn
            .request(
                requests::METADATA,
                &requests::metadata(&self.topic),
                timeout,
            )
            .await?;
        let topics = answers::metadata(answer)?;
        let (_, error, count) = topics
            .into_iter()
            .find(|(name, _, _)| *name == self.topic)
            .ok_or_else(|| anyhow!("metadata does not name topic {}", self.topic))?;
        if error != answers::NONE {
            bail!("metadata of {}: {}", self.topic, answers::error_name(error));
        }
        let count = i32::try_from(count)
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| anyhow!("topic {} has {count} partitions", self.topic))?;
        if count != self.partitions {
            // A reused topic keeps its own count; the report's `partitions` is the flag's.
            eprintln!(
                "queen-bench: topic {} exists with {count} partitions, not --partitions {}; \
                 the run uses {count}",
                self.topic, self.partitions
            );
        }
        Ok(count)
    }
}

impl Connector for Kafka {
    type Driver = KafkaDriver;

    fn name(&self) -> &'static str {
        "kafka"
    }

    async fn connect(&self) -> anyhow::Result<KafkaDriver> {
        let mut conn = KafkaConn::new(&self.addr);
        let partitions = *self
            .topic_partitions
            .get_or_try_init(|| self.set_up(&mut conn))
            .await?;
        Ok(KafkaDriver {
            conn,
            config: self.clone(),
            partitions,
            positions: None,
            buffered: VecDeque::new(),
            fetched: false,
            push_error: None,
        })
    }
}

/// What a commit needs back: the record's partition and offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KafkaAck {
    pub partition: i32,
    pub offset: i64,
}

/// A fetched record not yet handed out.
struct Buffered {
    partition: i32,
    record: Fetched,
}

pub struct KafkaDriver {
    conn: KafkaConn,
    config: Kafka,
    partitions: i32,
    /// Next offset to fetch per owned partition, once read from the group's commits.
    positions: Option<BTreeMap<i32, i64>>,
    buffered: VecDeque<Buffered>,
    /// Whether the last pop sent a Fetch (see `Driver::last_pop_on_wire`).
    fetched: bool,
    /// The first partition error of the last Produce (see `Driver::take_push_error`).
    push_error: Option<String>,
}

/// The Kafka group of a consumer: its consumer group, or in queue mode one group per topic
/// whose members split the partitions.
fn group_name(topic: &str, group: Option<&str>) -> String {
    group.map_or_else(|| format!("{topic}-queue"), str::to_string)
}

/// The partitions consumer `worker` of `workers` owns.
fn owned_partitions(partitions: i32, worker: usize, workers: usize) -> Vec<i32> {
    let workers = workers.max(1);
    (0..partitions)
        .filter(|&p| usize::try_from(p).is_ok_and(|p| p % workers == worker))
        .collect()
}

/// A record as the consumer sees it: our fields only when the value is our payload, the key
/// is this run's key of that payload's id and it came from the partition that payload was
/// produced to.
fn delivery(run_tag: &str, partitions: i32, b: Buffered) -> Delivery<KafkaAck> {
    let value = b.record.value.unwrap_or_default();
    let fields = payload_fields(&value).filter(|f| {
        b.record.key.as_deref() == Some(txn_id(run_tag, f.seq).as_bytes())
            && kafka_partition(f.p, partitions) == b.partition
    });
    Delivery {
        fields,
        payload: value,
        ack: KafkaAck {
            partition: b.partition,
            offset: b.record.offset,
        },
    }
}

/// The Kafka partition a message of bench partition `p` goes to.
fn kafka_partition(p: u32, partitions: i32) -> i32 {
    // `partitions` is positive (checked at set-up), so the result fits.
    (i64::from(p) % i64::from(partitions.max(1))) as i32
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl KafkaDriver {
    /// The owned partitions' positions: the group's committed offsets, else 0.
    async fn positions(&mut self, group: &str, request: &PopRequest) -> anyhow::Result<()> {
        if self.positions.is_some() {
            return Ok(());
        }
        let owned = owned_partitions(self.partitions, request.worker, request.workers);
        let mut positions = BTreeMap::new();
        if !owned.is_empty() {
            let topic = &self.config.topic;
            let message = requests::offset_fetch(group, topic, owned.clone());
            let answer = self
                .conn
                .request(
                    requests::OFFSET_FETCH,
                    &message,
                    self.config.request_timeout,
                )
                .await?;
            let committed = answers::offset_fetch(answer, topic)?;
            for p in owned {
                let (offset, error) = committed.get(&p).copied().unwrap_or((-1, 0));
                if error != answers::NONE {
                    bail!(
                        "committed offset of {topic}/{p}: {}",
                        answers::error_name(error)
                    );
                }
                positions.insert(p, offset.max(0));
            }
        }
        self.positions = Some(positions);
        Ok(())
    }

    /// One fetch of every owned partition; new records go to the buffer and each read
    /// partition's position moves past its last batch. A partition's error is answered after
    /// the others' records were buffered.
    async fn fetch(&mut self, wait_ms: u64) -> anyhow::Result<()> {
        let positions: Vec<(i32, i64)> = self
            .positions
            .as_ref()
            .map(|p| p.iter().map(|(&k, &v)| (k, v)).collect())
            .unwrap_or_default();
        let wait = Duration::from_millis(wait_ms);
        if positions.is_empty() {
            // More consumers than partitions: this one owns none, and asks nothing.
            tokio::time::sleep(wait).await;
            return Ok(());
        }
        self.fetched = true;
        let topic = &self.config.topic;
        let message = requests::fetch(
            topic,
            &positions,
            i32::try_from(wait_ms).unwrap_or(i32::MAX),
            FETCH_MAX_BYTES,
            FETCH_PARTITION_MAX_BYTES,
        );
        let answer = self
            .conn
            .request(requests::FETCH, &message, wait + FETCH_SLACK)
            .await?;
        // A partition in error or with bad bytes is reported, but the other partitions'
        // records are kept and their positions move: one bad partition must not starve the
        // rest of this worker's.
        let mut fresh: Vec<(i32, Option<i64>, Vec<Fetched>)> = Vec::new();
        let mut failures: Vec<String> = Vec::new();
        for part in answers::fetch(answer)? {
            let from = match self.positions.as_ref().and_then(|p| p.get(&part.partition)) {
                Some(&from) if part.topic == *topic => from,
                _ => bail!(
                    "fetch answered {}/{}, which was not asked",
                    part.topic,
                    part.partition
                ),
            };
            if part.error != answers::NONE {
                failures.push(format!(
                    "fetch {topic}/{} at {from}: {}",
                    part.partition,
                    answers::error_name(part.error)
                ));
                continue;
            }
            let decoded = match records::decode_batches(part.records.unwrap_or_default()) {
                Ok(decoded) => decoded,
                Err(error) => {
                    failures.push(format!("records of {topic}/{}: {error:#}", part.partition));
                    continue;
                }
            };
            // The batch holding the asked offset may start before it (its earlier records
            // were read before); a record of a batch wholly below it is the broker ignoring
            // the fetch offset, reported rather than dropped in silence.
            let mut below = 0usize;
            let records: Vec<Fetched> = decoded
                .records
                .into_iter()
                .filter(|r| {
                    below += usize::from(r.offset < from && r.batch_end <= from);
                    r.offset >= from
                })
                .collect();
            if below > 0 {
                failures.push(format!(
                    "fetch {topic}/{} at {from}: {below} records of batches below that offset",
                    part.partition
                ));
            }
            fresh.push((part.partition, decoded.next_offset, records));
        }
        for (partition, next, records) in fresh {
            let last = records.last().map(|r| r.offset.saturating_add(1));
            if let (Some(next), Some(positions)) = (next.max(last), self.positions.as_mut()) {
                let position = positions.entry(partition).or_insert(next);
                *position = (*position).max(next);
            }
            self.buffered.extend(
                records
                    .into_iter()
                    .map(|record| Buffered { partition, record }),
            );
        }
        if !failures.is_empty() {
            bail!("{}", failures.join("; "));
        }
        Ok(())
    }
}

impl Driver for KafkaDriver {
    type Ack = KafkaAck;

    async fn push(&mut self, batch: &[OutMessage]) -> anyhow::Result<Vec<PushStatus>> {
        // One record batch per partition, partitions in the order they first appear.
        let mut order: Vec<i32> = Vec::new();
        let mut by_partition: HashMap<i32, Vec<usize>> = HashMap::new();
        for (i, m) in batch.iter().enumerate() {
            let p = kafka_partition(m.partition, self.partitions);
            by_partition
                .entry(p)
                .or_insert_with(|| {
                    order.push(p);
                    Vec::new()
                })
                .push(i);
        }
        let ts = now_ms();
        let mut batches = Vec::with_capacity(order.len());
        for &p in &order {
            let items = by_partition.get(&p).map_or(&[][..], Vec::as_slice);
            let records = items.iter().map(|&i| {
                let m = &batch[i];
                (
                    Bytes::from(txn_id(&self.config.run_tag, m.id)),
                    Bytes::copy_from_slice(m.payload.as_bytes()),
                )
            });
            batches.push((p, records::encode_batch(records, ts)?));
        }
        let message = requests::produce(&self.config.topic, batches, self.config.timeout_ms());
        let answer = self
            .conn
            .request(
                requests::PRODUCE,
                &message,
                self.config.request_timeout + PRODUCE_SLACK,
            )
            .await?;
        let errors = answers::produce(answer)?;
        let mut statuses = vec![PushStatus::Failed; batch.len()];
        self.push_error = None;
        for &p in &order {
            let items = by_partition.get(&p).map_or(&[][..], Vec::as_slice);
            match errors.get(&(self.config.topic.clone(), p)) {
                Some(&answers::NONE) => {
                    for &i in items {
                        statuses[i] = PushStatus::Accepted;
                    }
                }
                other => {
                    self.push_error.get_or_insert_with(|| match other {
                        Some(&code) => format!(
                            "produce {}/{p}: {}",
                            self.config.topic,
                            answers::error_name(code)
                        ),
                        None => {
                            format!("produce {}/{p}: partition not answered", self.config.topic)
                        }
                    });
                }
            }
        }
        Ok(statuses)
    }

    async fn push_transaction(&mut self, _batch: &[OutMessage]) -> anyhow::Result<Vec<PushStatus>> {
        bail!("transactions are unsupported with --driver kafka")
    }

    async fn pop(&mut self, request: &PopRequest) -> anyhow::Result<Vec<Delivery<KafkaAck>>> {
        let group = group_name(&self.config.topic, request.group.as_deref());
        self.fetched = false;
        self.positions(&group, request).await?;
        if self.buffered.is_empty() {
            self.fetch(request.wait_ms).await?;
        }
        let n = request.batch.min(self.buffered.len());
        let partitions = self.partitions;
        let run_tag = &self.config.run_tag;
        Ok(self
            .buffered
            .drain(..n)
            .map(|b| delivery(run_tag, partitions, b))
            .collect())
    }

    fn last_pop_on_wire(&self) -> bool {
        self.fetched
    }

    fn take_push_error(&mut self) -> Option<String> {
        self.push_error.take()
    }

    async fn ack(&mut self, group: Option<&str>, acks: &[KafkaAck]) -> anyhow::Result<AckOutcome> {
        let group = group_name(&self.config.topic, group);
        let mut next: BTreeMap<i32, i64> = BTreeMap::new();
        for a in acks {
            let offset = next.entry(a.partition).or_insert(0);
            *offset = (*offset).max(a.offset.saturating_add(1));
        }
        let offsets: Vec<(i32, i64)> = next.into_iter().collect();
        let message = requests::offset_commit(&group, &self.config.topic, &offsets);
        let answer = self
            .conn
            .request(
                requests::OFFSET_COMMIT,
                &message,
                self.config.request_timeout,
            )
            .await?;
        let errors = answers::offset_commit(answer, &self.config.topic)?;
        let mut outcome = AckOutcome::default();
        for a in acks {
            match errors.get(&a.partition) {
                Some(&answers::NONE) => outcome.ok += 1,
                other => {
                    outcome.failed += 1;
                    if outcome.first_error.is_none() {
                        outcome.first_error = Some(match other {
                            Some(&code) => format!("commit: {}", answers::error_name(code)),
                            None => format!("commit: partition {} not answered", a.partition),
                        });
                    }
                }
            }
        }
        Ok(outcome)
    }
}
