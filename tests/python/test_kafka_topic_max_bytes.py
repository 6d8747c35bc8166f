"""A topic's max.message.bytes and segment.bytes (docs/kafka-compat.md "Topic admin") against
the real binary: CreateTopics stores them, DescribeConfigs shows them as the topic's own, a
record batch over the bound is refused with MESSAGE_TOO_LARGE for its partition only and
nothing of it is stored (an idempotent one does not advance its sequence), AlterConfigs and
IncrementalAlterConfigs set and drop them, DeleteTopics clears them, a restart keeps them."""

import json
import struct
import time

import httpx
import pytest
from raw_socket import kafka_connect as connect
from raw_socket import kafka_request as request
from raw_socket import read_kafka_frame as read_frame

kafka = pytest.importorskip("kafka", reason="kafka-python is in scripts/lib/requirements.txt")
from kafka import KafkaAdminClient  # noqa: E402
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic  # noqa: E402
from kafka.errors import InvalidConfigurationError  # noqa: E402
from kafka.record.default_records import DefaultRecordBatchBuilder  # noqa: E402

NONE, MESSAGE_TOO_LARGE = 0, 10
TOPIC_SOURCE, DEFAULT_SOURCE = (1, "DYNAMIC_TOPIC_CONFIG"), (5, "DEFAULT_CONFIG")
# The broker default shown when no row sets it: kafka_max_request_bytes' default (100 MiB).
DEFAULT_MAX = "104857600"


def admin_for(broker) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=broker.kafka_bootstrap)


def config(admin: KafkaAdminClient, topic: str, key: str) -> dict:
    got = admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all"
    )
    return got["topic"][topic][key]


def shown(admin, topic: str) -> tuple:
    m, s = config(admin, topic, "max.message.bytes"), config(admin, topic, "segment.bytes")
    return (m["value"], m["config_source"] in TOPIC_SOURCE, s["value"])


def batch(values: list[int], pid: int = -1, epoch: int = -1, seq: int = -1) -> bytes:
    b = DefaultRecordBatchBuilder(2, 0, 0, pid, epoch, seq, 1 << 20)
    now = int(time.time() * 1000)
    for i, v in enumerate(values):
        b.append(i, now, None, json.dumps({"v": v, "pad": "x" * 40}).encode(), [])
    return bytes(b.build())


def init_producer(s) -> tuple[int, int]:
    s.sendall(request(22, 0, 1, struct.pack(">h", -1) + struct.pack(">i", 60000)))
    _corr, _throttle, error, pid, epoch = struct.unpack(">iihqh", read_frame(s))
    assert error == NONE
    return pid, epoch


def produce(s, topic: str, parts: dict[int, bytes]) -> dict[int, tuple[int, int]]:
    """Produce v3, acks=-1: {partition: (error, base offset)}."""
    t = topic.encode()
    body = struct.pack(">hhi", -1, -1, 10000) + struct.pack(">ih", 1, len(t)) + t
    body += struct.pack(">i", len(parts))
    for index, records in parts.items():
        body += struct.pack(">ii", index, len(records)) + records
    s.sendall(request(0, 3, 3, body))
    resp = read_frame(s)
    (_corr, ntopics, nlen) = struct.unpack(">iih", resp[:10])
    pos = 10 + nlen
    (nparts,) = struct.unpack(">i", resp[pos : pos + 4])
    pos += 4
    out = {}
    for _ in range(nparts):
        index, error, base = struct.unpack(">ihq", resp[pos : pos + 14])
        out[index] = (error, base)
        pos += 14 + 8  # log append time
    assert ntopics == 1
    return out


def kv_row(http, topic: str) -> dict:
    op = {"op": "get", "ns": "queen-kafka-topic-configs", "key": topic}
    r = http.post("/api/v1/kv", json={"operations": [op]})
    assert r.status_code == 200, r.text
    return r.json()["results"][0]


def stored(http, topic: str) -> list[int]:
    got = []
    for _ in range(20):
        r = http.get(f"/api/v1/pop/queue/{topic}", params={"batch": 100, "wait": "false"})
        assert r.status_code in (200, 204), r.text
        if r.status_code == 204 or not r.json()["messages"]:
            break
        got += [m["data"]["v"] for m in r.json()["messages"]]
    return sorted(got)


def test_max_message_bytes_bounds_each_partitions_batch_and_survives_a_restart(broker, http):
    big, small = batch(list(range(10))), batch([100])
    assert len(big) > 300 >= len(small), (len(big), len(small))
    admin = admin_for(broker)
    try:
        admin.create_topics([NewTopic(
            "bounded", 2, 1,
            topic_configs={"max.message.bytes": "300", "segment.bytes": "20000"},
        )])
        assert shown(admin, "bounded") == ("300", True, "20000")
    finally:
        admin.close()
    # The native KV API reads the row (never writes it): a JSON string, as every KV value is
    # JSON text.
    row = kv_row(http, "bounded")["value"]
    assert row.startswith("queue=") and row.endswith(";max.message.bytes=300;segment.bytes=20000")
    with connect(broker) as s:
        got = produce(s, "bounded", {0: big, 1: small})
        assert got[0][0] == MESSAGE_TOO_LARGE and got[1] == (NONE, 0), got
        # An idempotent batch over the bound: refused before its sequence is judged, so the
        # same sequence under the bound is a first batch, stored, not a repeat.
        pid, epoch = init_producer(s)
        over = batch(list(range(10, 20)), pid, epoch, 0)
        assert produce(s, "bounded", {0: over})[0][0] == MESSAGE_TOO_LARGE
        under = batch([200], pid, epoch, 0)
        assert produce(s, "bounded", {0: under})[0] == (NONE, 0)
        assert produce(s, "bounded", {0: under})[0] == (NONE, 0), "a repeat, stored once"
    assert stored(http, "bounded") == [100, 200], "nothing of a refused batch"
    broker.stop()
    broker.start()
    admin = admin_for(broker)
    try:
        assert shown(admin, "bounded") == ("300", True, "20000"), "durable"
    finally:
        admin.close()
    with connect(broker) as s:
        assert produce(s, "bounded", {0: big})[0][0] == MESSAGE_TOO_LARGE, "still bounded"


@pytest.mark.parametrize("incremental", [False, True])
def test_alter_sets_and_drops_the_row_configs_and_delete_topic_clears_them(
    broker, http, incremental
):
    big = batch(list(range(10)))
    admin = admin_for(broker)
    try:
        admin.create_topics([NewTopic("altered", 1, 1)])
        assert shown(admin, "altered") == (DEFAULT_MAX, False, "1073741824")
        res = ConfigResource(
            ConfigResourceType.TOPIC, "altered",
            configs={"max.message.bytes": "300", "segment.bytes": "20000"},
        )
        assert admin.alter_configs([res], incremental=incremental) == {
            "topic": {"altered": "OK"}
        }
        assert shown(admin, "altered") == ("300", True, "20000")
        with connect(broker) as s:
            assert produce(s, "altered", {0: big})[0][0] == MESSAGE_TOO_LARGE
        # IncrementalAlterConfigs' DELETE; AlterConfigs' null value (kafka-python sends every
        # other config set on the topic with it, as AlterConfigs replaces the whole set).
        drop = {"max.message.bytes": ("DELETE", None) if incremental else None}
        res = ConfigResource(ConfigResourceType.TOPIC, "altered", configs=drop)
        assert admin.alter_configs([res], incremental=incremental) == {
            "topic": {"altered": "OK"}
        }
        assert shown(admin, "altered") == (DEFAULT_MAX, False, "20000")
        with connect(broker) as s:
            assert produce(s, "altered", {0: big})[0] == (NONE, 0), "no bound left"
        res = ConfigResource(
            ConfigResourceType.TOPIC, "altered", configs={"max.message.bytes": "300"}
        )
        assert admin.alter_configs([res], incremental=incremental) == {
            "topic": {"altered": "OK"}
        }
        admin.delete_topics(["altered"])
        admin.create_topics([NewTopic("altered", 1, 1)])
        assert shown(admin, "altered") == (DEFAULT_MAX, False, "1073741824"), "cleared"
        assert kv_row(http, "altered")["found"] is False
    finally:
        admin.close()


@pytest.mark.parametrize("value", ["-1", "2147483648", "ten", "1.5"])
@pytest.mark.parametrize("key", ["max.message.bytes", "segment.bytes"])
def test_out_of_range_values_are_invalid_config_and_change_nothing(broker, key, value):
    admin = admin_for(broker)
    try:
        with pytest.raises(InvalidConfigurationError):
            admin.create_topics([NewTopic("ranged", 1, 1, topic_configs={key: value})])
        assert "ranged" not in admin.list_topics()
        admin.create_topics([NewTopic("ranged", 1, 1, topic_configs={key: "5000"})])
        for incremental in (False, True):
            res = ConfigResource(ConfigResourceType.TOPIC, "ranged", configs={key: value})
            out = admin.alter_configs([res], raise_on_unknown=False, incremental=incremental)
            assert "InvalidConfig" in out["topic"]["ranged"], out
            assert config(admin, "ranged", key)["value"] == "5000"
        admin.delete_topics(["ranged"])
    finally:
        admin.close()
