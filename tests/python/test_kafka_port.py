"""The Kafka port (kafka-port/) against the real binary: kafka-python and kcat as clients,
raw sockets for what no client sends. A record produced over Kafka is popped over the
Queen HTTP API to check the record mapping (docs/kafka-compat.md)."""

import base64
import json
import shutil
import socket
import struct
import subprocess

import pytest

import queen_api
from raw_socket import closed_by_server, kafka_connect as connect
from raw_socket import kafka_frame as frame, kafka_request as request
from raw_socket import read_kafka_frame as read_frame

kafka = pytest.importorskip("kafka", reason="kafka-python is in scripts/lib/requirements.txt")
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition  # noqa: E402
from kafka import codec as kafka_codec  # noqa: E402


def producer(broker, **kw) -> KafkaProducer:
    # kafka-python's default producer: idempotent (test_kafka_idempotence.py).
    return KafkaProducer(bootstrap_servers=broker.kafka_bootstrap, **kw)


def pop_all(http, queue: str, n: int) -> list[dict]:
    got: list[dict] = []
    for _ in range(20):
        r = http.get(f"/api/v1/pop/queue/{queue}", params={"batch": n, "wait": "false"})
        assert r.status_code in (200, 204), r.text
        if r.status_code == 200:
            got.extend(r.json()["messages"])
        if len(got) >= n:
            break
    return got


def test_metadata_lists_this_broker_and_the_queues(broker, http):
    r = http.post("/api/v1/configure", json={"queue": "from-http"})
    assert r.status_code == 200, r.text
    admin = KafkaAdminClient(bootstrap_servers=broker.kafka_bootstrap)
    try:
        cluster = admin.describe_cluster()  # DescribeCluster (test_kafka_admin.py)
        assert cluster["brokers"] == [
            {
                "host": "127.0.0.1",
                "port": broker.kafka_port,
                "rack": None,
                "broker_id": 0,
                "is_fenced": False,
            }
        ]
        assert "from-http" in admin.list_topics()
    finally:
        admin.close()


def test_produce_with_keys_and_headers_then_pop_over_http(broker, http):
    for acks in (1, "all"):
        topic = f"orders-{acks}"
        p = producer(broker, acks=acks)
        offsets = []
        for i in range(3):
            meta = p.send(
                topic,
                key=f"k{i}".encode(),
                value=json.dumps({"n": i}).encode(),
                headers=[("trace", b"t%d" % i), ("bin", b"\xff\x00")],
                timestamp_ms=1_700_000_000_000 + i,
            ).get(timeout=30)
            assert (meta.topic, meta.partition) == (topic, 0)
            offsets.append(meta.offset)
        plain = p.send(topic, value=b'{"plain": true}').get(timeout=30)
        text = p.send(topic, value=b"not json").get(timeout=30)
        p.close()
        assert offsets + [plain.offset, text.offset] == [0, 1, 2, 3, 4]

        msgs = pop_all(http, topic, 5)
        assert [m["partition"] for m in msgs] == ["0"] * 5
        assert [m["offset"] for m in msgs] == [0, 1, 2, 3, 4]
        for i, m in enumerate(msgs[:3]):
            assert m["data"] == {
                "$kafka": {
                    "timestamp": 1_700_000_000_000 + i,
                    "key": f"k{i}",
                    "value": {"n": i},
                    "headers": [
                        {"key": "trace", "value": f"t{i}"},
                        {"key": "bin", "value_b64": "/wA="},
                    ],
                }
            }, f"acks={acks}"
        assert msgs[3]["data"] == {"plain": True}
        assert msgs[4]["data"]["$kafka"]["value_b64"] == "bm90IGpzb24="


CODECS = {
    "gzip": lambda: True,
    "snappy": kafka_codec.has_snappy,
    "lz4": kafka_codec.has_lz4,
    "zstd": kafka_codec.has_zstd,
}


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_every_codec_reads_back(broker, http, codec):
    if not CODECS[codec]():
        pytest.skip(f"kafka-python has no {codec} module here")
    p = producer(broker, acks=1, compression_type=codec, linger_ms=50)
    futures = [
        p.send("codecs", value=json.dumps({"codec": codec, "i": i}).encode(), partition=0)
        for i in range(20)
    ]
    p.flush()
    assert sorted(f.get(timeout=30).offset for f in futures) == list(range(20))
    p.close()
    msgs = pop_all(http, "codecs", 20)
    assert [m["data"] for m in msgs] == [{"codec": codec, "i": i} for i in range(20)]


def api_versions(s: socket.socket, version: int, corr: int) -> tuple[int, dict]:
    # v3 and later (and any unknown later version) use the flexible header; the body is
    # not read for ApiVersions.
    s.sendall(request(18, version, corr, tags=version >= 3))
    resp = read_frame(s)
    got_corr, error, n = struct.unpack(">ihi", resp[:10])
    assert got_corr == corr
    keys = {}
    for i in range(n):
        key, lo, hi = struct.unpack(">hhh", resp[10 + 6 * i : 16 + 6 * i])
        keys[key] = (lo, hi)
    return error, keys


def test_api_versions_lists_only_served_apis_and_answers_unknown_versions_in_v0(broker):
    with connect(broker) as s:
        error, keys = api_versions(s, 0, 1)
        assert error == 0
        assert keys == {
            0: (3, 12), 1: (4, 12), 2: (1, 8), 3: (0, 12), 18: (0, 3),
            # Consumer groups (test_kafka_groups.py).
            8: (2, 9), 9: (1, 9), 10: (0, 6), 11: (0, 9), 12: (0, 4), 13: (0, 5),
            14: (0, 5), 15: (0, 5), 16: (0, 5), 42: (0, 2), 47: (0, 0),
            # Transactions (test_kafka_transactions.py).
            24: (0, 3), 25: (0, 3), 26: (0, 3), 28: (0, 3), 61: (0, 0), 65: (0, 0), 66: (0, 0),
            # Topic admin (test_kafka_admin.py).
            19: (2, 7), 20: (1, 6), 32: (1, 4), 37: (0, 3),
            # Idempotent producers (test_kafka_idempotence.py).
            22: (0, 5),
            # Topic admin (test_kafka_admin.py).
            33: (0, 2), 35: (1, 4), 44: (0, 1), 60: (0, 2),
            # DeleteRecords (test_kafka_delete_records.py).
            21: (0, 2),
        }
        # KIP-511: a version we do not serve gets UNSUPPORTED_VERSION in the v0 layout.
        error, keys = api_versions(s, 77, 2)
        assert error == 35 and 18 in keys


def test_unknown_topic_without_auto_create_is_unknown_topic(broker, http):
    topic = b"nope"
    body = struct.pack(">ih", 1, len(topic)) + topic + b"\x00"  # Metadata v4, no auto-create
    with connect(broker) as s:
        s.sendall(request(3, 4, 5, body))
        resp = read_frame(s)
    (corr,) = struct.unpack(">i", resp[:4])
    assert corr == 5
    # throttle, brokers[1] = node, host, port, rack(null), cluster id, controller, topics
    pos = 4 + 4
    (nbrokers,) = struct.unpack(">i", resp[pos : pos + 4])
    pos += 4
    assert nbrokers == 1
    pos += 4
    (hlen,) = struct.unpack(">h", resp[pos : pos + 2])
    pos += 2 + hlen + 4 + 2  # host, port, null rack
    (clen,) = struct.unpack(">h", resp[pos : pos + 2])
    pos += 2 + max(clen, 0) + 4
    (ntopics, err) = struct.unpack(">ih", resp[pos : pos + 6])
    assert (ntopics, err) == (1, 3), "UNKNOWN_TOPIC_OR_PARTITION"
    assert http.get("/api/v1/resources/queues/nope").status_code == 404


@pytest.mark.parametrize(
    "bad",
    [
        struct.pack(">i", -1),
        struct.pack(">i", 0x7FFFFFFF),
        request(999, 0, 1),  # unknown api key
        frame(b"\x00\x03"),  # a header cut short
        request(1, 4, 1),  # Fetch: not served yet
        request(3, 4, 1, b"\x7f\xff\xff\xff"),  # Metadata with a lying topic count
    ],
    ids=["negative", "oversized", "unknown-api", "garbage-header", "unserved-api", "lying-count"],
)
def test_bad_frames_close_only_their_connection(broker, bad):
    with connect(broker) as s:
        s.sendall(bad)
        assert closed_by_server(s, 10), "the broker kept a connection it cannot serve"
    with connect(broker) as s:
        error, keys = api_versions(s, 0, 9)
        assert error == 0 and keys
    assert broker.proc.poll() is None


def test_kcat_lists_the_broker_and_topics(broker, http):
    kcat = shutil.which("kcat")
    if kcat is None:
        pytest.skip("kcat is not installed (scripts/lib/setup.sh installs it)")
    assert http.post("/api/v1/configure", json={"queue": "listed"}).status_code == 200
    out = subprocess.run(
        [kcat, "-b", broker.kafka_bootstrap, "-L"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert f"broker 0 at 127.0.0.1:{broker.kafka_port}" in out.stdout
    assert 'topic "listed" with 1 partitions' in out.stdout


def test_acks_zero_writes_without_an_answer(broker, http):
    p = producer(broker, acks=0)
    for i in range(3):
        p.send("fire", value=json.dumps(i).encode(), partition=0)
    p.flush()
    # No answer comes back, so the records are waited for where they land.
    got: list = []
    for _ in range(15):
        r = http.get(
            "/api/v1/pop/queue/fire",
            # autoAck: an unacknowledged pop would hold the partition's lease, and the
            # records that land after it would wait for that lease to expire.
            params={"batch": 10, "wait": "true", "timeout": 2000, "autoAck": "true"},
            timeout=15,
        )
        assert r.status_code in (200, 204), r.text
        if r.status_code == 200:
            got.extend(m["data"] for m in r.json()["messages"])
        if len(got) >= 3:
            break
    p.close()
    assert got == [0, 1, 2]


def test_the_port_stays_closed_while_http_authentication_is_on(broker_factory):
    b = broker_factory("auth", env={"QUEEN_JWT_SECRET": "s" * 32}).start()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", b.kafka_port), timeout=5).close()
    assert "the Kafka port is not started" in b.log_tail()


def produce_v3(topic: bytes, index: int, records: bytes, acks: int = 1) -> bytes:
    parts = struct.pack(">ii", 1, index) + struct.pack(">i", len(records)) + records
    body = struct.pack(">hhi", -1, acks, 5000)
    body += struct.pack(">ih", 1, len(topic)) + topic + parts
    return request(0, 3, 7, body)


def produce_error(resp: bytes) -> int:
    # correlation id, topics[1]: name, partitions[1]: index, error
    (corr, ntopics, nlen) = struct.unpack(">iih", resp[:10])
    assert (corr, ntopics) == (7, 1)
    pos = 10 + nlen
    (nparts, _index, error) = struct.unpack(">iih", resp[pos : pos + 10])
    assert nparts == 1
    return error


def test_produce_never_widens_a_topic(broker, http):
    """A partition index at or past the count Metadata shows is refused, and creates
    nothing: producing must not change every client's key-to-partition mapping."""
    assert http.post("/api/v1/configure", json={"queue": "narrow"}).status_code == 200
    with connect(broker) as s:
        s.sendall(produce_v3(b"narrow", 5, b"not even a batch"))
        assert produce_error(read_frame(s)) == 3, "UNKNOWN_TOPIC_OR_PARTITION"
        s.sendall(produce_v3(b"missing-topic", 0, b"x"))
        assert produce_error(read_frame(s)) == 3
    detail = http.get("/api/v1/resources/queues/narrow").json()
    assert [p["name"] for p in detail.get("partitions", [])] in ([], ["0"]), detail
    assert http.get("/api/v1/resources/queues/missing-topic").status_code == 404


def test_acks_zero_refusal_closes_the_connection(broker, http):
    """The client reads no answer to acks=0, so a refused partition closes the connection,
    as a Kafka broker does."""
    with connect(broker) as s:
        s.sendall(produce_v3(b"nowhere", 0, b"x", acks=0))
        assert closed_by_server(s, 10)


@pytest.mark.parametrize("name", [b"", b"..", b"has space", b"x" * 250])
def test_metadata_refuses_names_kafka_refuses_without_creating_them(broker, http, name):
    body = struct.pack(">ih", 1, len(name)) + name + b"\x01"  # Metadata v4, auto-create
    with connect(broker) as s:
        s.sendall(request(3, 4, 5, body))
        resp = read_frame(s)
    assert resp.endswith(
        struct.pack(">h", 17) + struct.pack(">h", len(name)) + name + b"\x00" + struct.pack(">i", 0)
    ), "INVALID_TOPIC_EXCEPTION, no partitions"
    queues = [q["name"] for q in http.get("/api/v1/resources/queues").json()["queues"]]
    assert name.decode() not in queues


def test_kcat_produces_and_consumes_from_the_beginning(broker, http):
    kcat = shutil.which("kcat")
    if kcat is None:
        pytest.skip("kcat is not installed (scripts/lib/setup.sh installs it)")
    lines = 'k1:{"n":1}\nk2:plain text\n:{"n":3}\n'
    out = subprocess.run(
        [kcat, "-b", broker.kafka_bootstrap, "-P", "-t", "kcat-rt", "-p", "0", "-K:"],
        input=lines, capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    out = subprocess.run(
        [kcat, "-b", broker.kafka_bootstrap, "-C", "-t", "kcat-rt", "-p", "0", "-o", "beginning",
         "-e", "-f", "%o|%k|%s\\n"],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ['0|k1|{"n":1}', "1|k2|plain text", '2||{"n":3}'], out.stdout


def test_kafka_python_assign_and_seek_read_by_offset(broker, http):
    p = producer(broker)
    for i in range(4):
        p.send("seeked", key=f"k{i}".encode(), value=json.dumps({"i": i}).encode(),
               headers=[("h", f"v{i}".encode())], partition=0).get(timeout=30)
    p.close()
    c = KafkaConsumer(bootstrap_servers=broker.kafka_bootstrap, group_id=None,
                      enable_auto_commit=False, consumer_timeout_ms=5000)
    try:
        tp = TopicPartition("seeked", 0)
        c.assign([tp])
        assert c.end_offsets([tp]) == {tp: 4}
        assert c.beginning_offsets([tp]) == {tp: 0}
        c.seek(tp, 2)
        got = []
        for rec in c:
            got.append((rec.offset, rec.key, json.loads(rec.value), rec.headers))
            if len(got) == 2:
                break
        assert got == [(2, b"k2", {"i": 2}, [("h", b"v2")]), (3, b"k3", {"i": 3}, [("h", b"v3")])]
        # Reads by offset move nothing: a native pop still gets every message.
        assert len(pop_all(http, "seeked", 4)) == 4
    finally:
        c.close()


def test_offsets_for_times_go_by_the_records_own_timestamps(broker):
    # librdkafka's 0054: records stamped long before they are stored (2001 here) are found by
    # their own timestamps, not by the time the broker stored them.
    p = producer(broker)
    for ts in (1234, 999_999_999_999):
        p.send("stamped", value=b"not json", timestamp_ms=ts, partition=0).get(timeout=30)
    p.send("stamped", value=b'{"bare":1}', partition=0).get(timeout=30)
    p.close()
    c = KafkaConsumer(bootstrap_servers=broker.kafka_bootstrap, group_id=None,
                      enable_auto_commit=False)
    try:
        tp = TopicPartition("stamped", 0)
        found = lambda ts: c.offsets_for_times({tp: ts})[tp]  # noqa: E731
        assert (found(0).offset, found(0).timestamp) == (0, 1234)
        assert (found(1234).offset, found(1234).timestamp) == (0, 1234)
        assert (found(1235).offset, found(1235).timestamp) == (1, 999_999_999_999)
        # The bare JSON record has no timestamp of its own: its store time (now) is.
        assert found(1_000_000_000_000).offset == 2
        assert found(4_000_000_000_000) is None
    finally:
        c.close()


def test_a_native_push_is_fetched_over_kafka_at_the_same_offset(broker, http):
    items = [{"queue": "native-to-kafka", "partition": "0", "payload": {"n": i}} for i in range(3)]
    r = http.post("/api/v1/push", json={"items": items})
    assert r.status_code in (200, 201), r.text
    offsets = [x.get("offset") for x in r.json()] if isinstance(r.json(), list) else None
    c = KafkaConsumer(bootstrap_servers=broker.kafka_bootstrap, group_id=None,
                      enable_auto_commit=False, consumer_timeout_ms=5000)
    try:
        tp = TopicPartition("native-to-kafka", 0)
        c.assign([tp])
        c.seek(tp, 1)
        got = []
        for rec in c:
            got.append((rec.offset, rec.key, json.loads(rec.value)))
            if len(got) == 2:
                break
        assert got == [(1, None, {"n": 1}), (2, None, {"n": 2})]
        if offsets and None not in offsets:
            assert offsets == [0, 1, 2]
        # Past the end: Kafka's OFFSET_OUT_OF_RANGE, which the client resets (to latest).
        assert c.end_offsets([tp]) == {tp: 3}
    finally:
        c.close()


def test_binary_records_cross_to_the_official_client_and_back(broker):
    """Done-when 3 of issue 10 with values that are not JSON (docs/kafka-compat.md, "Record
    mapping"): a Kafka record's bytes reach a queen-mq consumer as base64 in the envelope and
    are acked there; an envelope pushed over HTTP is fetched over Kafka as the key, headers,
    value and timestamp it names, at the offsets that follow."""
    confluent = pytest.importorskip("confluent_kafka")
    topic, raw = "xproto", bytes(range(256))
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    p = confluent.Producer({"bootstrap.servers": broker.kafka_bootstrap, "enable.idempotence": True})
    reports = []
    on = lambda err, msg: reports.append((err, msg.offset()))  # noqa: E731
    p.produce(topic, raw, key=b"k\xff", partition=0, headers=[("bin", b"\x00\xfe"), ("txt", b"ok")],
              timestamp=1_700_000_000_000, on_delivery=on)
    p.produce(topic, None, key=b"gone", partition=0, timestamp=1_700_000_000_001, on_delivery=on)
    p.produce(topic, b"\xc3\x28 not utf-8", partition=0, on_delivery=on)
    assert p.flush(30) == 0
    assert reports == [(None, 0), (None, 1), (None, 2)]

    envelope = {"$kafka": {"timestamp": 1_700_000_000_500, "key": "user-1", "value_b64": b64(raw),
                           "headers": [{"key": "bin", "value_b64": b64(b"\x00\xfe")}, {"key": "nil"}]}}

    async def over_http(client):
        pop = lambda: client.queue(topic).group("g").subscription_mode("all").batch(10).wait(False).pop()  # noqa: E731
        popped = await pop()
        acked = await client.ack(popped, True, {"group": "g"})
        await client.queue(topic).partition("0").push([{"data": envelope}, {"data": {"n": 1}}])
        # A live lease holds the partition: were the ack a no-op, this pop would answer []
        # (until the lease ran out, then the acked three again). Taken, only the new two come.
        after = await pop()
        return popped, acked, after

    popped, acked, after = queen_api.with_client(broker.url, over_http)
    assert acked.get("success") is True and len(acked.get("results") or []) == 3, acked
    assert [m["data"] for m in after] == [envelope, {"n": 1}], "the ack did not take"
    assert [m["data"] for m in popped] == [
        {"$kafka": {"timestamp": 1_700_000_000_000, "key_b64": b64(b"k\xff"), "value_b64": b64(raw),
                    "headers": [{"key": "bin", "value_b64": "AP4="}, {"key": "txt", "value": "ok"}]}},
        {"$kafka": {"timestamp": 1_700_000_000_001, "key": "gone"}},
        {"$kafka": {"timestamp": popped[2]["data"]["$kafka"]["timestamp"],
                    "value_b64": b64(b"\xc3\x28 not utf-8")}},
    ]

    # check.crcs: librdkafka checks every batch's CRC32C, which it skips by default.
    c = confluent.Consumer({"bootstrap.servers": broker.kafka_bootstrap, "group.id": "xproto-reader",
                            "enable.auto.commit": False, "check.crcs": True})
    try:
        c.assign([confluent.TopicPartition(topic, 0, 0)])
        got = []
        for _ in range(30):
            for m in c.consume(num_messages=10, timeout=1.0):
                assert m.error() is None, m.error()
                got.append(m)
            if len(got) >= 5:
                break
    finally:
        c.close()
    assert [m.offset() for m in got] == [0, 1, 2, 3, 4]
    first, tomb, _, pushed, plain = got
    assert (first.key(), first.value(), first.headers()) == (b"k\xff", raw, [("bin", b"\x00\xfe"), ("txt", b"ok")])
    assert first.timestamp()[1] == 1_700_000_000_000
    assert (tomb.key(), tomb.value()) == (b"gone", None)
    assert (pushed.key(), pushed.value(), pushed.headers()) == (b"user-1", raw, [("bin", b"\x00\xfe"), ("nil", None)])
    assert pushed.timestamp()[1] == 1_700_000_000_500
    assert (plain.key(), json.loads(plain.value()), plain.headers()) == (None, {"n": 1}, None)


def test_duplicate_header_keys_all_come_back_in_order(broker):
    """librdkafka's 0085: Kafka keeps a record's headers as the list the producer sent, so a
    key given twice comes back twice, in its place (the fetch encoder once kept one)."""
    confluent = pytest.importorskip("confluent_kafka")
    topic = "dupheaders"
    headers = [("a", b"1"), ("b", b"x"), ("a", b"2"), ("a", None), ("a", b"")]
    p = confluent.Producer({"bootstrap.servers": broker.kafka_bootstrap})
    p.produce(topic, b"v", partition=0, headers=headers)
    assert p.flush(30) == 0
    c = confluent.Consumer({"bootstrap.servers": broker.kafka_bootstrap, "group.id": "dupheaders",
                            "enable.auto.commit": False, "check.crcs": True})
    try:
        c.assign([confluent.TopicPartition(topic, 0, 0)])
        got = None
        for _ in range(30):
            got = c.poll(1.0)
            if got is not None:
                break
    finally:
        c.close()
    assert got is not None and got.error() is None, got and got.error()
    assert got.headers() == headers
