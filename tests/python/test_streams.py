"""The streams runtime (/streams/v1, spec native-api §2.17) driven by the official client.

A tumbling event-time window sums `amount` per source partition: its emitted windows must be
exactly what the input gives (computed here) and what an uninterrupted run gives, also when the
worker is SIGKILLed mid-stream and restarted, and when the broker is killed -9 and restarted:
state rows, sink pushes and the source ack of a cycle commit as one. A token-bucket gate holds
messages (partial ack, lease kept) and releases them in order. A changed config_hash is a 409
until reset, which starts from fresh state; a cycle with a stale lease changes nothing.
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


def register(http: httpx.Client, url: str, name: str, config_hash: str | None, reset: bool = False) -> dict:
    """The registry row of `name` as the runner left it (the same hash: no reset)."""
    if config_hash is None:
        listing = http.post(f"{url}/api/v1/kv", json={"operations": [
            {"op": "get", "ns": "queen-streams", "key": f"query/{name}"}]})
        config_hash = listing.json()["results"][0]["value"]["config_hash"]
    res = http.post(f"{url}/streams/v1/queries", json={
        "name": name, "source_queue": "src", "config_hash": config_hash, "reset": reset})
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


def test_a_changed_config_hash_is_refused_until_reset_which_starts_fresh(broker, http):
    url = broker.url
    first = register(http, url, "q1", "hash-1")
    assert first["fresh"] is True and first["reset"] is False
    again = register(http, url, "q1", "hash-1")
    assert again["query_id"] == first["query_id"] and again["fresh"] is False

    qid = first["query_id"]
    res = http.post(f"{url}/streams/v1/cycle", json={
        "query_id": qid, "partition_id": "p1", "consumer_group": "g",
        "state_ops": [{"type": "upsert", "key": "k", "value": {"acc": 3, "windowEnd": 10}},
                      {"type": "upsert", "key": "late", "value": {"acc": 1, "windowEnd": 99}}],
        "push_items": [], "ack": None, "release_lease": True})
    assert res.status_code == 200 and res.json()["success"] is True, res.text
    ripe = state_get(http, url, qid, "p1", ripe_at_or_before=10).json()["rows"]
    assert [r["key"] for r in ripe] == ["k"] and ripe[0]["value"]["acc"] == 3
    under = state_get(http, url, qid, "p1", key_prefix="la").json()["rows"]
    assert [r["key"] for r in under] == ["late"]
    named = http.post(f"{url}/streams/v1/state/get", json={"query_id": qid, "partition_id": "p1",
                                                           "keys": ["late", "absent"]}).json()["rows"]
    assert [r["key"] for r in named] == ["late"]

    changed = http.post(f"{url}/streams/v1/queries", json={
        "name": "q1", "source_queue": "src", "config_hash": "hash-2", "reset": False})
    assert changed.status_code == 409, changed.text
    assert changed.json()["success"] is False and "config_hash mismatch" in changed.json()["error"]

    reset = register(http, url, "q1", "hash-2", reset=True)
    assert reset["reset"] is True and reset["query_id"] != qid
    assert state_get(http, url, reset["query_id"], "p1").json()["rows"] == []
    # The same chain again, reset or not, is the same query with its state.
    assert register(http, url, "q1", "hash-2", reset=True)["query_id"] == reset["query_id"]
    gone = state_get(http, url, qid, "p1")
    assert gone.status_code == 404 and gone.json() == {"error": "not found"}
    # The old id is fenced: its cycles apply nothing.
    late = http.post(f"{url}/streams/v1/cycle", json={
        "query_id": qid, "partition_id": "p1", "consumer_group": "g",
        "state_ops": [{"type": "upsert", "key": "k", "value": 1}], "push_items": [], "ack": None})
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
    q = register(http, url, "stale", "h")
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
    ({"query_id": "not-a-query"}, 400),
    ({"ack": {"transactionId": "t", "leaseId": "l", "status": "failed", "count": 1}}, 400),
])
def test_a_cycle_out_of_bounds_is_refused_whole(broker, http, change, status):
    url = broker.url
    q = register(http, url, "bounds", "h")
    body = {"query_id": q["query_id"], "partition_id": "p1", "consumer_group": "g",
            "state_ops": [], "push_items": [{"queue": "out", "partition": "p", "payload": {}}], "ack": None}
    res = http.post(f"{url}/streams/v1/cycle", json={**body, **change})
    assert res.status_code == status, res.text
    assert res.json()["success"] is False
    assert queen_api.pop(http, url, "out", group="check", wait=False, mode="all") == []
