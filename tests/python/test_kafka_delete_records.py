"""Kafka DeleteRecords against the real binary (docs/kafka-compat.md "DeleteRecords"):
confluent-kafka's and kafka-python's AdminClient move a partition's log start offset to
exactly the offset asked, inside one produced batch; ListOffsets earliest answers it, a fetch
below it is OFFSET_OUT_OF_RANGE, HTTP pops no longer see what is below, and the floor
survives a SIGKILL."""

import json
import struct

import httpx
import pytest
from queen_broker import free_port
from raw_socket import kafka_connect, kafka_request, read_kafka_frame

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

kafka = pytest.importorskip("kafka", reason="kafka-python is in scripts/lib/requirements.txt")
from kafka import KafkaAdminClient, KafkaConsumer  # noqa: E402
from kafka import TopicPartition as KTopicPartition  # noqa: E402
from kafka.errors import OffsetOutOfRangeError  # noqa: E402


def produce(bootstrap: str, topic: str, n: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50})
    for i in range(n):
        p.produce(topic, value=json.dumps({"i": i}).encode(), partition=0)
    assert p.flush(30) == 0


def watermarks(bootstrap: str, topic: str) -> tuple[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "wm"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        c.close()


def delete(admin: AdminClient, topic: str, partition: int, offset: int):
    fs = admin.delete_records([TopicPartition(topic, partition, offset)])
    return next(iter(fs.values())).result(timeout=30)


def raw_delete(b, topic: str, partition: int, offset: int) -> tuple[int, int]:
    """DeleteRecords v0 on a raw socket, for what clients check before sending:
    (error code, low watermark)."""
    t = topic.encode()
    body = struct.pack(">ih", 1, len(t)) + t + struct.pack(">iiqi", 1, partition, offset, 5000)
    with kafka_connect(b) as s:
        s.sendall(kafka_request(21, 0, 9, body))
        resp = read_kafka_frame(s)
    (_corr, _throttle, ntopics, nlen) = struct.unpack(">iiih", resp[:14])
    pos = 14 + nlen
    (nparts, index, low, error) = struct.unpack(">iiqh", resp[pos : pos + 18])
    assert (ntopics, nparts, index) == (1, 1, partition)
    return error, low


def pop_values(url: str, queue: str) -> list[int]:
    got: list[int] = []
    with httpx.Client(base_url=url, timeout=10.0) as http:
        for _ in range(20):
            r = http.get(f"/api/v1/pop/queue/{queue}",
                         params={"batch": 100, "wait": "false", "autoAck": "true"})
            assert r.status_code in (200, 204), r.text
            if r.status_code == 204 or not r.json()["messages"]:
                break
            got.extend(m["data"]["i"] for m in r.json()["messages"])
    return got


def test_delete_records_moves_the_log_start_exactly_for_kafka_and_http(broker_factory):
    b = broker_factory("delrec", kafka_port=free_port()).start()
    admin = AdminClient({"bootstrap.servers": b.kafka_bootstrap})
    admin.create_topics([NewTopic("dr", 2, 1)])["dr"].result(timeout=30)
    produce(b.kafka_bootstrap, "dr", 10)
    assert watermarks(b.kafka_bootstrap, "dr") == (0, 10)

    assert delete(admin, "dr", 0, 4).low_watermark == 4
    assert watermarks(b.kafka_bootstrap, "dr") == (4, 10)
    assert delete(admin, "dr", 0, 2).low_watermark == 4, "never lowered"
    with pytest.raises(ck.KafkaException) as past:
        delete(admin, "dr", 0, 11)
    assert past.value.args[0].code() == ck.KafkaError.OFFSET_OUT_OF_RANGE
    assert raw_delete(b, "dr", 7, 0) == (3, -1), "UNKNOWN_TOPIC_OR_PARTITION"
    assert raw_delete(b, "nope", 0, 0) == (3, -1), "UNKNOWN_TOPIC_OR_PARTITION"
    assert raw_delete(b, "dr", 0, -2) == (1, -1), "OFFSET_OUT_OF_RANGE"
    assert delete(admin, "dr", 1, -1).low_watermark == 0, "an empty partition"

    # A fetch below the floor is out of range; from the beginning it starts at the floor.
    tp = KTopicPartition("dr", 0)
    c = KafkaConsumer(bootstrap_servers=b.kafka_bootstrap, auto_offset_reset="none",
                      enable_auto_commit=False, consumer_timeout_ms=5000)
    try:
        c.assign([tp])
        c.seek(tp, 2)
        with pytest.raises(OffsetOutOfRangeError):
            for _ in range(10):
                c.poll(timeout_ms=500)
        c.seek_to_beginning(tp)
        first = next(iter(c))
        assert first.offset == 4 and json.loads(first.value)["i"] == 4
    finally:
        c.close()

    assert pop_values(b.url, "dr") == [4, 5, 6, 7, 8, 9], "HTTP pops start at the floor"

    kadmin = KafkaAdminClient(bootstrap_servers=b.kafka_bootstrap)
    try:
        done = kadmin.delete_records({tp: -1})
        assert done[tp]["low_watermark"] == 10, "-1 is the high watermark"
    finally:
        kadmin.close()
    b.kill()
    b.start()
    assert watermarks(b.kafka_bootstrap, "dr") == (10, 10), "the floor survived a SIGKILL"


def raw_delete_many(b, topics: list[tuple[str, list[tuple[int, int]]]]) -> list[list[tuple]]:
    """DeleteRecords v0 naming `topics` as given (names and partitions may repeat): per
    topic entry, per partition, (index, low watermark, error code)."""
    body = struct.pack(">i", len(topics))
    for name, parts in topics:
        t = name.encode()
        body += struct.pack(">h", len(t)) + t + struct.pack(">i", len(parts))
        body += b"".join(struct.pack(">iq", i, o) for i, o in parts)
    body += struct.pack(">i", 5000)
    with kafka_connect(b) as s:
        s.sendall(kafka_request(21, 0, 9, body))
        resp = read_kafka_frame(s)
    (_corr, _throttle, ntopics) = struct.unpack(">iii", resp[:12])
    pos, out = 12, []
    for _ in range(ntopics):
        (nlen,) = struct.unpack(">h", resp[pos : pos + 2])
        pos += 2 + nlen
        (nparts,) = struct.unpack(">i", resp[pos : pos + 4])
        pos += 4
        out.append([struct.unpack(">iqh", resp[pos + 14 * k : pos + 14 * (k + 1)])
                    for k in range(nparts)])
        pos += 14 * nparts
    return out


def test_a_partition_named_several_times_is_one_target_whose_last_offset_wins(broker_factory):
    """Kafka collects a DeleteRecords request's partitions into a map: a partition named
    twice (in one topic entry or in a repeated one) is one target with the last offset
    named, and every mention answers the same; repeats cost no further lookups."""
    b = broker_factory("delrec-dup").start()
    admin = AdminClient({"bootstrap.servers": b.kafka_bootstrap})
    admin.create_topics([NewTopic("dup", 2, 1)])["dup"].result(timeout=30)
    produce(b.kafka_bootstrap, "dup", 10)
    got = raw_delete_many(b, [("dup", [(0, 3), (0, 6), (1, 0)]), ("dup", [(0, 2)]),
                              ("nope", [(0, 1)]), ("dup", [(7, 1)])])
    assert got == [[(0, 2, 0), (0, 2, 0), (1, 0, 0)], [(0, 2, 0)], [(0, -1, 3)], [(7, -1, 3)]]
    assert watermarks(b.kafka_bootstrap, "dup") == (2, 10)
    assert pop_values(b.url, "dup") == list(range(2, 10))
