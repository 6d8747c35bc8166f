"""Kafka idempotent producers against the real binary (docs/kafka-compat.md "Idempotent
producers"): kafka-python's default producer and confluent-kafka with enable.idempotence
produce unchanged; raw requests check the duplicate, gap and epoch answers, and that the
duplicate check survives a SIGKILL."""

import json
import struct
import time

import httpx
import pytest
import queen_api
from queen_broker import free_port
from raw_socket import kafka_connect as connect
from raw_socket import kafka_request as request
from raw_socket import read_kafka_frame as read_frame

kafka = pytest.importorskip("kafka", reason="kafka-python is in scripts/lib/requirements.txt")
from kafka import KafkaAdminClient, KafkaProducer  # noqa: E402
from kafka.admin import NewTopic  # noqa: E402
from kafka.record.default_records import DefaultRecordBatchBuilder  # noqa: E402

NONE, REQUEST_TIMED_OUT, OUT_OF_ORDER, INVALID_EPOCH, INVALID_RECORD = 0, 7, 45, 47, 87
COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, INVALID_TXN_TIMEOUT = 14, 15, 50


def pop_all(http, queue: str, n: int) -> list[dict]:
    """Pops until `n` messages came or a bounded number of empty answers."""
    got: list[dict] = []
    empty = 0
    while len(got) < n and empty < 5:
        r = http.get(f"/api/v1/pop/queue/{queue}", params={"batch": 100, "wait": "false"})
        assert r.status_code in (200, 204), r.text
        if r.status_code == 200 and r.json()["messages"]:
            got.extend(r.json()["messages"])
        else:
            empty += 1
    # One more: nothing may follow what was expected.
    r = http.get(f"/api/v1/pop/queue/{queue}", params={"batch": 100, "wait": "false"})
    if r.status_code == 200:
        got.extend(r.json()["messages"])
    return got


def create_topic(broker, name: str, partitions: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.kafka_bootstrap)
    try:
        admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        admin.close()


def init_producer_calls(http) -> float:
    text = http.get("/metrics/prometheus").text
    for line in text.splitlines():
        if line.startswith("queen_kafka_requests_total") and 'api="init_producer_id"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_kafka_python_default_producer_produces_every_record_once(broker, http):
    create_topic(broker, "idem-kp", 3)
    p = KafkaProducer(bootstrap_servers=broker.kafka_bootstrap)
    assert p.config["enable_idempotence"], "kafka-python 3 is idempotent by default"
    n = 60
    futures = [
        p.send("idem-kp", value=json.dumps({"i": i}).encode(), partition=i % 3)
        for i in range(n)
    ]
    p.flush()
    metas = [f.get(timeout=30) for f in futures]
    p.close()
    assert sorted((m.partition, m.offset) for m in metas) == sorted(
        (k, o) for k in range(3) for o in range(n // 3)
    )
    assert init_producer_calls(http) >= 1
    msgs = pop_all(http, "idem-kp", n)
    assert sorted(m["data"]["i"] for m in msgs) == list(range(n))


def test_confluent_kafka_idempotent_producer_produces_every_record_once(broker, http):
    ck = pytest.importorskip("confluent_kafka")
    create_topic(broker, "idem-ck", 3)
    p = ck.Producer(
        {
            "bootstrap.servers": broker.kafka_bootstrap,
            "enable.idempotence": True,
            "linger.ms": 5,
        }
    )
    errors: list = []
    n = 90
    for i in range(n):
        p.produce(
            "idem-ck",
            value=json.dumps({"i": i}).encode(),
            partition=i % 3,
            on_delivery=lambda err, _msg: errors.append(err) if err else None,
        )
    assert p.flush(30) == 0
    assert errors == []
    assert init_producer_calls(http) >= 1
    msgs = pop_all(http, "idem-ck", n)
    assert sorted(m["data"]["i"] for m in msgs) == list(range(n))


# Raw requests: what no client sends on purpose (the same batch twice, a gap, an old epoch).


def init_producer(s, txn: str | None = None, timeout_ms: int = 60000) -> tuple[int, int, int]:
    """InitProducerId v0: (error, producer id, epoch)."""
    tid = struct.pack(">h", -1) if txn is None else struct.pack(">h", len(txn)) + txn.encode()
    s.sendall(request(22, 0, 1, tid + struct.pack(">i", timeout_ms)))
    _corr, _throttle, error, pid, epoch = struct.unpack(">iihqh", read_frame(s))
    return error, pid, epoch


def bump_epoch(s, pid: int, epoch: int, txn: str | None = None) -> tuple[int, int, int]:
    """InitProducerId v3 (flexible) naming the producer's id and epoch (KIP-360)."""
    # A compact nullable string: length + 1 as one varint byte (ids here are short), 0 null.
    tid = b"\x00" if txn is None else bytes([len(txn) + 1]) + txn.encode()
    body = tid + struct.pack(">iqh", 60000 if txn else -1, pid, epoch) + b"\x00"
    s.sendall(request(22, 3, 2, body, tags=True))
    resp = read_frame(s)
    # Response header v1: correlation id and an empty tag section.
    _throttle, error, new_pid, new_epoch = struct.unpack(">ihqh", resp[5:21])
    return error, new_pid, new_epoch


def batch(pid: int, epoch: int, seq: int, values: list[int]) -> bytes:
    b = DefaultRecordBatchBuilder(2, 0, 0, pid, epoch, seq, 1 << 20)
    now = int(time.time() * 1000)
    for i, v in enumerate(values):
        b.append(i, now, None, json.dumps({"v": v}).encode(), [])
    return bytes(b.build())


def with_last_offset_delta(records: bytes, delta: int) -> bytes:
    """The batch with its lastOffsetDelta replaced and its CRC32C made right again."""
    from kafka.record.util import calc_crc32c

    b = bytearray(records)
    b[23:27] = struct.pack(">i", delta)
    b[17:21] = struct.pack(">I", calc_crc32c(bytes(b[21:])))
    return bytes(b)


def produce(s, topic: str, records: bytes, acks: int = -1) -> tuple[int, int]:
    """Produce v3 to partition 0: (error, base offset)."""
    t = topic.encode()
    body = struct.pack(">hhi", -1, acks, 10000)
    body += struct.pack(">ih", 1, len(t)) + t
    body += struct.pack(">ii", 1, 0) + struct.pack(">i", len(records)) + records
    s.sendall(request(0, 3, 3, body))
    if acks == 0:
        return NONE, -1
    resp = read_frame(s)
    (_corr, ntopics, nlen) = struct.unpack(">iih", resp[:10])
    pos = 10 + nlen
    (nparts, _index, error, base) = struct.unpack(">iihq", resp[pos : pos + 18])
    assert (ntopics, nparts) == (1, 1)
    return error, base


def test_repeats_gaps_and_old_epochs_are_answered_as_kafka_does_across_a_crash(
    broker_factory,
):
    b = broker_factory("idem").start()
    create_topic(b, "idem-raw", 1)
    with connect(b) as s:
        error, pid, epoch = init_producer(s)
        assert (error, epoch) == (NONE, 0) and pid >= 0
        first = batch(pid, 0, 0, [0, 1, 2])
        assert produce(s, "idem-raw", first) == (NONE, 0)
        assert produce(s, "idem-raw", first) == (NONE, 0), "a repeat gets the first offset"
        assert produce(s, "idem-raw", batch(pid, 0, 5, [9]))[0] == OUT_OF_ORDER
        # Another producer id is another id: ids are never handed out twice.
        error, other, _ = init_producer(s)
        assert error == NONE and other != pid
    b.kill()
    b.start()
    with connect(b) as s:
        assert produce(s, "idem-raw", first) == (NONE, 0), "the check survived the crash"
        error, again, _ = init_producer(s)
        assert error == NONE and again not in (pid, other)
        assert bump_epoch(s, pid, 0) == (NONE, pid, 1)
        assert produce(s, "idem-raw", batch(pid, 1, 3, [3]))[0] == OUT_OF_ORDER
        assert produce(s, "idem-raw", batch(pid, 1, 0, [3, 4])) == (NONE, 3)
        assert produce(s, "idem-raw", batch(pid, 0, 3, [5]))[0] == INVALID_EPOCH
        assert produce(s, "idem-raw", first)[0] == INVALID_EPOCH, "the old epoch is fenced"
    with httpx.Client(base_url=b.url, timeout=10.0) as http:
        msgs = pop_all(http, "idem-raw", 5)
    assert [m["data"]["v"] for m in msgs] == [0, 1, 2, 3, 4], "each batch stored once"


def test_a_retried_kip_360_bump_gets_the_pair_it_was_given_across_a_crash(broker_factory):
    """A transactional producer's KIP-360 bump whose answer was lost is asked again naming the
    pair it bumped from: Kafka answers the current pair (lastProducerEpoch), not a fence."""
    b = broker_factory("kip360").start()
    with connect(b) as s:
        error, pid, epoch = init_producer(s, "kip360")
        assert (error, epoch) == (NONE, 0)
        assert bump_epoch(s, pid, 0, "kip360") == (NONE, pid, 1)
        assert bump_epoch(s, pid, 0, "kip360") == (NONE, pid, 1), "the retry is answered"
    b.kill()
    b.start()
    with connect(b) as s:
        assert bump_epoch(s, pid, 0, "kip360") == (NONE, pid, 1), "and after a crash"
        assert bump_epoch(s, pid, 1, "kip360") == (NONE, pid, 2)
        assert bump_epoch(s, pid, 0, "kip360")[0] == INVALID_EPOCH, "only the last pair"
        # A new incarnation fences every older one, the retrying one included.
        assert init_producer(s, "kip360") == (NONE, pid, 3)
        assert bump_epoch(s, pid, 2, "kip360")[0] == INVALID_EPOCH


def test_init_producer_id_never_fills_the_cap(broker_factory):
    """InitProducerId makes no producer state (short-lived producers cannot fill
    kafka_max_producer_ids); a new producer past the cap evicts the one idle longest (here
    with no least idleness), counted in queen_kafka_producer_evictions_total."""
    env = {"QUEEN_KAFKA_MAX_PRODUCER_IDS": "2", "QUEEN_KAFKA_PRODUCER_EVICT_MIN_IDLE_MS": "0"}
    b = broker_factory("cap", env=env).start()
    create_topic(b, "idem-cap", 1)
    with connect(b) as s:
        # Transactional ids are served (test_kafka_transactions.py); a bad timeout is
        # refused before any state is made.
        assert init_producer(s, txn="tx", timeout_ms=0)[0] == INVALID_TXN_TIMEOUT
        granted = [init_producer(s) for _ in range(200)]
        assert {e for e, _, _ in granted} == {NONE}
        assert len({pid for _, pid, _ in granted}) == 200
        p1, p2, p3 = (pid for _, pid, _ in granted[:3])
        assert produce(s, "idem-cap", batch(p1, 0, 0, [1])) == (NONE, 0)
        assert produce(s, "idem-cap", batch(p2, 0, 0, [2])) == (NONE, 1)
        # A third producer's first batch evicts p1, the one idle longest.
        assert produce(s, "idem-cap", batch(p3, 0, 0, [3])) == (NONE, 2)
        assert produce(s, "idem-cap", batch(p2, 0, 0, [2])) == (NONE, 1), "p2 kept"
        assert produce(s, "idem-cap", batch(p3, 0, 0, [3])) == (NONE, 2), "p3 kept"
        assert produce(s, "idem-cap", batch(p1, 0, 7, [4])) == (NONE, 3), "p1 starts afresh"
    ck = pytest.importorskip("confluent_kafka")
    p = ck.Producer({"bootstrap.servers": b.kafka_bootstrap, "enable.idempotence": True})
    errors: list[str] = []
    p.produce("idem-cap", value=b'{"v": 5}', on_delivery=lambda e, _m: e and errors.append(str(e)))
    assert p.flush(30) == 0 and errors == [], "a producer after the InitProducerId spam"
    with httpx.Client(base_url=b.url, timeout=10.0) as http:
        assert evictions(http) >= 2


def evictions(http) -> float:
    text = http.get("/metrics/prometheus").text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("queen_kafka_producer_evictions_total")
    )


def test_a_new_producer_at_the_cap_never_evicts_a_recently_active_one(broker_factory):
    """With the default kafka_producer_evict_min_idle_ms (15 minutes), a new producer's
    first batch at the cap is refused with the retriable REQUEST_TIMED_OUT and nothing of it
    is stored, so a producer whose answer was lost still has its duplicate check."""
    b = broker_factory("cap-idle", env={"QUEEN_KAFKA_MAX_PRODUCER_IDS": "2"}).start()
    create_topic(b, "idem-idle", 1)
    with connect(b) as s:
        p1, p2, p3 = (init_producer(s)[1] for _ in range(3))
        assert produce(s, "idem-idle", batch(p1, 0, 0, [1])) == (NONE, 0)
        assert produce(s, "idem-idle", batch(p2, 0, 0, [2])) == (NONE, 1)
        for _ in range(3):
            assert produce(s, "idem-idle", batch(p3, 0, 0, [3]))[0] == REQUEST_TIMED_OUT
        assert produce(s, "idem-idle", batch(p1, 0, 0, [1])) == (NONE, 0), "p1's retry"
        assert produce(s, "idem-idle", batch(p2, 0, 0, [2])) == (NONE, 1), "p2's retry"
        assert produce(s, "idem-idle", batch(p1, 0, 1, [4])) == (NONE, 2)
    with httpx.Client(base_url=b.url, timeout=10.0) as http:
        assert evictions(http) == 0
        msgs = pop_all(http, "idem-idle", 3)
    assert [m["data"]["v"] for m in msgs] == [1, 2, 4]


def test_malformed_idempotent_produces_are_refused_not_half_taken(broker_factory):
    """Two batches for one partition (a new one and a repeat) and a batch whose
    lastOffsetDelta disagrees with its records are refused with INVALID_RECORD, as Kafka's
    ProduceRequest and LogValidator refuse them; with acks=0 a refusal closes the
    connection."""
    b = broker_factory("idem-bad").start()
    create_topic(b, "idem-bad", 1)
    with connect(b) as s:
        _, pid, _ = init_producer(s)
        first = batch(pid, 0, 0, [0])
        assert produce(s, "idem-bad", first) == (NONE, 0)
        assert produce(s, "idem-bad", batch(pid, 0, 1, [1]) + first)[0] == INVALID_RECORD
        narrow = with_last_offset_delta(batch(pid, 0, 1, [1, 2, 3]), 0)
        assert produce(s, "idem-bad", narrow)[0] == INVALID_RECORD
        assert produce(s, "idem-bad", batch(pid, 0, 1, [1])) == (NONE, 1), "seq 1 still next"
        assert produce(s, "idem-bad", batch(pid, 0, 9, [9]), acks=0) == (NONE, -1)
        s.settimeout(10)
        assert s.recv(1) == b"", "an acks=0 out-of-order batch closes the connection"
    with httpx.Client(base_url=b.url, timeout=10.0) as http:
        msgs = pop_all(http, "idem-bad", 2)
    assert [m["data"]["v"] for m in msgs] == [0, 1]


@pytest.mark.timeout(240)
def test_acked_idempotent_records_survive_sigkill_once_each(broker_factory):
    """librdkafka's idempotent producer keeps producing while the broker is killed with
    SIGKILL and restarted on the same Kafka port: it retries its in-flight batches with the
    same sequence numbers, and the durable producer state answers the ones already stored
    with their first offsets. Every record acked is stored, none twice, in order."""
    ck = pytest.importorskip("confluent_kafka")
    b = broker_factory("idem-crash", kafka_port=free_port()).start()
    create_topic(b, "idem-crash", 2)
    acked: list[tuple[int, int]] = []
    failed: list[str] = []

    def report(err, msg):
        if err:
            failed.append(str(err))
        else:
            acked.append((msg.partition(), json.loads(msg.value())["i"]))

    p = ck.Producer(
        {
            "bootstrap.servers": b.kafka_bootstrap,
            "enable.idempotence": True,
            "linger.ms": 2,
            "reconnect.backoff.max.ms": 200,
            "message.timeout.ms": 120000,
        }
    )
    i = 0
    for _round in range(3):
        for _ in range(400):
            p.produce("idem-crash", value=json.dumps({"i": i}).encode(), partition=i % 2,
                      on_delivery=report)
            i += 1
            p.poll(0)
        # Killed with batches in flight: their answers are lost, stored or not.
        b.kill()
        b.start()
    assert p.flush(150) == 0, "every record reported"
    assert failed == [], failed[:5]
    assert len(acked) == i
    with httpx.Client() as http:
        for part in (0, 1):
            stored = [m["data"]["i"] for m in queen_api.drain(
                http, b.url, "idem-crash", "verify", partition=str(part))]
            assert len(stored) == len(set(stored)), f"partition {part}: a record stored twice"
            assert stored == sorted(stored), f"partition {part}: out of order"
            assert stored == sorted(v for k, v in acked if k == part), f"partition {part}"
