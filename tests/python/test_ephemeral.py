"""Ephemeral (RAM) queues, /api/v1/ephemeral/* (spec native-api §2.16), driven with the official
client's `client.ephemeral` and raw httpx where the client does not reach (refusal codes).

Contents live in the broker process only; declarations are replicated (effects 63, 64) and come
back EMPTY after a restart; ids of an earlier process answer `stale`. Leases are 1 s and every
wait is a bounded loop on an observable state, never a sleep that times behaviour."""

import asyncio
import time

import httpx
import jwt
import pytest

from queen import Queen
from queen.errors import EphemeralQueueNotFoundError

SECRET = "test-secret-that-is-long-enough-for-hs256-0123456789"


def run(url: str, body):
    async def go():
        client = Queen(url, retry_attempts=1)
        try:
            return await body(client.ephemeral)
        finally:
            await client.close()

    return asyncio.run(go())


def pop_until(url: str, queue: str, want: int, deadline_s: float = 10.0, **kw) -> list:
    """Waiting pops (1 s each) until `want` messages came, or the deadline."""
    got: list = []
    end = time.monotonic() + deadline_s
    while len(got) < want and time.monotonic() < end:
        r = run(url, lambda e: e.pop(queue, batch=want - len(got), wait=True, timeout=1000, **kw))
        got.extend(r["messages"])
    return got


def depth(http: httpx.Client, queue: str, **headers) -> dict:
    r = http.get(f"/api/v1/ephemeral/queues/{queue}/depth", headers=headers)
    assert r.status_code == 200, r.text
    return r.json()


def test_configure_depth_queues_reset_delete_round_trip(broker, http):
    async def body(e):
        configured = await e.configure("rt", max_length=5, policy="dropOldest", lease_seconds=1)
        assert configured["options"]["maxLength"] == 5
        assert (await e.push("rt", [{"n": i} for i in range(3)])) == {"pushed": 3}
        d = await e.depth("rt")
        assert (d["depth"], d["declared"], d["options"]["policy"]) == (3, True, "dropOldest")
        listed = {q["queue"]: q for q in (await e.queues())["queues"]}
        assert listed["rt"]["messages"] == 3
        assert (await e.reset("rt")) == {"dropped": 3}
        assert (await e.depth("rt"))["depth"] == 0, "reset keeps the declaration"
        assert (await e.delete("rt")) == {"deleted": True}
        assert (await e.delete("rt")) == {"deleted": False}
        with pytest.raises(EphemeralQueueNotFoundError):
            await e.depth("rt")
        assert (await e.reset("never")) == {"dropped": 0}

    run(broker.url, body)


def test_pop_delivers_payloads_in_order_with_ids_and_attempts(broker):
    async def body(e):
        await e.push("order", [{"n": i} for i in range(5)], partition="p1")
        r = await e.pop("order", batch=10, commit_on_delivery=True)
        assert [m["payload"] for m in r["messages"]] == [{"n": i} for i in range(5)]
        m = r["messages"][0]
        assert m["id"].startswith("e:") and ":p1:0." in m["id"], m
        assert (m["partition"], m["attempts"]) == ("p1", 1)
        assert (await e.pop("order"))["messages"] == [], "autoAck consumed them"

    run(broker.url, body)


@pytest.mark.parametrize("bound", ["maxLength", "maxBytes"])
def test_both_policies_at_each_bound(broker, http, bound):
    # Each message is its payload plus 64 bytes of accounting (docs/api.md).
    size = {"maxLength": 3} if bound == "maxLength" else {"maxBytes": 3 * (64 + 3)}
    for policy in ("reject", "dropOldest"):
        q = f"bound-{bound}-{policy}"
        r = http.post("/api/v1/ephemeral/configure", json={"queue": q, "options": {**size, "policy": policy}})
        assert r.status_code == 200, r.text
        r = http.post("/api/v1/ephemeral/push", json={"queue": q, "messages": [{"payload": i} for i in (100, 101, 102)]})
        assert r.status_code == 201, r.text
        r = http.post("/api/v1/ephemeral/push", json={"queue": q, "messages": [{"payload": 103}]})
        if policy == "reject":
            assert r.status_code == 429 and r.json()["code"] == "queue_full", r.text
            want = [100, 101, 102]
        else:
            assert r.status_code == 201, r.text
            want = [101, 102, 103]
        got = http.get("/api/v1/ephemeral/pop", params={"queue": q, "batch": 10, "autoAck": "true"})
        assert [m["payload"] for m in got.json()["messages"]] == want


def test_an_unacked_message_redelivers_with_attempts_then_drops_at_the_retry_limit(broker, http):
    def dropped_retry() -> float:
        text = http.get("/metrics/prometheus").text
        for line in text.splitlines():
            if line.startswith("queen_ephemeral_dropped_total") and 'reason="retry_limit"' in line:
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError("queen_ephemeral_dropped_total{reason=retry_limit} not exported")

    before = dropped_retry()

    async def body(e):
        await e.configure("lease", lease_seconds=1, retry_limit=1)
        await e.push("lease", [{"v": 1}])

    run(broker.url, body)
    first = pop_until(broker.url, "lease", 1, group="w")
    assert [m["attempts"] for m in first] == [1]
    second = pop_until(broker.url, "lease", 1, group="w")
    # Each delivery has its own id: the first, whose lease ended, settles nothing now.
    assert [m["attempts"] for m in second] == [2] and second[0]["id"] != first[0]["id"]
    res = run(broker.url, lambda e: e.ack("lease", [{"id": first[0]["id"]}], group="w"))
    assert res["results"] == [{"id": first[0]["id"], "outcome": "unknown"}]
    # The second lease ends too: past retryLimit (1) the message is dropped, not delivered.
    end = time.monotonic() + 10
    while dropped_retry() == before and time.monotonic() < end:
        assert run(broker.url, lambda e: e.pop("lease", group="w", wait=True, timeout=500))["messages"] == []
    assert dropped_retry() == before + 1
    assert depth(http, "lease")["depth"] == 0
    # An explicit nack redelivers at once; a completed ack settles.
    run(broker.url, lambda e: e.push("lease", [{"v": 2}]))
    [m] = pop_until(broker.url, "lease", 1, group="w")
    res = run(broker.url, lambda e: e.ack("lease", [{"id": m["id"], "status": "retry"}], group="w"))
    assert res["results"] == [{"id": m["id"], "outcome": "redelivered"}]
    [again] = pop_until(broker.url, "lease", 1, group="w")
    assert again["attempts"] == 2
    res = run(broker.url, lambda e: e.ack("lease", again, group="w"))
    assert res["results"][0]["outcome"] == "acked"
    res = run(broker.url, lambda e: e.ack("lease", again, group="w"))
    assert res["results"][0]["outcome"] == "unknown", "acked twice"


def test_same_group_competes_own_group_fans_out(broker):
    async def body(e):
        await e.push("fan", [{"n": i} for i in range(4)])
        a1 = await e.pop("fan", group="workers", batch=2)
        a2 = await e.pop("fan", group="workers", batch=10)
        tail = await e.pop("fan", group="tail", batch=10)
        queue_mode = await e.pop("fan", batch=10)
        # An id names one delivery; the message is the part before its last '.'.
        ids = lambda r: [m["id"].rsplit(".", 1)[0] for m in r["messages"]]  # noqa: E731
        assert len(ids(a1)) == 2 and len(ids(a2)) == 2 and not set(ids(a1)) & set(ids(a2))
        assert sorted(ids(tail)) == sorted(ids(a1) + ids(a2)), "a group of its own sees all"
        assert sorted(ids(queue_mode)) == sorted(ids(tail)), "no group is a group too"

    run(broker.url, body)


def test_waiting_pop_is_woken_by_a_push(broker):
    async def body(e):
        waiter = asyncio.create_task(e.pop("wake", wait=True, timeout=20000))
        # Pushes until the waiter has taken one: a push before it parks is taken at once too.
        for _ in range(100):
            await e.push("wake", [{"hello": True}])
            done, _ = await asyncio.wait({waiter}, timeout=0.2)
            if done:
                break
        got = await waiter
        assert got["messages"][0]["payload"] == {"hello": True}

    run(broker.url, body)


def test_a_restart_empties_contents_keeps_declarations_and_old_ids_are_stale(broker_factory):
    b = broker_factory("eph-restart").start()

    async def before(e):
        await e.configure("kept", max_length=7, lease_seconds=1)
        await e.push("kept", [{"a": 1}, {"a": 2}])
        await e.push("implicit", [{"b": 1}])
        return (await e.pop("kept", group="g"))["messages"][0]

    leased = run(b.url, before)
    b.stop()
    b.start()

    async def after(e):
        listed = {q["queue"]: q for q in (await e.queues())["queues"]}
        assert set(listed) == {"kept"}, listed
        d = await e.depth("kept")
        assert (d["depth"], d["declared"], d["options"]["maxLength"]) == (0, True, 7)
        res = await e.ack("kept", leased, group="g")
        assert res["results"] == [{"id": leased["id"], "outcome": "stale"}]

    run(b.url, after)


def bearer(tenant: str, role: str = "read-write") -> dict:
    now = int(time.time())
    claims = {"sub": "t", "iat": now, "exp": now + 600, "role": role, "tenant": tenant}
    return {"Authorization": f"Bearer {jwt.encode(claims, SECRET, algorithm='HS256')}"}


def test_tenants_never_see_each_others_queues(broker_factory):
    b = broker_factory("eph-tenants", env={"QUEEN_JWT_SECRET": SECRET}).start()
    with httpx.Client(base_url=b.url, timeout=15.0) as http:
        a, other = bearer("a"), bearer("b")
        r = http.post("/api/v1/ephemeral/configure", json={"queue": "shared", "options": {"maxLength": 9}}, headers=a)
        assert r.status_code == 200, r.text
        r = http.post("/api/v1/ephemeral/push", json={"queue": "shared", "messages": [{"payload": "a"}]}, headers=a)
        assert r.status_code == 201, r.text
        assert http.get("/api/v1/ephemeral/queues", headers=other).json() == {"queues": []}
        r = http.get("/api/v1/ephemeral/queues/shared/depth", headers=other)
        assert r.status_code == 404 and r.json()["code"] == "ephemeral_queue_not_found"
        popped = http.get("/api/v1/ephemeral/pop", params={"queue": "shared", "batch": 5}, headers=other)
        assert popped.json()["messages"] == []
        mine = http.get("/api/v1/ephemeral/pop", params={"queue": "shared", "batch": 5}, headers=a)
        assert [m["payload"] for m in mine.json()["messages"]] == ["a"]
        # The other tenant acks a's id: no lease of its own holds it.
        res = http.post("/api/v1/ephemeral/ack", json={"queue": "shared", "acks": [{"id": mine.json()["messages"][0]["id"]}]}, headers=other)
        assert res.json()["results"][0]["outcome"] == "unknown"
        # Deleting a declaration is an admin act.
        assert http.delete("/api/v1/ephemeral/queue/shared", headers=a).status_code == 403
        assert http.delete("/api/v1/ephemeral/queue/shared", headers=bearer("a", "admin")).json() == {"deleted": True}


OVER_LIMIT = [
    ("POST", "/api/v1/ephemeral/push", {"queue": "x" * 513, "messages": [{"payload": 1}]}),
    ("POST", "/api/v1/ephemeral/push", {"queue": "lim", "messages": [{"payload": 1}] * 10_001}),
    ("POST", "/api/v1/ephemeral/push", {"queue": "lim\u0001", "messages": [{"payload": 1}]}),
    ("POST", "/api/v1/ephemeral/push", {"queue": "lim", "messages": [{"no": "payload"}]}),
    ("POST", "/api/v1/ephemeral/configure", {"queue": "lim", "options": {"leaseSeconds": 0}}),
    ("POST", "/api/v1/ephemeral/configure", {"queue": "lim", "options": {"maxBytes": -1}}),
    ("POST", "/api/v1/ephemeral/configure", {"queue": "lim", "options": {"policy": "drop"}}),
    ("POST", "/api/v1/ephemeral/configure", {"queue": "lim", "options": {"ttl_second": 3}}),
    ("POST", "/api/v1/ephemeral/ack", {"queue": "lim", "acks": [{"id": "x"}] * 10_001}),
    ("POST", "/api/v1/ephemeral/ack", {"queue": "lim", "acks": [{"id": "x", "status": "maybe"}]}),
    ("GET", "/api/v1/ephemeral/pop?queue=lim&batch=10001", None),
    ("GET", "/api/v1/ephemeral/pop?queue=lim&batch=0", None),
    ("GET", "/api/v1/ephemeral/pop?queue=lim&wait=true&timeout=300001", None),
]


def test_over_limit_requests_are_400_and_change_nothing(broker, http):
    r = http.post("/api/v1/ephemeral/push", json={"queue": "lim", "messages": [{"payload": "kept"}]})
    assert r.status_code == 201
    for method, path, body in OVER_LIMIT:
        r = http.request(method, path, json=body)
        assert r.status_code == 400, (path, body and str(body)[:80], r.text)
        assert r.json()["code"] == "ephemeral_bad_request", r.text
    d = depth(http, "lim")
    assert (d["depth"], d["declared"], d["options"]["leaseSeconds"]) == (1, False, 30)
    names = [q["queue"] for q in http.get("/api/v1/ephemeral/queues").json()["queues"]]
    assert names == ["lim"]


def test_the_global_byte_cap_answers_503_and_the_kill_switch_disables(broker_factory):
    b = broker_factory("eph-cap", env={"QUEEN_EPHEMERAL_MAX_BYTES": str(1 << 20)}).start()
    with httpx.Client(base_url=b.url, timeout=15.0) as http:
        chunk = "x" * (300 << 10)
        for i in range(3):
            r = http.post("/api/v1/ephemeral/push", json={"queue": f"cap{i}", "messages": [{"payload": chunk}]})
            assert r.status_code == 201, r.text
        r = http.post("/api/v1/ephemeral/push", json={"queue": "cap3", "messages": [{"payload": chunk}]})
        assert r.status_code == 503 and r.json()["code"] == "ephemeral_unavailable", r.text
        # The gauges are set by the sweep, once a second.
        def gauge(name: str) -> float:
            for line in http.get("/metrics/prometheus").text.splitlines():
                if line.startswith(name):
                    return float(line.rsplit(" ", 1)[1])
            return -1.0

        end = time.monotonic() + 10
        while gauge("queen_ephemeral_bytes ") < 900_000 and time.monotonic() < end:
            time.sleep(0.2)
        assert gauge("queen_ephemeral_bytes ") > 900_000
        assert gauge('queen_memory_bytes{pool="ephemeral"}') > 900_000
        # Consuming gives the bytes back.
        r = http.get("/api/v1/ephemeral/pop", params={"queue": "cap0", "autoAck": "true"})
        assert len(r.json()["messages"]) == 1
        r = http.post("/api/v1/ephemeral/push", json={"queue": "cap3", "messages": [{"payload": chunk}]})
        assert r.status_code == 201, r.text
    off = broker_factory("eph-off", env={"QUEEN_EPHEMERAL_ENABLED": "false"}).start()
    with httpx.Client(base_url=off.url, timeout=15.0) as http:
        r = http.post("/api/v1/ephemeral/push", json={"queue": "q", "messages": [{"payload": 1}]})
        assert r.status_code == 503 and r.json()["code"] == "ephemeral_disabled", r.text


def test_an_idle_implicit_queue_is_removed_a_declared_one_stays(broker_factory):
    b = broker_factory("eph-idle", env={"QUEEN_EPHEMERAL_IMPLICIT_IDLE_S": "1"}).start()
    with httpx.Client(base_url=b.url, timeout=15.0) as http:
        http.post("/api/v1/ephemeral/configure", json={"queue": "declared"})
        http.post("/api/v1/ephemeral/push", json={"queue": "implicit", "messages": [{"payload": 1}]})
        end = time.monotonic() + 10
        names = None
        while time.monotonic() < end:
            names = [q["queue"] for q in http.get("/api/v1/ephemeral/queues").json()["queues"]]
            if names == ["declared"]:
                break
            time.sleep(0.2)
        assert names == ["declared"]


def test_a_window_buffer_never_answers_a_message_twice(broker, http):
    """windowBuffer.ms (5 s) past the lease (1 s): the answer is held at most half the lease, so
    a lease of what the pop took cannot end inside it and the message be taken again into the
    same answer (review s12 E8). The second push lands after the first message's lease ended."""
    q = "window-lease"
    r = http.post("/api/v1/ephemeral/configure", json={"queue": q, "options": {
        "leaseSeconds": 1, "windowBuffer": {"ms": 5000, "count": 100}}})
    assert r.status_code == 200, r.text
    assert http.post("/api/v1/ephemeral/push", json={"queue": q, "messages": [{"payload": "m"}]}).status_code == 201

    async def body():
        async with httpx.AsyncClient(base_url=broker.url, timeout=20.0) as c:
            waiter = asyncio.create_task(c.get("/api/v1/ephemeral/pop", params={
                "queue": q, "batch": 10, "wait": "true", "timeout": 10000}))
            # Past the 1 s lease of "m": a held answer would take it again on this push.
            await asyncio.sleep(1.5)
            pushed = await c.post("/api/v1/ephemeral/push", json={"queue": q, "messages": [{"payload": "n"}]})
            assert pushed.status_code == 201, pushed.text
            return await waiter

    got = asyncio.run(body())
    assert got.status_code == 200, got.text
    payloads = [m["payload"] for m in got.json()["messages"]]
    assert "m" in payloads and len(payloads) == len(set(payloads)), payloads
