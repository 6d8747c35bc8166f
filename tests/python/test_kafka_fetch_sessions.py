"""Fetch sessions (KIP-227) on the Kafka port, issue 10, against the real binary:
kafka-python (which keeps sessions) consumes through incremental fetches, and raw Fetch v7
frames check what a client cannot show: only changed partitions come back, forgotten ones
never, wrong epochs and unknown or foreign ids are refused, the slot cap and slots = 0 answer
sessionless, and a restart forgets every session (docs/kafka-compat.md "Fetch sessions")."""

import logging
import socket
import struct

import httpx
import pytest

from queen_api import item, push
from queen_broker import free_port
from raw_socket import kafka_request as request, read_kafka_frame as read_frame
from test_kafka_sasl_tls import sasl_authenticate, sasl_handshake, secured
from test_metrics import scrape

kafka = pytest.importorskip("kafka", reason="kafka-python is in scripts/lib/requirements.txt")
from kafka import KafkaConsumer, TopicPartition  # noqa: E402

FETCH = 1
NOT_FOUND = 70
BAD_EPOCH = 71


def fetch_v7(
    session_id: int,
    epoch: int,
    topics: dict[str, dict[int, int]],
    forgotten: dict[str, list[int]] | None = None,
    max_wait_ms: int = 0,
) -> bytes:
    """A Fetch v7 body: `topics` maps topic -> {partition: offset}."""
    body = struct.pack(">iiiibii", -1, max_wait_ms, 1, 1 << 20, 0, session_id, epoch)
    body += struct.pack(">i", len(topics))
    for name, parts in topics.items():
        body += struct.pack(">h", len(name)) + name.encode()
        body += struct.pack(">i", len(parts))
        for index, offset in parts.items():
            body += struct.pack(">iqqi", index, offset, -1, 1 << 20)
    forgotten = forgotten or {}
    body += struct.pack(">i", len(forgotten))
    for name, indexes in forgotten.items():
        body += struct.pack(">h", len(name)) + name.encode()
        body += struct.pack(">i", len(indexes)) + b"".join(struct.pack(">i", i) for i in indexes)
    return body


def offsets_of(records: bytes) -> list[int]:
    """The offsets of the records in uncompressed record batches v2."""
    out, at = [], 0
    while at + 61 <= len(records):
        base, length = struct.unpack(">qi", records[at : at + 12])
        (count,) = struct.unpack(">i", records[at + 57 : at + 61])
        out.extend(range(base, base + count))
        at += 12 + length
    return out


class Answer:
    def __init__(self, error: int, session_id: int, parts: dict):
        self.error = error
        self.session_id = session_id
        # (topic, partition) -> (error, high watermark, record offsets)
        self.parts = parts


def parse_v7(resp: bytes, corr: int) -> Answer:
    got_corr, _throttle, error, session_id, n = struct.unpack(">iihii", resp[:18])
    assert got_corr == corr
    at, parts = 18, {}
    for _ in range(n):
        (ln,) = struct.unpack(">h", resp[at : at + 2])
        topic = resp[at + 2 : at + 2 + ln].decode()
        at += 2 + ln
        (np,) = struct.unpack(">i", resp[at : at + 4])
        at += 4
        for _ in range(np):
            index, perr, hw, _lso, _start, aborted = struct.unpack(">ihqqqi", resp[at : at + 34])
            at += 34 + max(aborted, 0) * 16
            (size,) = struct.unpack(">i", resp[at : at + 4])
            at += 4
            records = resp[at : at + max(size, 0)]
            at += max(size, 0)
            parts[(topic, index)] = (perr, hw, offsets_of(records))
    assert at == len(resp), "the whole answer was read"
    return Answer(error, session_id, parts)


class Conn:
    """One raw Kafka connection sending Fetch v7."""

    def __init__(self, port: int):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.corr = 0

    def send(self, body: bytes) -> int:
        self.corr += 1
        self.s.sendall(request(FETCH, 7, self.corr, body))
        return self.corr

    def fetch(self, *args, **kw) -> Answer:
        corr = self.send(fetch_v7(*args, **kw))
        return parse_v7(read_frame(self.s), corr)

    def close(self):
        self.s.close()


def push_to(http: httpx.Client, base: str, queue: str, partition: int, n: int, tag: str):
    items = [item(queue, str(partition), f"{tag}-{i}", {"i": i}) for i in range(n)]
    push(http, base, items)


def test_incremental_fetches_answer_only_what_changed(broker_factory):
    b = broker_factory("sessions").start()
    http = httpx.Client(timeout=15.0)
    push_to(http, b.url, "t", 0, 2, "a")
    push_to(http, b.url, "t", 1, 1, "b")
    c = Conn(b.kafka_port)
    try:
        full = c.fetch(0, 0, {"t": {0: 0, 1: 0}})
        assert full.error == 0 and full.session_id > 0
        sid = full.session_id
        assert full.parts == {("t", 0): (0, 2, [0, 1]), ("t", 1): (0, 1, [0])}

        # The consumer moved on: positions change, nothing new to say.
        inc = c.fetch(sid, 1, {"t": {0: 2, 1: 1}})
        assert (inc.error, inc.session_id, inc.parts) == (0, sid, {})

        # A record on partition 1 only: only partition 1 comes back, with no partition named.
        push_to(http, b.url, "t", 1, 1, "c")
        inc = c.fetch(sid, 2, {})
        assert inc.parts == {("t", 1): (0, 2, [1])}

        # Partition 0 leaves the session: its new records are never answered.
        inc = c.fetch(sid, 3, {"t": {1: 2}}, forgotten={"t": [0]})
        assert inc.parts == {}
        push_to(http, b.url, "t", 0, 1, "d")
        inc = c.fetch(sid, 4, {}, max_wait_ms=300)
        assert (inc.error, inc.parts) == (0, {})

        # Long poll: an incremental fetch with nothing new waits for the next record.
        corr = c.send(fetch_v7(sid, 5, {}, max_wait_ms=20_000))
        push_to(http, b.url, "t", 1, 1, "e")
        inc = parse_v7(read_frame(c.s), corr)
        assert inc.parts == {("t", 1): (0, 3, [2])}

        # A repeated or skipped epoch: 71; an unknown id: 70; neither closes the session.
        assert c.fetch(sid, 5, {}).error == BAD_EPOCH
        bad = c.fetch(sid, 9, {})
        assert (bad.error, bad.session_id, bad.parts) == (BAD_EPOCH, 0, {})
        assert c.fetch(sid ^ 0x5A5A, 6, {}).error == NOT_FOUND
        assert c.fetch(sid, 6, {}, max_wait_ms=0).error == 0

        # Another connection goes on with the same session (sessions are node-wide).
        other = Conn(b.kafka_port)
        try:
            assert other.fetch(sid, 7, {"t": {1: 3}}).error == 0
        finally:
            other.close()

        # Epoch -1 with the id: closed, answered sessionless and whole.
        final = c.fetch(sid, -1, {"t": {1: 0}})
        assert (final.error, final.session_id) == (0, 0)
        assert final.parts == {("t", 1): (0, 3, [0, 1, 2])}
        assert c.fetch(sid, 8, {}).error == NOT_FOUND

        # Epoch 0 naming a live session closes it and opens another.
        first = c.fetch(0, 0, {"t": {1: 3}}).session_id
        second = c.fetch(first, 0, {"t": {1: 3}}).session_id
        assert 0 not in (first, second) and first != second
        assert c.fetch(first, 1, {}).error == NOT_FOUND
        assert c.fetch(second, 1, {}).error == 0

        m = scrape(httpx.Client(base_url=b.url, timeout=15.0))
        assert m.one("queen_kafka_fetch_sessions") == 1
        assert m.one("queen_kafka_fetch_session_bytes") > 0
        assert m.one("queen_kafka_fetch_session_evictions_total") == 0
    finally:
        c.close()
        http.close()


def test_kafka_python_consumes_through_incremental_fetches(broker_factory, caplog):
    b = broker_factory("kpy").start()
    http = httpx.Client(timeout=15.0)
    for p in (0, 1):
        push_to(http, b.url, "kp", p, 3, f"first-{p}")
    caplog.set_level(logging.DEBUG, logger="kafka.consumer.fetcher")
    consumer = KafkaConsumer(bootstrap_servers=b.kafka_bootstrap, fetch_max_wait_ms=200)
    try:
        consumer.assign([TopicPartition("kp", 0), TopicPartition("kp", 1)])
        consumer.seek_to_beginning()

        def take(n: int, rounds: int = 100) -> list[tuple[int, int]]:
            got: list[tuple[int, int]] = []
            for _ in range(rounds):
                for tp, recs in consumer.poll(timeout_ms=200).items():
                    got.extend((tp.partition, r.offset) for r in recs)
                if len(got) >= n:
                    break
            return sorted(got)

        assert take(6) == [(p, o) for p in (0, 1) for o in range(3)]
        for p in (0, 1):
            push_to(http, b.url, "kp", p, 2, f"second-{p}")
        assert take(4) == [(p, o) for p in (0, 1) for o in (3, 4)]
        assert take(1, rounds=5) == [], "nothing more"
    finally:
        consumer.close()
    log = caplog.text
    assert "created a new incremental fetch session" in log
    assert "sent an incremental fetch response for session" in log
    assert "Built incremental fetch" in log
    m = scrape(httpx.Client(base_url=b.url, timeout=15.0))
    # kafka-python 3.0.12 does not close its session on close (Fetcher.close sends
    # nothing), and a new one replaces the old (epoch 0 with its id): exactly one is left.
    assert m.one("queen_kafka_fetch_sessions") == 1


def test_another_users_session_id_is_not_found(broker_factory, tmp_path):
    b = secured(broker_factory, tmp_path)

    def login(user: str, password: str) -> Conn:
        c = Conn(b.kafka_port)
        assert sasl_handshake(c.s, b"PLAIN", corr=100) == 0
        assert sasl_authenticate(c.s, b"\0" + user.encode() + b"\0" + password.encode(), 101)[0] == 0
        return c

    alice, bob = login("alice", "alice-pw"), login("bob", "bob-pw")
    try:
        sid = alice.fetch(0, 0, {"a": {0: 0}}).session_id
        assert sid > 0
        assert bob.fetch(sid, 1, {}).error == NOT_FOUND
        # Bob's full fetch naming it opens his own session and leaves Alice's alone.
        mine = bob.fetch(sid, 0, {"b": {0: 0}}).session_id
        assert mine not in (0, sid)
        assert bob.fetch(sid, -1, {"b": {0: 0}}).session_id == 0
        assert alice.fetch(sid, 1, {}).error == 0
        assert alice.fetch(mine, 1, {}).error == NOT_FOUND
        assert bob.fetch(mine, 1, {}).error == 0
    finally:
        alice.close()
        bob.close()


def gauges(broker, *names: str) -> tuple:
    """The broker's metrics of these names, scraped once."""
    m = scrape(httpx.Client(base_url=broker.url, timeout=15.0))
    return tuple(m.one(n) for n in names)


def test_no_slots_and_a_full_cache_answer_sessionless(broker_factory):
    off = broker_factory("off", env={"QUEEN_KAFKA_FETCH_SESSION_SLOTS": "0"}).start()
    http = httpx.Client(timeout=15.0)
    push_to(http, off.url, "z", 0, 2, "z")
    c = Conn(off.kafka_port)
    try:
        full = c.fetch(0, 0, {"z": {0: 0}})
        assert (full.error, full.session_id, full.parts) == (0, 0, {("z", 0): (0, 2, [0, 1])})
    finally:
        c.close()
    # kafka-python reads a session id of 0 as "sessionless" and consumes on.
    consumer = KafkaConsumer(bootstrap_servers=off.kafka_bootstrap, fetch_max_wait_ms=200)
    try:
        consumer.assign([TopicPartition("z", 0)])
        consumer.seek_to_beginning()
        got = []
        for _ in range(50):
            got += [r.offset for recs in consumer.poll(timeout_ms=200).values() for r in recs]
            if len(got) >= 2:
                break
        assert got == [0, 1]
    finally:
        consumer.close()

    one = broker_factory("one", env={"QUEEN_KAFKA_FETCH_SESSION_SLOTS": "1"}).start()
    c = Conn(one.kafka_port)
    try:
        two = c.fetch(0, 0, {"t": {0: 0, 1: 0}}).session_id
        assert two > 0
        # No room and no smaller session to evict: sessionless, the session stays.
        small = c.fetch(0, 0, {"t": {0: 0}})
        assert (small.error, small.session_id, set(small.parts)) == (0, 0, {("t", 0)})
        assert c.fetch(two, 1, {}).error == 0
        # A larger one does not evict it either while it is younger than 2 minutes
        # (Kafka's rule; the eviction itself is a unit test, as it needs the 2 minutes).
        three = c.fetch(0, 0, {"t": {0: 0, 1: 0, 2: 0}})
        assert (three.error, three.session_id, len(three.parts)) == (0, 0, 3)
        assert c.fetch(two, 2, {}).error == 0
        evictions = "queen_kafka_fetch_session_evictions_total"
        assert gauges(one, "queen_kafka_fetch_sessions", evictions) == (1, 0)
    finally:
        c.close()
        http.close()


def test_an_incremental_fetch_over_the_cap_is_answered_sessionless(broker_factory):
    b = broker_factory("cap").start()
    http = httpx.Client(timeout=15.0)
    push_to(http, b.url, "w", 0, 1, "w")
    c, other = Conn(b.kafka_port), Conn(b.kafka_port)
    try:
        sid = c.fetch(0, 0, {"w": {0: 0}}).session_id
        keep = other.fetch(0, 0, {"w": {0: 0}}).session_id
        assert sid > 0 and keep > 0
        # 10 001 partitions listed (10 000 of them forgotten at once): past the cap before
        # anything is applied, so the session closes and the listed ones are answered.
        many = {i: 0 for i in range(10_001)}
        big = c.fetch(sid, 1, {"u": many}, forgotten={"u": list(range(10_000))})
        assert (big.error, big.session_id, len(big.parts)) == (0, 0, 10_001)
        assert c.fetch(sid, 2, {}).error == NOT_FOUND
        # Another session goes on; an invalid topic name is never cached.
        assert other.fetch(keep, 1, {}).error == 0
        bad = other.fetch(keep, 2, {"a/b": {0: 0}})
        assert (bad.session_id, set(bad.parts)) == (0, {("a/b", 0)})
        assert other.fetch(keep, 3, {}).error == NOT_FOUND
        held = gauges(b, "queen_kafka_fetch_sessions", "queen_kafka_fetch_session_bytes")
        assert held == (0, 0)
    finally:
        c.close()
        other.close()
        http.close()


def test_a_restart_forgets_sessions_and_clients_start_again(broker_factory):
    b = broker_factory("restart", kafka_port=free_port()).start()
    http = httpx.Client(timeout=15.0)
    push_to(http, b.url, "r", 0, 2, "before")
    c = Conn(b.kafka_port)
    sid = c.fetch(0, 0, {"r": {0: 0}}).session_id
    assert sid > 0
    c.close()
    consumer = KafkaConsumer(
        bootstrap_servers=b.kafka_bootstrap,
        fetch_max_wait_ms=200,
        reconnect_backoff_max_ms=500,
    )
    try:
        consumer.assign([TopicPartition("r", 0)])
        consumer.seek_to_beginning()

        def take(n: int) -> list[int]:
            got: list[int] = []
            for _ in range(150):
                got += [r.offset for recs in consumer.poll(timeout_ms=200).values() for r in recs]
                if len(got) >= n:
                    break
            return got

        assert take(2) == [0, 1]
        b.kill()
        b.start()
        push_to(http, b.url, "r", 0, 1, "after")
        # The consumer's session is gone (70): it starts a new one and reads on.
        assert take(1) == [2]
    finally:
        consumer.close()
    c = Conn(b.kafka_port)
    try:
        assert c.fetch(sid, 1, {"r": {0: 2}}).error == NOT_FOUND
        again = c.fetch(0, 0, {"r": {0: 2}})
        assert again.session_id > 0 and again.parts == {("r", 0): (0, 3, [2])}
    finally:
        c.close()
        http.close()
