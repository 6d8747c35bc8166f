"""SIGKILL at random moments under load loses no acknowledged write.

Producers push JSON messages with unique transactionIds and a per-partition
sequence number; a consumer group pops (subscriptionMode=all, long poll) and
acks. The broker is killed with SIGKILL at random moments (ROUNDS times) and
restarted on the same data dir; a producer resends an unanswered push with the
same transactionIds. Afterwards:
- every message whose push was answered 2xx (queued or duplicate) is present
  exactly once and in push order per partition (read with a fresh group);
- no message is delivered to the consumer group by a pop sent after an ack of
  it was answered with success;
- the consumer group got every accepted message.

Beside them, over the Kafka port (kept on one port across restarts, as Kafka clients
reconnect only to addresses they know): an idempotent confluent-kafka producer (acks=all)
and a Kafka consumer committing what it consumed as a group's offsets. Afterwards, and after one more
kill -9 following the group's last commit:
- every record the producer got a delivery report for is stored exactly once, at the offset
  reported, and no record is stored twice;
- the group's committed offsets are the last ones it was answered for, and a member of the
  group resumes from them.
"""

import random
import threading
import time
from collections import Counter, defaultdict

import httpx
import pytest

import queen_api
from queen_broker import free_port

confluent = pytest.importorskip("confluent_kafka", reason="confluent-kafka is in scripts/lib/requirements.txt")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

QUEUE = "crash"
PARTITIONS = [f"p{i}" for i in range(8)]
PRODUCERS = 4
CONSUMERS = 3
GROUP = "crash-group"
ROUNDS = 6
LEASE_SECONDS = 5
RETRY_FOR_S = 60.0  # how long a client keeps resending one request
KTOPIC = "crash-kafka"
KPARTITIONS = 2
KGROUP = "crash-kgroup"


class Ledger:
    """What the clients saw, recorded under one lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.accepted = defaultdict(list)  # partition -> seqs answered queued/duplicate, in order
        self.refused = defaultdict(set)  # partition -> seqs answered "failed"
        self.unanswered = defaultdict(set)  # partition -> seqs whose push never got an answer
        self.deliveries = []  # (time the pop was sent, transactionId) for GROUP
        self.acked = {}  # transactionId -> time its first successful ack was answered
        self.errors = []
        self.pushes = 0

    def error(self, where: str, error: BaseException) -> None:
        with self.lock:
            self.errors.append(f"{where}: {error!r}")


def retrying(call, deadline: float):
    """call() until it answers; network errors and 5xx are retried, 4xx raise."""
    while True:
        try:
            return call()
        except httpx.TransportError:
            pass
        except httpx.HTTPStatusError as error:
            if error.response.status_code < 500:
                raise
        if time.monotonic() > deadline:
            return None
        time.sleep(0.05)


def produce(n: int, broker, ledger: Ledger, stop: threading.Event) -> None:
    rng = random.Random(n)
    owned = PARTITIONS[n::PRODUCERS]
    next_seq = dict.fromkeys(owned, 0)
    with httpx.Client() as http:
        while not stop.is_set():
            partition = rng.choice(owned)
            seqs = list(range(next_seq[partition], next_seq[partition] + rng.randint(1, 5)))
            next_seq[partition] = seqs[-1] + 1
            items = [
                queen_api.item(QUEUE, partition, f"{partition}-{seq}", {"p": partition, "seq": seq})
                for seq in seqs
            ]
            try:
                results = retrying(lambda: queen_api.push(http, broker.url, items, timeout=5.0),
                                   time.monotonic() + RETRY_FOR_S)
            except Exception as error:  # noqa: BLE001 - reported by the test
                ledger.error(f"producer {n}", error)
                return
            with ledger.lock:
                ledger.pushes += 1
                if results is None:
                    ledger.unanswered[partition].update(seqs)
                    return
                for seq, result in zip(seqs, results):
                    if queen_api.accepted(result):
                        ledger.accepted[partition].append(seq)
                    else:
                        ledger.refused[partition].add(seq)
            time.sleep(0.002)


def consume(n: int, broker, ledger: Ledger, stop: threading.Event) -> None:
    with httpx.Client() as http:
        while not stop.is_set():
            sent = time.monotonic()
            try:
                messages = queen_api.pop(http, broker.url, QUEUE, group=GROUP, mode="all", batch=20,
                                         wait=True, timeout_ms=500, lease_seconds=LEASE_SECONDS)
            except httpx.TransportError:
                time.sleep(0.05)
                continue
            except Exception as error:  # noqa: BLE001
                if isinstance(error, httpx.HTTPStatusError) and error.response.status_code >= 500:
                    time.sleep(0.05)
                    continue
                ledger.error(f"consumer {n} pop", error)
                return
            if not messages:
                continue
            with ledger.lock:
                ledger.deliveries += [(sent, m["transactionId"]) for m in messages]
            try:
                results = retrying(lambda: queen_api.ack_batch(http, broker.url, messages, GROUP),
                                   time.monotonic() + RETRY_FOR_S)
            except Exception as error:  # noqa: BLE001
                ledger.error(f"consumer {n} ack", error)
                return
            answered = time.monotonic()
            with ledger.lock:
                for message, result in zip(messages, results or []):
                    if result.get("success"):
                        ledger.acked.setdefault(message["transactionId"], answered)


class KafkaLedger:
    """What the Kafka clients saw."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.delivered = {}  # value -> (partition, offset) of its delivery report
        self.failed = set()  # values reported failed (they may still be stored)
        self.produced = 0
        self.fatal = []  # fatal producer errors (a new producer takes over)
        self.committed = {}  # partition -> last offset a commit of it was answered for
        self.consumed = []  # (partition, offset, value) of each record the group member fetched
        self.errors = []


def kafka_thread(body):
    """Runs body(broker, ledger, stop), keeping what it raises for the test to report."""

    def run(broker, ledger: KafkaLedger, stop: threading.Event) -> None:
        try:
            body(broker, ledger, stop)
        except Exception as error:  # noqa: BLE001 - reported by the test
            ledger.errors.append(f"{body.__name__}: {error!r}")

    return run


def kafka_produce(broker, ledger: KafkaLedger, stop: threading.Event) -> None:
    def report(err, msg) -> None:
        with ledger.lock:
            if err is None:
                ledger.delivered[msg.value().decode()] = (msg.partition(), msg.offset())
            else:
                ledger.failed.add(msg.value().decode())

    n = 0
    while not stop.is_set():
        fatal = threading.Event()

        def on_error(err) -> None:
            if err.fatal():
                ledger.fatal.append(str(err))
                fatal.set()

        p = confluent.Producer({
            "bootstrap.servers": broker.kafka_bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": int(RETRY_FOR_S * 1000),
            "reconnect.backoff.max.ms": 500,
            "error_cb": on_error,
        })
        while not stop.is_set() and not fatal.is_set():
            try:
                p.produce(KTOPIC, f"k-{n}".encode(), partition=n % KPARTITIONS, on_delivery=report)
            except BufferError:
                p.poll(0.1)
                continue
            n += 1
            with ledger.lock:
                ledger.produced += 1
            p.poll(0.005)
        left = p.flush(RETRY_FOR_S + 5)
        if left:
            ledger.errors.append(f"{left} records had no delivery report after the flush")


def kafka_consume(broker, ledger: KafkaLedger, stop: threading.Event) -> None:
    c = confluent.Consumer({
        "bootstrap.servers": broker.kafka_bootstrap,
        "group.id": KGROUP,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
        "reconnect.backoff.max.ms": 500,
    })
    # Assigned, not subscribed: a subscribed group forms 3 s after its first join
    # (group.initial.rebalance.delay.ms) and every kill empties it, so under kills every
    # second or two it would never consume. Its commits are the group's all the same
    # (generation -1, Kafka's standalone commits), and a subscribed member resumes from them.
    c.assign([confluent.TopicPartition(KTOPIC, p, confluent.OFFSET_STORED) for p in range(KPARTITIONS)])

    def commit(last: dict[int, int]) -> bool:
        try:
            c.commit(offsets=[confluent.TopicPartition(KTOPIC, p, o) for p, o in last.items()],
                     asynchronous=False)
        except confluent.KafkaException:
            return False  # a kill or a rebalance in between; what follows commits again
        with ledger.lock:
            ledger.committed.update(last)
        return True

    pending: dict[int, int] = {}
    try:
        while not stop.is_set():
            for m in c.consume(num_messages=100, timeout=0.2):
                if m.error() is None:
                    pending[m.partition()] = m.offset() + 1
                    with ledger.lock:
                        ledger.consumed.append((m.partition(), m.offset(), m.value().decode()))
            if pending and commit(pending):
                pending = {}
        # The last commit, answered before the next kill: the one the group must resume from.
        deadline = time.monotonic() + RETRY_FOR_S
        while pending and not commit(pending) and time.monotonic() < deadline:
            time.sleep(0.2)
        if pending:
            ledger.errors.append("the group's last commit was never answered")
    finally:
        c.close()


def check_kafka(broker, ledger: KafkaLedger) -> None:
    print(f"crash kafka: {ledger.produced} produced, {len(ledger.delivered)} delivered, "
          f"{len(ledger.failed)} failed, {len(ledger.fatal)} fatal, {len(ledger.consumed)} consumed, "
          f"committed {ledger.committed}")
    # Idempotence survives kill -9: the retried batches are taken (or known as duplicates),
    # so with a 60 s message timeout and under a second of downtime no report fails and the
    # producer never hits a fatal error (an epoch bump after lost in-flight batches is not).
    assert not ledger.fatal, f"fatal producer errors: {ledger.fatal[:5]}"
    assert not ledger.failed, f"{len(ledger.failed)} deliveries failed: {sorted(ledger.failed)[:10]}"
    assert not ledger.errors, ledger.errors
    assert ledger.produced == len(ledger.delivered), \
        f"{ledger.produced} produced, {len(ledger.delivered)} reports"
    assert ledger.delivered and ledger.committed, "the Kafka clients produced or committed nothing"
    reader = confluent.Consumer({"bootstrap.servers": broker.kafka_bootstrap,
                                 "group.id": "crash-kverify", "enable.auto.commit": False})
    stored = []
    try:
        highs = {p: reader.get_watermark_offsets(confluent.TopicPartition(KTOPIC, p), timeout=10)[1]
                 for p in range(KPARTITIONS)}
        reader.assign([confluent.TopicPartition(KTOPIC, p, 0) for p in range(KPARTITIONS)])
        deadline = time.monotonic() + 60
        while len(stored) < sum(highs.values()) and time.monotonic() < deadline:
            for m in reader.consume(num_messages=1000, timeout=0.5):
                assert m.error() is None, m.error()
                stored.append((m.value().decode(), (m.partition(), m.offset())))
    finally:
        reader.close()
    assert len(stored) == sum(highs.values()), f"read {len(stored)} of {highs}"
    twice = [v for v, n in Counter(v for v, _ in stored).items() if n > 1]
    assert not twice, f"{len(twice)} records stored more than once: {twice[:10]}"
    where = dict(stored)
    lost = [v for v in ledger.delivered if v not in where]
    assert not lost, f"{len(lost)} delivered records lost: {lost[:10]}"
    moved = [v for v, at in ledger.delivered.items() if where[v] != at]
    assert not moved, f"records stored at other offsets than reported: {moved[:10]}"
    unknown = [v for v in where if v not in ledger.delivered]
    assert not unknown, f"stored records nobody got a report for: {unknown[:10]}"

    # What the committing member fetched across the kills is what is stored there, and it
    # saw every offset below what it committed (fetched again after a restart is fine).
    at = {pos: v for v, pos in stored}
    wrong = [(p, o, v) for p, o, v in ledger.consumed if at.get((p, o)) != v]
    assert not wrong, f"fetched records differ from the stored ones: {wrong[:10]}"
    seen = {(p, o) for p, o, _ in ledger.consumed}
    for part, upto in ledger.committed.items():
        skipped = [o for o in range(upto) if (part, o) not in seen]
        assert not skipped, f"partition {part}: committed {upto} but never fetched {skipped[:10]}"

    # The group resumes where its last answered commit said, after the kill that followed it.
    member = confluent.Consumer({"bootstrap.servers": broker.kafka_bootstrap, "group.id": KGROUP,
                                 "auto.offset.reset": "earliest",
                                 "enable.auto.commit": False, "session.timeout.ms": 6000,
                                 "heartbeat.interval.ms": 500})
    try:
        committed = member.committed([confluent.TopicPartition(KTOPIC, p) for p in range(KPARTITIONS)],
                                     timeout=10)
        assert {tp.partition: tp.offset for tp in committed} == {
            p: ledger.committed.get(p, confluent.OFFSET_INVALID) for p in range(KPARTITIONS)}
        p = confluent.Producer({"bootstrap.servers": broker.kafka_bootstrap, "acks": "all"})
        for part in range(KPARTITIONS):
            p.produce(KTOPIC, b"after", partition=part)
        assert p.flush(30) == 0
        member.subscribe([KTOPIC])
        first = {}
        deadline = time.monotonic() + 60
        while len(first) < KPARTITIONS and time.monotonic() < deadline:
            for m in member.consume(num_messages=100, timeout=0.5):
                assert m.error() is None, m.error()
                first.setdefault(m.partition(), m.offset())
        assert first == {p: ledger.committed.get(p, 0) for p in range(KPARTITIONS)}
    finally:
        member.close()


@pytest.mark.timeout(480)
def test_sigkill_at_random_moments_loses_no_acknowledged_write(broker_factory):
    broker = broker_factory("crash", kafka_port=free_port()).start()
    admin = AdminClient({"bootstrap.servers": broker.kafka_bootstrap})
    admin.create_topics([NewTopic(KTOPIC, KPARTITIONS, 1)])[KTOPIC].result(timeout=30)
    ledger, kledger = Ledger(), KafkaLedger()
    stop_producing, stop_consuming = threading.Event(), threading.Event()
    producers = [threading.Thread(target=produce, args=(n, broker, ledger, stop_producing), daemon=True)
                 for n in range(PRODUCERS)]
    producers.append(threading.Thread(target=kafka_thread(kafka_produce),
                                      args=(broker, kledger, stop_producing), daemon=True))
    consumers = [threading.Thread(target=consume, args=(n, broker, ledger, stop_consuming), daemon=True)
                 for n in range(CONSUMERS)]
    consumers.append(threading.Thread(target=kafka_thread(kafka_consume),
                                      args=(broker, kledger, stop_consuming), daemon=True))
    for thread in producers + consumers:
        thread.start()

    rng = random.Random(20261202)
    try:
        for _ in range(ROUNDS):  # restarts happen here, in the main thread (see queen_broker)
            time.sleep(rng.uniform(1.0, 2.5))
            broker.kill()
            time.sleep(rng.uniform(0.0, 0.5))
            broker.start()
        time.sleep(2.0)
    finally:
        stop_producing.set()
        for thread in producers:
            thread.join(timeout=RETRY_FOR_S + 10)
        stop_consuming.set()
        for thread in consumers:
            thread.join(timeout=RETRY_FOR_S + 10)
    assert not any(t.is_alive() for t in producers + consumers), "a client thread hangs"
    # Once more after the Kafka group's last commit: it must survive a crash too.
    broker.kill()
    broker.start()
    last_restart = time.monotonic()
    assert not ledger.errors, ledger.errors
    check_kafka(broker, kledger)
    total = sum(len(seqs) for seqs in ledger.accepted.values())
    print(f"crash: {ledger.pushes} pushes, {total} accepted messages, "
          f"{len(ledger.deliveries)} deliveries, {len(ledger.acked)} acked, {broker.starts} starts")
    assert total > 0 and ledger.acked, "the run produced or consumed nothing"

    with httpx.Client() as http:
        for partition in PARTITIONS:
            stored = queen_api.drain(http, broker.url, QUEUE, "crash-verify", partition=partition)
            assert all(m["data"]["p"] == partition for m in stored), f"foreign message in {partition}"
            check_partition(partition, [m["data"]["seq"] for m in stored], ledger)

        # Leases of batches popped before a kill and never acked expire; then the
        # group drains the rest of the queue.
        time.sleep(max(0.0, last_restart + LEASE_SECONDS + 1 - time.monotonic()))
        sent = time.monotonic()
        rest = queen_api.drain(http, broker.url, QUEUE, GROUP)
        ledger.deliveries += [(sent, m["transactionId"]) for m in rest]

    redelivered = sorted({txn for sent, txn in ledger.deliveries
                          if txn in ledger.acked and sent > ledger.acked[txn]})
    assert not redelivered, f"{len(redelivered)} acked messages delivered again: {redelivered[:10]}"
    delivered = {txn for _, txn in ledger.deliveries}
    never = [f"{p}-{seq}" for p, seqs in ledger.accepted.items() for seq in seqs
             if f"{p}-{seq}" not in delivered]
    assert not never, f"{len(never)} accepted messages never reached {GROUP}: {never[:10]}"


def check_partition(partition: str, seqs: list[int], ledger: Ledger) -> None:
    accepted = ledger.accepted[partition]
    assert accepted == sorted(accepted)
    duplicates = sorted(seq for seq, n in Counter(seqs).items() if n > 1)
    assert not duplicates, f"{partition}: stored more than once: {duplicates[:10]}"
    assert seqs == sorted(seqs), f"{partition}: out of push order: {seqs[:50]}"
    missing = sorted(set(accepted) - set(seqs))
    assert not missing, f"{partition}: {len(missing)} accepted pushes lost: {missing[:10]}"
    refused = sorted(ledger.refused[partition] & set(seqs))
    assert not refused, f"{partition}: pushes answered 'failed' are stored: {refused[:10]}"
    unknown = sorted(set(seqs) - set(accepted) - ledger.unanswered[partition])
    assert not unknown, f"{partition}: stored messages nobody pushed: {unknown[:10]}"
