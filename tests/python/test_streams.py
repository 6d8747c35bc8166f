"""The streams runtime (/streams/v1, spec native-api §2.17) driven by the official client.

A tumbling event-time window sums `amount` per source partition: its emitted windows must be
exactly what the input gives (computed here) and what an uninterrupted run gives, also when the
worker is SIGKILLed mid-stream and restarted, and when the broker is killed -9 and restarted:
state rows, sink pushes and the source ack of a cycle commit as one. A token-bucket gate holds
messages (partial ack, lease kept) and releases them in order. A changed config_hash is a 409
until reset, which starts from fresh state; a cycle with a stale lease changes nothing.
A cycle applies at most once: a replayed or late cycle (with or without an ack) applies
nothing and answers success. A reset's purge of the old rows finishes though the client hangs
up and the broker is killed; a state past what one read answers is refused, never cut.
"""

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest
from queen import Queen, Stream, token_bucket_gate

import queen_api

WORKER = Path(__file__).with_name("streams_worker.py")
sys.path.insert(0, str(WORKER.parent))
from streams_worker import window_sum  # noqa: E402

BASE_TS = 1_700_000_000_000  # a multiple of the 10 s window
PARTITIONS = ("a", "b", "c")
PER_PARTITION = 40
CLOSER_TS = BASE_TS + 3_600_000  # closes every window of the input; its own stays open


def events(partition: str) -> list[dict]:
    shift = PARTITIONS.index(partition)
    out = [{"ts": BASE_TS + i * 1500 + shift * 100, "amount": (i * 7 + shift) % 11 + 1}
           for i in range(PER_PARTITION)]
    return out + [{"ts": CLOSER_TS, "amount": 0}]


def expected_windows() -> Counter:
    sums: Counter = Counter()
    for p in PARTITIONS:
        for e in events(p):
            if e["ts"] < CLOSER_TS:
                sums[(p, e["ts"] // 10_000 * 10_000)] += e["amount"]
    return Counter((p, start, s) for (p, start), s in sums.items())


def push_events(http: httpx.Client, url: str, queue: str, part: slice) -> None:
    items = [queen_api.item(queue, p, f"{p}-{i}", e)
             for p in PARTITIONS for i, e in list(enumerate(events(p)))[part]]
    results = queen_api.push(http, url, items)
    assert all(queen_api.accepted(r) for r in results), results


def configure(http: httpx.Client, url: str, queue: str, lease_seconds: int) -> None:
    res = http.post(f"{url}/api/v1/configure", json={"queue": queue, "options": {"leaseTime": lease_seconds}})
    assert res.status_code == 200, res.text


class SinkReader:
    """Everything pushed to a sink queue so far, read by a group of its own."""

    def __init__(self, queue: str) -> None:
        self.queue = queue
        self.seen: list[tuple] = []

    def read(self, http: httpx.Client, url: str) -> Counter:
        for m in queen_api.drain(http, url, self.queue, "test-reader"):
            d = m["data"]
            self.seen.append((d["partition"], d["windowStart"], d["sum"]))
        return Counter(self.seen)

    def wait_for(self, http: httpx.Client, url: str, count: int, within_s: float = 90.0) -> Counter:
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            got = self.read(http, url)
            if sum(got.values()) >= count:
                return got
        raise AssertionError(f"{self.queue}: {len(self.seen)} of {count} windows within {within_s} s")


def start_worker(url: str, query_id: str, source: str, sink: str, log: Path) -> subprocess.Popen:
    out = open(log, "ab")
    proc = subprocess.Popen([sys.executable, str(WORKER), url, query_id, source, sink],
                            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONPATH": str(WORKER.parent)})
    out.close()
    return proc


def sigkill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


def test_a_window_sum_is_exact_across_a_worker_kill(broker, http, tmp_path):
    url = broker.url
    configure(http, url, "orders", 2)
    expected = expected_windows()
    total = sum(expected.values())
    calm, killed = SinkReader("sums-calm"), SinkReader("sums-killed")

    push_events(http, url, "orders", slice(0, PER_PARTITION // 2))
    calm_worker = start_worker(url, "calm", "orders", calm.queue, tmp_path / "calm.log")
    worker = start_worker(url, "killed", "orders", killed.queue, tmp_path / "killed-1.log")
    try:
        killed.wait_for(http, url, 1)
        # The rest arrives and the worker dies at once: mid-batch, or between two cycles.
        push_events(http, url, "orders", slice(PER_PARTITION // 2, None))
        sigkill(worker)
        worker = start_worker(url, "killed", "orders", killed.queue, tmp_path / "killed-2.log")
        killed.wait_for(http, url, total)
        calm.wait_for(http, url, total)
    finally:
        sigkill(worker)
        sigkill(calm_worker)
    # Whatever either committed is in its sink now: nothing more, nothing twice.
    assert killed.read(http, url) == expected
    assert calm.read(http, url) == expected


def test_a_window_sum_is_exact_across_a_broker_kill(broker_factory, tmp_path):
    broker = broker_factory("streams-crash").start()
    expected = expected_windows()
    sink = SinkReader("sums")
    with httpx.Client(timeout=10.0) as http:
        configure(http, broker.url, "orders", 2)
        push_events(http, broker.url, "orders", slice(0, PER_PARTITION // 2))
        worker = start_worker(broker.url, "q", "orders", sink.queue, tmp_path / "w-1.log")
        try:
            sink.wait_for(http, broker.url, 1)
            push_events(http, broker.url, "orders", slice(PER_PARTITION // 2, None))
            sigkill(worker)
            broker.kill()
            broker.start()
            worker = start_worker(broker.url, "q", "orders", sink.queue, tmp_path / "w-2.log")
            sink.wait_for(http, broker.url, sum(expected.values()))
        finally:
            sigkill(worker)
        assert sink.read(http, broker.url) == expected


def test_a_token_bucket_gate_holds_messages_and_releases_them_in_order(broker, http):
    url = broker.url
    configure(http, url, "requests", 2)
    items = [queen_api.item("requests", "tenant-1", f"r{i}", {"n": i}) for i in range(20)]
    assert all(queen_api.accepted(r) for r in queen_api.push(http, url, items))

    async def run() -> dict:
        async with Queen(url=url) as client:
            runner = await (
                Stream.from_(client.queue("requests"))
                .gate(token_bucket_gate(capacity=5, refill_per_sec=10))
                .to(client.queue("approved"))
                .run(query_id="limiter", url=url, max_wait_millis=200, subscription_mode="all")
            )
            try:
                approved: list[int] = []
                deadline = time.monotonic() + 60
                while len(approved) < 20 and time.monotonic() < deadline:
                    got = await asyncio.to_thread(queen_api.drain, http, url, "approved", "reader")
                    approved += [m["data"]["n"] for m in got]
                return {"approved": approved, "metrics": runner.metrics()}
            finally:
                await runner.stop()

    out = asyncio.run(run())
    assert out["approved"] == list(range(20))
    # A full bucket lets 5 of the first batch of 20 through; the rest waited for the lease.
    assert out["metrics"]["gateDenialsTotal"] >= 15
    q = register(http, url, "limiter", None)
    rows = state_get(http, url, q["query_id"], partition_id_of(http, url, "requests", "tenant-1"))
    assert rows.status_code == 200, rows.text
    [row] = rows.json()["rows"]
    assert row["value"]["allowedTotal"] == 20


def register(http: httpx.Client, url: str, name: str, config_hash: str | None, reset: bool = False,
             source: str = "src") -> dict:
    """The registry row of `name` as the runner left it (the same hash: no reset)."""
    if config_hash is None:
        listing = http.post(f"{url}/api/v1/kv", json={"operations": [
            {"op": "get", "ns": "queen-streams", "key": f"query/{name}"}]})
        config_hash = listing.json()["results"][0]["value"]["config_hash"]
    res = http.post(f"{url}/streams/v1/queries", json={
        "name": name, "source_queue": source, "config_hash": config_hash, "reset": reset})
    assert res.status_code == 200, res.text
    return res.json()


def state_get(http: httpx.Client, url: str, query_id: str, partition_id: str, **extra) -> httpx.Response:
    return http.post(f"{url}/streams/v1/state/get",
                     json={"query_id": query_id, "partition_id": partition_id, "keys": [], **extra})


def partition_id_of(http: httpx.Client, url: str, queue: str, partition: str) -> str:
    res = http.get(f"{url}/api/v1/resources/partitions", params={"queue": queue})
    assert res.status_code == 200, res.text
    body = res.json()
    rows = body.get("partitions", body) if isinstance(body, dict) else body
    [pid] = [r.get("id") or r.get("partitionId") for r in rows if r.get("name", r.get("partition")) == partition]
    return pid


def popped(http: httpx.Client, url: str, queue: str, group: str, n: int) -> list[dict]:
    """`n` fresh messages of `queue`, leased to `group`."""
    queen_api.push(http, url, [queen_api.item(queue, "p", f"{queue}-{group}-{i}", {"i": i}) for i in range(n)])
    got = queen_api.pop(http, url, queue, group=group, batch=n, wait=False, mode="all")
    assert len(got) == n, got
    return got


def acked_cycle(qid: str, m: dict, group: str, state_ops: list, push_items: list | None = None) -> dict:
    return {"query_id": qid, "partition_id": m["partitionId"], "consumer_group": group,
            "state_ops": state_ops, "push_items": push_items or [],
            "ack": {"transactionId": m["transactionId"], "leaseId": m["leaseId"], "status": "completed", "count": 1},
            "release_lease": False}


def test_a_changed_config_hash_is_refused_until_reset_which_starts_fresh(broker, http):
    url = broker.url
    first = register(http, url, "q1", "hash-1", source="src")
    assert first["fresh"] is True and first["reset"] is False
    again = register(http, url, "q1", "hash-1")
    assert again["query_id"] == first["query_id"] and again["fresh"] is False

    qid = first["query_id"]
    [m] = popped(http, url, "src", "g", 1)
    p1 = m["partitionId"]
    res = http.post(f"{url}/streams/v1/cycle", json=acked_cycle(qid, m, "g", [
        {"type": "upsert", "key": "k", "value": {"acc": 3, "windowEnd": 10}},
        {"type": "upsert", "key": "late", "value": {"acc": 1, "windowEnd": 99}}]))
    assert res.status_code == 200 and res.json()["success"] is True, res.text
    ripe = state_get(http, url, qid, p1, ripe_at_or_before=10).json()["rows"]
    assert [r["key"] for r in ripe] == ["k"] and ripe[0]["value"]["acc"] == 3
    under = state_get(http, url, qid, p1, key_prefix="la").json()["rows"]
    assert [r["key"] for r in under] == ["late"]
    named = http.post(f"{url}/streams/v1/state/get", json={"query_id": qid, "partition_id": p1,
                                                           "keys": ["late", "absent"]}).json()["rows"]
    assert [r["key"] for r in named] == ["late"]

    changed = http.post(f"{url}/streams/v1/queries", json={
        "name": "q1", "source_queue": "src", "config_hash": "hash-2", "reset": False})
    assert changed.status_code == 409, changed.text
    assert changed.json()["success"] is False and "config_hash mismatch" in changed.json()["error"]

    reset = register(http, url, "q1", "hash-2", reset=True)
    assert reset["reset"] is True and reset["query_id"] != qid
    assert state_get(http, url, reset["query_id"], p1).json()["rows"] == []
    # The same chain again, reset or not, is the same query with its state.
    assert register(http, url, "q1", "hash-2", reset=True)["query_id"] == reset["query_id"]
    gone = state_get(http, url, qid, p1)
    assert gone.status_code == 404 and gone.json() == {"error": "not found"}
    # The old id is fenced: its cycles apply nothing.
    late = http.post(f"{url}/streams/v1/cycle", json={
        "query_id": qid, "partition_id": p1, "consumer_group": "g",
        "state_ops": [{"type": "delete", "key": "k"}], "push_items": [], "ack": None})
    assert late.status_code == 404 and late.json() == {"error": "not found"}
    # KV may read the namespace, never write it.
    write = http.post(f"{url}/api/v1/kv", json={"operations": [
        {"op": "put", "ns": "queen-streams", "key": "query/q1", "value": {}}]})
    assert write.status_code == 400, write.text


def test_the_official_client_raises_on_a_changed_operator_chain(broker, http):
    url = broker.url

    async def run(seconds: float, reset: bool):
        async with Queen(url=url) as client:
            runner = await window_sum(client, "src", "dst", seconds).run(
                query_id="w", url=url, reset=reset, subscription_mode="all")
            await runner.stop()

    asyncio.run(run(10, False))
    from queen.streams.runtime.register import StreamsConfigHashMismatch

    with pytest.raises(StreamsConfigHashMismatch):
        asyncio.run(run(20, False))
    asyncio.run(run(20, True))


def test_a_cycle_with_a_stale_lease_changes_nothing(broker, http):
    url = broker.url
    q = register(http, url, "stale", "h", source="in")
    queen_api.push(http, url, [queen_api.item("in", "p", f"m{i}", {"i": i}) for i in range(3)])
    [m0, _, m2] = queen_api.pop(http, url, "in", group="streams.stale", batch=3, wait=False,
                                 mode="all")

    def cycle(lease: str) -> httpx.Response:
        return http.post(f"{url}/streams/v1/cycle", json={
            "query_id": q["query_id"], "partition_id": m0["partitionId"], "consumer_group": "streams.stale",
            "state_ops": [{"type": "upsert", "key": "seen", "value": {"n": 3}}],
            "push_items": [{"queue": "out", "partition": "p", "payload": {"n": 3}}],
            "ack": {"transactionId": m2["transactionId"], "leaseId": lease, "status": "completed", "count": 3},
            "release_lease": True})

    stale = cycle("00000000-0000-0000-0000-000000000000")
    assert stale.json()["success"] is False, stale.text
    assert state_get(http, url, q["query_id"], m0["partitionId"]).json()["rows"] == []
    assert queen_api.pop(http, url, "out", group="check", wait=False, mode="all") == []

    ok = cycle(m2["leaseId"])
    assert ok.status_code == 200 and ok.json()["success"] is True, ok.text
    [row] = state_get(http, url, q["query_id"], m0["partitionId"]).json()["rows"]
    assert row["key"] == "seen" and row["value"] == {"n": 3}
    assert [m["data"] for m in queen_api.pop(http, url, "out", group="check", wait=False, mode="all")] == [{"n": 3}]
    # The ack committed the three: nothing is redelivered to the group.
    assert queen_api.pop(http, url, "in", group="streams.stale", wait=False, mode="all") == []


@pytest.mark.parametrize("change, status", [
    ({"state_ops": [{"type": "upsert", "key": "k" * 1100, "value": 1}]}, 413),
    ({"state_ops": [{"type": "upsert", "key": "k", "value": "v" * (256 * 1024 + 1)}]}, 413),
    ({"state_ops": [{"type": "upsert", "key": "k", "value": 1}] * 4097}, 413),
    ({"state_ops": [{"type": "merge", "key": "k", "value": 1}]}, 400),
    ({"state_ops": [{"type": "upsert", "key": "k"}]}, 400),
    ({"partition_id": "a/b"}, 400),
    ({"partition_id": "07"}, 400),
    ({"partition_id": " 7"}, 400),
    ({"partition_id": "+7"}, 400),
    ({"state_ops": [{"type": "upsert", "key": "k", "value": 1}]}, 400),
    ({"state_ops": []}, 400),
    ({"query_id": "not-a-query"}, 400),
    ({"ack": {"transactionId": "t", "leaseId": "l", "status": "failed", "count": 1}}, 400),
])
def test_a_cycle_out_of_bounds_is_refused_whole(broker, http, change, status):
    url = broker.url
    q = register(http, url, "bounds", "h")
    body = {"query_id": q["query_id"], "partition_id": "p1", "consumer_group": "g",
            "state_ops": [{"type": "delete", "key": "k"}],
            "push_items": [{"queue": "out", "partition": "p", "payload": {}}], "ack": None}
    res = http.post(f"{url}/streams/v1/cycle", json={**body, **change})
    assert res.status_code == status, res.text
    assert res.json()["success"] is False
    assert queen_api.pop(http, url, "out", group="check", wait=False, mode="all") == []


def sink_payloads(http: httpx.Client, url: str, queue: str) -> list:
    return [m["data"] for m in queen_api.drain(http, url, queue, "check")]


def cycle_post(http: httpx.Client, url: str, body: dict) -> httpx.Response:
    return http.post(f"{url}/streams/v1/cycle", json=body)


def test_a_replayed_cycle_applies_nothing_and_answers_success(broker, http):
    """The client retries a cycle whose answer it lost, and an older copy may arrive late:
    neither may push again or rewind the state."""
    url = broker.url
    q = register(http, url, "replay", "h", source="in")
    group = "streams.replay"
    m0, _, m2 = popped(http, url, "in", group, 3)

    def body(m: dict, n: int) -> dict:
        return acked_cycle(q["query_id"], m, group, [{"type": "upsert", "key": "sum", "value": {"n": n}}],
                           [{"queue": "out", "partition": "p", "payload": {"n": n}}])

    first = cycle_post(http, url, body(m0, 1))
    assert first.status_code == 200 and first.json()["success"] is True, first.text
    assert "replayed" not in first.json()
    again = cycle_post(http, url, body(m0, 1))
    assert again.status_code == 200, again.text
    assert again.json()["success"] is True and again.json()["replayed"] is True
    later = cycle_post(http, url, body(m2, 3))
    assert later.status_code == 200 and later.json()["success"] is True, later.text
    assert "replayed" not in later.json()
    # The older copy arrives after the newer cycle: it must not rewind the sum.
    older = cycle_post(http, url, body(m0, 1))
    assert older.status_code == 200 and older.json()["replayed"] is True, older.text
    [row] = state_get(http, url, q["query_id"], m0["partitionId"]).json()["rows"]
    assert row["value"] == {"n": 3}
    assert sink_payloads(http, url, "out") == [{"n": 1}, {"n": 3}]


def test_a_replayed_flush_applies_nothing(broker, http):
    """A cycle without an ack (the client's flush of ripe windows) is fenced by the rows it
    deletes: sent twice, its windows are emitted once."""
    url = broker.url
    q = register(http, url, "flush", "h", source="in")
    group = "streams.flush"
    [m] = popped(http, url, "in", group, 1)
    pid = m["partitionId"]
    seed = cycle_post(http, url, acked_cycle(q["query_id"], m, group, [
        {"type": "upsert", "key": "w1", "value": {"acc": 5, "windowEnd": 1}}]))
    assert seed.json()["success"] is True, seed.text
    flush = {"query_id": q["query_id"], "partition_id": pid, "consumer_group": group,
             "state_ops": [{"type": "delete", "key": "w1"}],
             "push_items": [{"queue": "out", "partition": "p", "payload": {"sum": 5}}], "ack": None}
    first = cycle_post(http, url, flush)
    assert first.status_code == 200 and first.json()["success"] is True, first.text
    assert "replayed" not in first.json()
    again = cycle_post(http, url, flush)
    assert again.status_code == 200 and again.json()["replayed"] is True, again.text
    assert state_get(http, url, q["query_id"], pid).json()["rows"] == []
    assert sink_payloads(http, url, "out") == [{"sum": 5}]


def test_a_cycle_acks_only_its_query_source_and_names_partitions_one_way(broker, http):
    url = broker.url
    q = register(http, url, "sourced", "h", source="in")
    [m] = popped(http, url, "other", "g", 1)
    res = cycle_post(http, url, acked_cycle(q["query_id"], m, "g", [{"type": "upsert", "key": "k", "value": 1}]))
    assert res.json()["success"] is False and "is not of queue in" in res.json()["error"], res.text
    assert state_get(http, url, q["query_id"], m["partitionId"]).json()["rows"] == []
    # The same partition spelled another way would key other rows.
    aliased = state_get(http, url, q["query_id"], "0" + m["partitionId"])
    assert aliased.status_code == 400, aliased.text


def rows_left(http: httpx.Client, url: str, qid: str) -> int:
    """State rows of `qid` plus its purge marker (at most one of each counted)."""
    res = http.post(f"{url}/api/v1/kv", json={"operations": [
        {"op": "getPrefix", "ns": "queen-streams", "prefix": f"row/{qid}/", "keysOnly": True, "limit": 1},
        {"op": "getPrefix", "ns": "queen-streams", "prefix": f"purging/{qid}", "keysOnly": True, "limit": 1}]})
    assert res.status_code == 200, res.text
    return sum(len(r["rows"]) for r in res.json()["results"])


def registered_hash(http: httpx.Client, url: str, name: str) -> str:
    res = http.post(f"{url}/api/v1/kv", json={"operations": [
        {"op": "get", "ns": "queen-streams", "key": f"query/{name}"}]})
    return res.json()["results"][0]["value"]["config_hash"]


def send_and_hang_up(url: str, path: str, body: dict) -> None:
    """Sends one request and closes the connection without reading the answer."""
    import json
    import socket
    from urllib.parse import urlsplit

    u = urlsplit(url)
    data = json.dumps(body).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: {u.hostname}:{u.port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n").encode()
    with socket.create_connection((u.hostname, u.port), timeout=10) as s:
        s.sendall(head + data)


def test_a_reset_purge_finishes_after_the_client_hangs_up_and_across_a_broker_kill(broker_factory):
    broker = broker_factory("streams-purge").start()
    with httpx.Client(timeout=30.0) as http:
        url = broker.url
        q = register(http, url, "big", "h1", source="in")
        msgs = popped(http, url, "in", "g", 5)
        for i, m in enumerate(msgs):
            ops = [{"type": "upsert", "key": f"k{i}-{j}", "value": j} for j in range(4096)]
            res = cycle_post(http, url, acked_cycle(q["query_id"], m, "g", ops))
            assert res.json()["success"] is True, res.text
        # 20,480 rows: twenty engine cycles of purge, many more than one request's worth.
        assert rows_left(http, url, q["query_id"]) == 1
        reset = {"name": "big", "source_queue": "in", "config_hash": "h2", "reset": True}
        # The client goes away at once; a hang-up before the reset committed changes nothing,
        # so try again (a bounded number of times) until the registry names the new hash.
        for _ in range(5):
            send_and_hang_up(url, "/streams/v1/queries", reset)
            for _ in range(50):
                if registered_hash(http, url, "big") == "h2":
                    break
            else:
                continue
            break
        assert registered_hash(http, url, "big") == "h2"
        broker.kill()
        broker.start()
        url = broker.url
        for _ in range(600):
            if rows_left(http, url, q["query_id"]) == 0:
                break
        assert rows_left(http, url, q["query_id"]) == 0, "the old id's rows were never purged"
        fresh = register(http, url, "big", "h2", source="in")
        assert fresh["query_id"] != q["query_id"]
        assert state_get(http, url, fresh["query_id"], msgs[0]["partitionId"]).json()["rows"] == []


def test_a_state_past_what_one_read_answers_is_refused_not_cut(broker, http):
    """The official client neither pages nor reads a `truncated` flag: a partial answer would
    restart windows from `initial`. So a state past the read budget (16 MiB) is a 413."""
    url = broker.url
    q = register(http, url, "huge", "h", source="in")
    msgs = popped(http, url, "in", "g", 11)
    value = "v" * (200 * 1024)
    for i, m in enumerate(msgs):
        ops = [{"type": "upsert", "key": f"k{i}-{j}", "value": value} for j in range(8)]
        res = cycle_post(http, url, acked_cycle(q["query_id"], m, "g", ops))
        assert res.json()["success"] is True, res.text
    pid = msgs[0]["partitionId"]
    whole = state_get(http, url, q["query_id"], pid)
    assert whole.status_code == 413, whole.text[:200]
    assert whole.json()["success"] is False and "rows" not in whole.json()
    named = http.post(f"{url}/streams/v1/state/get", json={"query_id": q["query_id"], "partition_id": pid,
                                                           "keys": ["k0-0", "k10-7"]})
    assert named.status_code == 200, named.text[:200]
    assert [r["key"] for r in named.json()["rows"]] == ["k0-0", "k10-7"]
    under = state_get(http, url, q["query_id"], pid, key_prefix="k1-")
    assert under.status_code == 200 and len(under.json()["rows"]) == 8


def test_state_get_needs_read_write_a_documented_departure_from_the_spec(broker_factory):
    """Spec §1.2 lets a read-only role call state/get; here it needs read-write (the read goes
    through the KV command), as docs/api.md says."""
    import jwt

    secret = "streams-test-secret-that-is-long-enough-for-hs256-0123"
    b = broker_factory("streams-jwt", env={"QUEEN_JWT_SECRET": secret}).start()

    def bearer(role: str) -> dict:
        now = int(time.time())
        body = {"sub": "t", "iat": now, "exp": now + 600, "role": role}
        return {"Authorization": f"Bearer {jwt.encode(body, secret, algorithm='HS256')}"}

    get = {"query_id": "00000000-0000-7000-8000-000000000000", "partition_id": "1", "keys": []}
    with httpx.Client(base_url=b.url, timeout=10) as http:
        assert http.post("/streams/v1/state/get", json=get, headers=bearer("read-only")).status_code == 403
        unknown = http.post("/streams/v1/state/get", json=get, headers=bearer("read-write"))
        assert unknown.status_code == 404, unknown.text


def test_a_cycle_past_the_query_state_bound_is_refused_whole(broker_factory):
    """`streams_state_max_keys` bounds one query's rows at write time: a cycle that would pass
    it applies nothing (no state op, no sink push, no ack); one that does not grow passes."""
    b = broker_factory(env={"QUEEN_STREAMS_STATE_MAX_KEYS": "3"}).start()
    with httpx.Client(base_url=b.url, timeout=10.0) as http:
        url = b.url
        q = register(http, url, "capped", "h", source="in")
        qid = q["query_id"]
        [m0, m1] = popped(http, url, "in", "g", 2)
        pid = m0["partitionId"]
        ups = [{"type": "upsert", "key": k, "value": {"n": 1}} for k in ("a", "b", "c")]
        res = cycle_post(http, url, acked_cycle(qid, m0, "g", ups))
        assert res.status_code == 200 and res.json()["success"] is True, res.text

        grow = acked_cycle(qid, m1, "g", [{"type": "upsert", "key": "d", "value": {"n": 1}}],
                           [{"queue": "out", "partition": "p", "payload": {"n": 1}}])
        refused = cycle_post(http, url, grow)
        assert refused.status_code == 413, refused.text
        body = refused.json()
        assert body["success"] is False and "streams_state_max_keys" in body["error"], body
        rows = state_get(http, url, qid, pid).json()["rows"]
        assert sorted(r["key"] for r in rows) == ["a", "b", "c"]
        assert queen_api.pop(http, url, "out", group="check", wait=False, mode="all") == []

        # One row in and one out keeps the count at the bound: it passes, ack and push too.
        swap = acked_cycle(qid, m1, "g", [{"type": "upsert", "key": "d", "value": {"n": 2}},
                                          {"type": "delete", "key": "a"}],
                           [{"queue": "out", "partition": "p", "payload": {"n": 2}}])
        res = cycle_post(http, url, swap)
        assert res.status_code == 200 and res.json()["success"] is True, res.text
        rows = state_get(http, url, qid, pid).json()["rows"]
        assert sorted(r["key"] for r in rows) == ["b", "c", "d"]
        out = queen_api.pop(http, url, "out", group="check", wait=False, mode="all")
        assert [m["data"] for m in out] == [{"n": 2}]
