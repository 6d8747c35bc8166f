"""DescribeTransactions, ListTransactions and DescribeProducers (kafka-port/src/txn/reads.rs)
against the real binary: kafka-python's KafkaAdminClient reads what a confluent-kafka
transactional producer leaves, while its transaction is open and after it ends."""

import pytest

pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")
from kafka import KafkaAdminClient, TopicPartition  # noqa: E402
from kafka.errors import TransactionalIdNotFoundError, UnknownTopicOrPartitionError  # noqa: E402

from test_kafka_transactions import create_topic, send, txn_producer  # noqa: E402


def states(admin, **filters) -> dict:
    """transactional id -> (producer id, state name) over every broker's listing."""
    out = {}
    for listings in admin.list_transactions(**filters).values():
        for t in listings:
            out[t.transactional_id] = (t.producer_id, str(getattr(t.state, "value", t.state)))
    return out


def state_name(s) -> str:
    return str(getattr(s, "value", s))


def test_an_open_transaction_is_described_listed_and_its_producer_shown(broker):
    create_topic(broker.kafka_bootstrap, "described", 2)
    p = txn_producer(broker.kafka_bootstrap, "writer-1")
    admin = KafkaAdminClient(bootstrap_servers=broker.kafka_bootstrap)
    try:
        p.begin_transaction()
        send(p, "described", [1, 2, 3], partition=1)

        d = admin.describe_transactions(["writer-1"])["writer-1"]
        assert state_name(d.state) == "Ongoing"
        assert d.topic_partitions == {TopicPartition("described", 1)}
        assert d.transaction_timeout_ms == 60_000
        assert d.transaction_start_time_ms > 0
        pid = d.producer_id
        assert pid >= 0

        assert states(admin)["writer-1"] == (pid, "Ongoing")
        assert "writer-1" in states(admin, state_filters=["Ongoing"])
        assert "writer-1" not in states(admin, state_filters=["CompleteCommit"])
        assert "writer-1" in states(admin, producer_id_filters=[pid])
        assert "writer-1" not in states(admin, producer_id_filters=[pid + 1000])

        got = admin.describe_producers([TopicPartition("described", 1)])
        [ps] = got[TopicPartition("described", 1)].active_producers
        assert ps.producer_id == pid
        assert ps.last_sequence == 2, "three records, sequences 0..2"
        assert ps.current_transaction_start_offset == 0
        assert admin.describe_producers([TopicPartition("described", 0)])[
            TopicPartition("described", 0)
        ].active_producers == []

        p.commit_transaction(30)
        d = admin.describe_transactions(["writer-1"])["writer-1"]
        assert state_name(d.state) == "CompleteCommit"
        assert d.topic_partitions == set()
        assert d.transaction_start_time_ms == -1
        assert states(admin, state_filters=["CompleteCommit"])["writer-1"] == (pid, "CompleteCommit")
        assert "writer-1" not in states(admin, state_filters=["Ongoing"])
        [ps] = admin.describe_producers([TopicPartition("described", 1)])[
            TopicPartition("described", 1)
        ].active_producers
        assert ps.current_transaction_start_offset == -1

        p.begin_transaction()
        send(p, "described", [4], partition=0)
        p.abort_transaction(30)
        assert state_name(admin.describe_transactions(["writer-1"])["writer-1"].state) == (
            "CompleteAbort"
        )
    finally:
        admin.close()


def test_unknown_ids_and_partitions_get_kafkas_errors(broker):
    create_topic(broker.kafka_bootstrap, "two", 2)
    admin = KafkaAdminClient(bootstrap_servers=broker.kafka_bootstrap)
    try:
        with pytest.raises(TransactionalIdNotFoundError):
            admin.describe_transactions(["nobody"])
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.describe_producers([TopicPartition("two", 5)])
        assert states(admin) == {}
        # A filter naming no Kafka state is answered (Kafka lists it as unknown), not refused.
        assert states(admin, state_filters=["NoSuchState"]) == {}
    finally:
        admin.close()


def offset_fetch_v7(port: int, group: str, topic: str, partition: int, stable: bool):
    """OffsetFetch v7 over a raw socket: (error code, committed offset) of one partition."""
    import socket
    import struct

    from raw_socket import kafka_request, read_kafka_frame

    def cstr(v: str) -> bytes:
        return bytes([len(v) + 1]) + v.encode()

    body = (
        cstr(group)
        + b"\x02" + cstr(topic) + b"\x02" + struct.pack(">i", partition) + b"\x00"
        + (b"\x01" if stable else b"\x00")
        + b"\x00"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(kafka_request(9, 7, 3, body, tags=True))
        resp = read_kafka_frame(s)
    corr, _tags, _throttle, ntopics = struct.unpack(">iBiB", resp[:10])
    assert (corr, ntopics - 1) == (3, 1)
    pos = 10
    pos += resp[pos]  # the topic name (compact: length + 1)
    assert resp[pos] - 1 == 1, "one partition"
    pos += 1
    index, offset, _epoch = struct.unpack(">iqi", resp[pos : pos + 16])
    assert index == partition
    pos += 16
    mlen = resp[pos]
    pos += 1 + max(mlen - 1, 0)
    (code,) = struct.unpack(">h", resp[pos : pos + 2])
    return code, offset


def test_require_stable_answers_unstable_while_a_transaction_holds_the_groups_offset(broker):
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CTp

    create_topic(broker.kafka_bootstrap, "stable-in", 1)
    create_topic(broker.kafka_bootstrap, "stable-out", 1)
    consumer = Consumer({"bootstrap.servers": broker.kafka_bootstrap, "group.id": "g-stable"})
    p = txn_producer(broker.kafka_bootstrap, "stable-writer")
    try:
        p.begin_transaction()
        send(p, "stable-out", [1])
        p.send_offsets_to_transaction([CTp("stable-in", 0, 5)], consumer.consumer_group_metadata(), 30)

        port = broker.kafka_port
        assert offset_fetch_v7(port, "g-stable", "stable-in", 0, stable=True) == (88, -1), (
            "UNSTABLE_OFFSET_COMMIT while the transaction is open"
        )
        assert offset_fetch_v7(port, "g-stable", "stable-in", 0, stable=False) == (0, -1)

        p.commit_transaction(30)
        assert offset_fetch_v7(port, "g-stable", "stable-in", 0, stable=True) == (0, 5)
    finally:
        consumer.close()
