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


def uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    out, shift = 0, 0
    while True:
        b = buf[pos]
        pos += 1
        out |= (b & 0x7F) << shift
        if b < 0x80:
            return out, pos
        shift += 7


def cstr(v: str) -> bytes:
    raw = v.encode()
    n = len(raw) + 1
    head = b""
    while n >= 0x80:
        head += bytes([(n & 0x7F) | 0x80])
        n >>= 7
    return head + bytes([n]) + raw


def test_a_describe_naming_one_transaction_many_times_answers_it_once(broker):
    """Review s16 kafka H1: 10 000 repeats of one open transaction's id used to make the
    engine build (and the door send) 10 000 copies of its partitions."""
    import socket
    import struct

    from raw_socket import kafka_request, read_kafka_frame

    parts = 40
    create_topic(broker.kafka_bootstrap, "wide", parts)
    p = txn_producer(broker.kafka_bootstrap, "wide-writer")
    try:
        p.begin_transaction()
        for i in range(parts):
            p.produce("wide", value=b"x", partition=i)
        p.flush(30)
        repeats = 10_000
        body = b""
        n = repeats + 1
        while n >= 0x80:
            body += bytes([(n & 0x7F) | 0x80])
            n >>= 7
        body += bytes([n]) + cstr("wide-writer") * repeats + b"\x00"
        with socket.create_connection(("127.0.0.1", broker.kafka_port), timeout=30) as s:
            s.sendall(kafka_request(65, 0, 7, body, tags=True))
            resp = read_kafka_frame(s)
            # One state of 40 partitions is well under 1 KB; 10 000 copies are over 2 MB.
            assert len(resp) < 1024, f"{len(resp)} bytes"
            corr, _tags, _throttle = struct.unpack(">iBi", resp[:9])
            assert corr == 7
            count, pos = uvarint(resp, 9)
            assert count - 1 == 1, "the id is described once"
            (code,) = struct.unpack(">h", resp[pos : pos + 2])
            assert code == 0
            # The broker still serves this connection: ApiVersions v0.
            s.sendall(kafka_request(18, 0, 8))
            corr, code = struct.unpack(">ih", read_kafka_frame(s)[:6])
            assert (corr, code) == (8, 0)
        d = KafkaAdminClient(bootstrap_servers=broker.kafka_bootstrap)
        try:
            got = d.describe_transactions(["wide-writer"])["wide-writer"]
            assert len(got.topic_partitions) == parts
        finally:
            d.close()
        p.abort_transaction(30)
    finally:
        p.flush(5)


def offset_fetch_all(port: int, group: str, version: int) -> dict:
    """OffsetFetch (v7 or v8) of every partition of `group` with require_stable over a raw
    socket: (topic, partition) -> (error code, committed offset)."""
    import socket
    import struct

    from raw_socket import kafka_request, read_kafka_frame

    if version == 7:
        body = cstr(group) + b"\x00" + b"\x01" + b"\x00"
    else:
        body = b"\x02" + cstr(group) + b"\x00" + b"\x00" + b"\x01" + b"\x00"
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(kafka_request(9, version, 5, body, tags=True))
        resp = read_kafka_frame(s)
    corr, _tags, _throttle = struct.unpack(">iBi", resp[:9])
    assert corr == 5
    pos = 9
    if version >= 8:
        ngroups, pos = uvarint(resp, pos)
        assert ngroups - 1 == 1
        glen, pos = uvarint(resp, pos)
        pos += glen - 1
    out = {}
    ntopics, pos = uvarint(resp, pos)
    for _ in range(ntopics - 1):
        tlen, pos = uvarint(resp, pos)
        topic = resp[pos : pos + tlen - 1].decode()
        pos += tlen - 1
        nparts, pos = uvarint(resp, pos)
        for _ in range(nparts - 1):
            index, offset, _epoch = struct.unpack(">iqi", resp[pos : pos + 16])
            pos += 16
            mlen, pos = uvarint(resp, pos)
            pos += max(mlen - 1, 0)
            (code,) = struct.unpack(">h", resp[pos : pos + 2])
            pos += 2
            _t, pos = uvarint(resp, pos)
            out[(topic, index)] = (code, offset)
        _t, pos = uvarint(resp, pos)
    (top,) = struct.unpack(">h", resp[pos : pos + 2])
    assert top == 0
    return out


def test_require_stable_with_every_partition_asked_marks_the_pending_one(broker):
    """Review s16 kafka L1: OffsetFetch v7 and v8 with null topics and require_stable."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CTp

    create_topic(broker.kafka_bootstrap, "all-in", 2)
    create_topic(broker.kafka_bootstrap, "all-out", 1)
    consumer = Consumer({"bootstrap.servers": broker.kafka_bootstrap, "group.id": "g-all"})
    p = txn_producer(broker.kafka_bootstrap, "all-writer")
    try:
        consumer.commit(offsets=[CTp("all-in", 0, 3), CTp("all-in", 1, 7)], asynchronous=False)
        p.begin_transaction()
        send(p, "all-out", [1])
        p.send_offsets_to_transaction([CTp("all-in", 0, 5)], consumer.consumer_group_metadata(), 30)
        for version in (7, 8):
            got = offset_fetch_all(broker.kafka_port, "g-all", version)
            assert got[("all-in", 0)] == (88, -1), f"v{version}: {got}"
            assert got[("all-in", 1)] == (0, 7), f"v{version}: {got}"
        p.commit_transaction(30)
        for version in (7, 8):
            got = offset_fetch_all(broker.kafka_port, "g-all", version)
            assert got[("all-in", 0)] == (0, 5), f"v{version}: {got}"
    finally:
        consumer.close()
