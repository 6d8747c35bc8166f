"""Kafka transactions through the Kafka door, against the real binary with confluent-kafka
(docs/kafka-transactions.md, layer 3): commit and abort, read_committed against
read_uncommitted consumers (values compared), offsets sent to a transaction committed only
with it, a fenced producer, and a producer killed mid-transaction with the broker.

Only Kafka consumers read here: hiding open and aborted records from HTTP readers is the
engine's layer 4 (another branch)."""

import json

import pytest
from queen_broker import free_port

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=30)


def txn_producer(bootstrap: str, txn_id: str, **extra) -> Producer:
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": txn_id,
            "transaction.timeout.ms": 60_000,
            "linger.ms": 5,
            **extra,
        }
    )
    p.init_transactions(30)
    return p


def send(p: Producer, topic: str, values: list[int], partition: int = 0) -> None:
    for v in values:
        p.produce(topic, value=json.dumps({"v": v}).encode(), partition=partition)
    p.flush(30)


def read_values(bootstrap: str, topic: str, isolation: str, partitions: int = 1,
                want: int | None = None) -> list[int]:
    """Every value a consumer of that isolation level reads from the start, until the end
    offsets it was told (bounded by a count of empty polls)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{isolation}-{topic}",
            "isolation.level": isolation,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got: list[int] = []
        empty = 0
        while empty < 6 and (want is None or len(got) < want):
            msgs = c.consume(100, timeout=1.0)
            if not msgs:
                empty += 1
                continue
            for m in msgs:
                if m.error():
                    if m.error().code() == ck.KafkaError._PARTITION_EOF:
                        continue
                    raise KafkaException(m.error())
                got.append(json.loads(m.value())["v"])
        return got
    finally:
        c.close()


def watermarks(bootstrap: str, topic: str, isolation: str) -> tuple[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "wm",
                  "isolation.level": isolation})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)
    finally:
        c.close()


def test_committed_records_are_read_and_aborted_ones_only_uncommitted(broker_factory):
    b = broker_factory("ktxn", kafka_port=free_port()).start()
    boot = b.kafka_bootstrap
    create_topic(boot, "tx-a", 2)
    p = txn_producer(boot, "t-commit-abort")

    p.begin_transaction()
    send(p, "tx-a", [1, 2, 3])
    send(p, "tx-a", [10], partition=1)
    p.commit_transaction(30)

    p.begin_transaction()
    send(p, "tx-a", [4, 5])
    p.abort_transaction(30)

    p.begin_transaction()
    send(p, "tx-a", [6])
    p.commit_transaction(30)

    # Offsets: 1,2,3 (0-2), commit marker (3), 4,5 (4-5), abort marker (6), 6 (7), marker (8).
    committed = read_values(boot, "tx-a", "read_committed", 2)
    assert sorted(committed) == [1, 2, 3, 6, 10], committed
    uncommitted = read_values(boot, "tx-a", "read_uncommitted", 2)
    assert sorted(uncommitted) == [1, 2, 3, 4, 5, 6, 10], uncommitted
    assert watermarks(boot, "tx-a", "read_committed") == (0, 9)
    p.flush(5)


def test_an_open_transaction_holds_read_committed_at_its_first_offset(broker_factory):
    b = broker_factory("ktxn-open", kafka_port=free_port()).start()
    boot = b.kafka_bootstrap
    create_topic(boot, "tx-open")
    plain = Producer({"bootstrap.servers": boot})
    plain.produce("tx-open", value=json.dumps({"v": 0}).encode(), partition=0)
    assert plain.flush(30) == 0
    p = txn_producer(boot, "t-open")
    p.begin_transaction()
    send(p, "tx-open", [1, 2])
    # The last stable offset is the open transaction's first offset.
    assert watermarks(boot, "tx-open", "read_committed") == (0, 1)
    assert watermarks(boot, "tx-open", "read_uncommitted") == (0, 3)
    assert read_values(boot, "tx-open", "read_committed") == [0]
    assert read_values(boot, "tx-open", "read_uncommitted", want=3) == [0, 1, 2]
    p.commit_transaction(30)
    assert read_values(boot, "tx-open", "read_committed", want=3) == [0, 1, 2]


def committed_offset(boot: str, group: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": boot, "group.id": group})
    try:
        (tp,) = c.committed([TopicPartition(topic, 0)], timeout=10)
        return tp.offset
    finally:
        c.close()


def test_offsets_sent_to_a_transaction_commit_only_with_it(broker_factory):
    b = broker_factory("ktxn-offsets", kafka_port=free_port()).start()
    boot = b.kafka_bootstrap
    create_topic(boot, "tx-in")
    create_topic(boot, "tx-out")
    plain = Producer({"bootstrap.servers": boot})
    for i in range(4):
        plain.produce("tx-in", value=json.dumps({"v": i}).encode(), partition=0)
    assert plain.flush(30) == 0

    consumer = Consumer(
        {
            "bootstrap.servers": boot,
            "group.id": "g-txn",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe(["tx-in"])
    msgs: list = []
    for _ in range(30):
        msgs.extend(m for m in consumer.consume(10, timeout=1.0) if not m.error())
        if len(msgs) >= 4:
            break
    assert len(msgs) == 4
    p = txn_producer(boot, "t-offsets")

    p.begin_transaction()
    send(p, "tx-out", [100])
    p.send_offsets_to_transaction([TopicPartition("tx-in", 0, 2)],
                                  consumer.consumer_group_metadata(), 30)
    p.abort_transaction(30)
    assert committed_offset(boot, "g-txn", "tx-in") < 0, "an abort commits no offset"

    p.begin_transaction()
    send(p, "tx-out", [200])
    p.send_offsets_to_transaction([TopicPartition("tx-in", 0, 4)],
                                  consumer.consumer_group_metadata(), 30)
    p.commit_transaction(30)
    consumer.close()
    assert committed_offset(boot, "g-txn", "tx-in") == 4
    assert read_values(boot, "tx-out", "read_committed") == [200]


def test_a_new_producer_fences_the_old_one_and_aborts_its_transaction(broker_factory):
    b = broker_factory("ktxn-fence", kafka_port=free_port()).start()
    boot = b.kafka_bootstrap
    create_topic(boot, "tx-fence")
    old = txn_producer(boot, "t-fence")
    old.begin_transaction()
    send(old, "tx-fence", [1])

    new = txn_producer(boot, "t-fence")
    with pytest.raises(KafkaException) as fenced:
        old.produce("tx-fence", value=json.dumps({"v": 2}).encode(), partition=0)
        old.flush(10)
        old.commit_transaction(30)
    assert fenced.value.args[0].fatal(), fenced.value.args[0]

    new.begin_transaction()
    send(new, "tx-fence", [3])
    new.commit_transaction(30)
    assert read_values(boot, "tx-fence", "read_committed") == [3]
    assert sorted(read_values(boot, "tx-fence", "read_uncommitted")) in ([1, 3], [1, 2, 3])


def test_a_transaction_open_at_a_sigkill_is_aborted_and_commits_survive(broker_factory):
    b = broker_factory("ktxn-crash", kafka_port=free_port()).start()
    boot = b.kafka_bootstrap
    create_topic(boot, "tx-crash")
    p = txn_producer(boot, "t-crash")
    p.begin_transaction()
    send(p, "tx-crash", [1, 2])
    p.commit_transaction(30)
    p.begin_transaction()
    send(p, "tx-crash", [3])
    b.kill()
    b.start()
    # A new incarnation of the producer (the old one died with the broker): its
    # InitProducerId aborts the open transaction.
    p2 = txn_producer(boot, "t-crash")
    p2.begin_transaction()
    send(p2, "tx-crash", [4])
    p2.commit_transaction(30)
    assert read_values(boot, "tx-crash", "read_committed") == [1, 2, 4]
    assert read_values(boot, "tx-crash", "read_uncommitted") == [1, 2, 3, 4]


def test_an_open_transaction_times_out_after_a_restart(broker_factory):
    b = broker_factory("ktxn-timeout", kafka_port=free_port()).start()
    boot = b.kafka_bootstrap
    create_topic(boot, "tx-timeout")
    p = txn_producer(boot, "t-timeout", **{"transaction.timeout.ms": 1000})
    p.begin_transaction()
    send(p, "tx-timeout", [7])
    b.kill()
    b.start()
    # The engine's tick aborts it: read_committed then sees past it (nothing committed).
    plain = Producer({"bootstrap.servers": boot})
    plain.produce("tx-timeout", value=json.dumps({"v": 8}).encode(), partition=0)
    assert plain.flush(30) == 0
    assert read_values(boot, "tx-timeout", "read_committed", want=1) == [8]
