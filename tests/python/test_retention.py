"""Retention against the real binary: each rule removes exactly what it should and
nothing else, and a kill -9 + restart keeps what was removed removed and the rest held.

The broker sweeps every `retention_interval_ms` (50 ms here); retention seconds are at
their floor (1 s). Nothing is timed: every check polls for the expected state with a
deadline, and a rule that must remove nothing is checked after a later sweep is known to
have run (a fresh message of the age queue went).
"""

import time

import httpx

import queen_api

ENV = {"QUEEN_RETENTION_INTERVAL_MS": "50"}
DEADLINE_S = 30.0


def configure(http: httpx.Client, queue: str, **options) -> None:
    res = http.post("/api/v1/configure", json={"queue": queue, "options": options})
    assert res.status_code == 200, res.text


def push(http: httpx.Client, base: str, queue: str, txns: list[str]) -> None:
    items = [queen_api.item(queue, "p", t, {"t": t}) for t in txns]
    assert all(queen_api.accepted(r) for r in queen_api.push(http, base, items))


def bounds(http: httpx.Client, queue: str) -> tuple[int, int]:
    """(logStartOffset, highWatermark) of the queue's partition "p"."""
    res = http.post("/api/v1/fetch", json={"entries": [{"queue": queue, "partition": "p", "offset": 0}]})
    assert res.status_code == 200, res.text
    [e] = res.json()["entries"]
    return e["logStartOffset"], e["highWatermark"]


def wait_for(what, expected, label: str):
    deadline = time.monotonic() + DEADLINE_S
    got = what()
    while got != expected and time.monotonic() < deadline:
        time.sleep(0.05)
        got = what()
    assert got == expected, f"{label}: {got!r}, expected {expected!r}"


def total(http: httpx.Client, queue: str) -> int:
    res = http.get(f"/api/v1/resources/queues/{queue}")
    assert res.status_code == 200, res.text
    return res.json()["totals"]["total"]


def a_later_sweep_ran(http: httpx.Client, base: str, marker: str) -> None:
    """Pushes a fresh message to the age queue and waits until retention removed it: every
    sweep that could remove something wrongly elsewhere has had its chance by then."""
    _, hwm = bounds(http, "r-age")
    push(http, base, "r-age", [marker])
    wait_for(lambda: bounds(http, "r-age"), (hwm + 1, hwm + 1), "the marker's sweep")


def offsets_of(messages: list[dict]) -> list[int]:
    return sorted(m.get("offset", -1) for m in messages)


def test_each_rule_removes_what_it_should_and_a_restart_keeps_it(broker_factory):
    broker = broker_factory(env=ENV).start()
    with httpx.Client(base_url=broker.url, timeout=10.0) as http:
        base = broker.url
        configure(http, "r-age", retentionEnabled=True, retentionSeconds=1)
        configure(http, "r-long", retentionEnabled=True, retentionSeconds=3600)
        configure(http, "r-off", retentionEnabled=False, retentionSeconds=1, completedRetentionSeconds=1)
        configure(http, "r-done", retentionEnabled=True, completedRetentionSeconds=1)
        configure(http, "r-wait", maxWaitTimeSeconds=1, leaseTime=600)

        for q in ("r-age", "r-long", "r-off", "r-wait"):
            push(http, base, q, [f"{q}-{i}" for i in range(5)])
        # Two pushes, two runs: retention removes whole runs only, so completion of the
        # first two removes them and completion of three would remove the same two.
        push(http, base, "r-done", [f"r-done-{i}" for i in range(2)])
        push(http, base, "r-done", [f"r-done-{i}" for i in range(2, 5)])

        # Completion: one group completes everything, the other only the first two.
        fast = queen_api.pop(http, base, "r-done", group="fast", batch=5, wait=False, mode="all")
        assert len(fast) == 5
        assert all(r["success"] for r in queen_api.ack_batch(http, base, fast, "fast"))
        slow = queen_api.pop(http, base, "r-done", group="slow", batch=2, wait=False, mode="all")
        assert len(slow) == 2
        assert all(r["success"] for r in queen_api.ack_batch(http, base, slow, "slow"))
        # The switch off: consumed and old, still kept.
        done = queen_api.pop(http, base, "r-off", group="g", batch=5, wait=False, mode="all")
        assert all(r["success"] for r in queen_api.ack_batch(http, base, done, "g"))
        # maxWaitTimeSeconds takes a leased message too.
        held = queen_api.pop(http, base, "r-wait", batch=5, wait=False, lease_seconds=600)
        assert len(held) == 5

        wait_for(lambda: bounds(http, "r-age"), (5, 5), "age retention")
        wait_for(lambda: bounds(http, "r-done"), (2, 5), "completion retention")
        wait_for(lambda: bounds(http, "r-wait"), (5, 5), "maxWaitTime retention")
        assert total(http, "r-age") == 0

        acks = queen_api.ack_batch(http, base, held, None)
        assert not any(r["success"] for r in acks), acks
        assert all("expired lease" in (r.get("error") or "") for r in acks), acks
        assert queen_api.pop(http, base, "r-wait", batch=5, wait=False) == []

        a_later_sweep_ran(http, base, "marker-1")
        assert bounds(http, "r-done") == (2, 5), "never past the slowest group"
        assert bounds(http, "r-off") == (0, 5), "the switch off keeps everything"
        assert bounds(http, "r-long") == (0, 5), "younger than its retention"
        assert total(http, "r-off") == 5 and total(http, "r-done") == 3

        # A read below the first held offset is out of range and says where to restart.
        res = http.post("/api/v1/fetch", json={"entries": [{"queue": "r-done", "partition": "p", "offset": 1}]})
        [e] = res.json()["entries"]
        assert (e.get("error"), e["logStartOffset"], e["records"]) == ("OFFSET_OUT_OF_RANGE", 2, [])

    broker.kill()
    broker.start()
    with httpx.Client(base_url=broker.url, timeout=10.0) as http:
        base = broker.url
        assert bounds(http, "r-age") == (6, 6)
        assert bounds(http, "r-done") == (2, 5)
        assert bounds(http, "r-wait") == (5, 5)
        assert bounds(http, "r-off") == (0, 5)
        assert bounds(http, "r-long") == (0, 5)
        rest = queen_api.pop(http, base, "r-done", group="slow", batch=10, wait=False, mode="all")
        assert [m["transactionId"] for m in rest] == ["r-done-2", "r-done-3", "r-done-4"]
        # The rules go on after the restart: the slow group catches up, completion follows.
        assert all(r["success"] for r in queen_api.ack_batch(http, base, rest, "slow"))
        wait_for(lambda: bounds(http, "r-done"), (5, 5), "completion after the slow group caught up")
        a_later_sweep_ran(http, base, "marker-2")
        assert bounds(http, "r-off") == (0, 5)
        assert bounds(http, "r-long") == (0, 5)
