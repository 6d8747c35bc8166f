"""Tenants (issue 9, Done-when 5): a token's `tenant` claim selects a group of its own. Two
tenants use a queue of the same name and neither sees the other's messages, queues, consumer
groups or numbers; the other tenant's ids do not ack or renew; the node's Prometheus page
shows both, labelled; both survive a restart; bad names and one tenant past the cap are
refused."""

import time

import httpx
import jwt

from queen_api import ack_batch, item, pop

SECRET = "test-secret-that-is-long-enough-for-hs256-0123456789"
SHARED = "shared-q"


def bearer(**claims) -> dict:
    now = int(time.time())
    body = {"sub": "tester", "iat": now, "exp": now + 600, "role": "admin"}
    body.update(claims)
    return {"Authorization": f"Bearer {jwt.encode(body, SECRET, algorithm='HS256')}"}


def client(b, **claims) -> httpx.Client:
    return httpx.Client(base_url=b.url, timeout=15.0, headers=bearer(**claims))


def push_ok(http: httpx.Client, items: list[dict]) -> None:
    r = http.post("/api/v1/push", json={"items": items})
    assert r.status_code == 201, r.text
    assert all(x["status"] == "queued" for x in r.json()), r.text


def listed_txns(http: httpx.Client, queue: str) -> set[str]:
    r = http.get("/api/v1/messages", params={"queue": queue, "limit": 1000})
    assert r.status_code == 200, r.text
    return {m.get("transactionId") for m in r.json()["messages"]}


def test_two_tenants_share_nothing_but_the_node(broker_factory):
    b = broker_factory("tenants", env={"QUEEN_JWT_SECRET": SECRET}).start()
    with client(b, tenant="a") as a, client(b, tenant="b") as bb, client(b) as default:
        push_ok(a, [item(SHARED, "p", f"a-{i}", {"t": "a"}) for i in range(3)])
        push_ok(a, [item("only-a-q", "p", "a-only", {"t": "a"})])
        push_ok(bb, [item(SHARED, "p", f"b-{i}", {"t": "b"}) for i in range(2)])

        assert listed_txns(a, SHARED) == {"a-0", "a-1", "a-2"}
        assert listed_txns(bb, SHARED) == {"b-0", "b-1"}
        assert listed_txns(default, SHARED) == set(), "the default tenant is a tenant too"

        # Queues: each lists its own; the other's queue is not found.
        qa, qb = a.get("/api/v1/resources/queues").text, bb.get("/api/v1/resources/queues").text
        assert "only-a-q" in qa and SHARED in qa
        assert "only-a-q" not in qb and SHARED in qb
        assert bb.get("/api/v1/resources/queues/only-a-q").status_code == 404

        # Pops (with a consumer group) deliver only the tenant's own messages.
        got_a = pop(a, b.url, SHARED, group="grp-a", mode="all", batch=100, wait=False)
        assert {m["transactionId"] for m in got_a} == {"a-0", "a-1", "a-2"}
        got_b = pop(bb, b.url, SHARED, group="grp-b", mode="all", batch=100, wait=False)
        assert {m["transactionId"] for m in got_b} == {"b-0", "b-1"}

        # Consumer groups and the status/analytics reads name only the tenant's own.
        for path in (
            "/api/v1/consumer-groups",
            "/api/v1/status",
            "/api/v1/status/queues",
            "/api/v1/resources/partitions",
            "/api/v1/consumer-groups/lagging?minLagSeconds=0",
            "/api/v1/resources/overview",
            "/metrics",
        ):
            ra, rb = a.get(path), bb.get(path)
            assert ra.status_code == 200 and rb.status_code == 200, (path, ra.text, rb.text)
            assert "grp-b" not in ra.text and "grp-a" not in rb.text, path
            assert "only-a-q" not in rb.text, path
        assert bb.get("/api/v1/consumer-groups/grp-a").status_code == 404

        # The other tenant's ids neither ack nor renew; the owner's still do.
        lease_a = got_a[0]["leaseId"]
        stolen = ack_batch(bb, b.url, got_a, "grp-a")
        assert not any(r.get("success") for r in stolen), stolen
        assert not any(r.get("success") for r in ack_batch(bb, b.url, got_a, "grp-b"))
        renew = bb.post(f"/api/v1/lease/{lease_a}/extend")
        assert renew.status_code == 200 and renew.json()["success"] is False, renew.text
        renew = a.post(f"/api/v1/lease/{lease_a}/extend")
        assert renew.status_code == 200 and renew.json()["success"] is True, renew.text
        mine = ack_batch(a, b.url, got_a, "grp-a")
        assert all(r.get("success") for r in mine), mine

        # The node's Prometheus page shows both tenants, apart.
        text = default.get("/metrics/prometheus").text
        for want in (
            f'queen_messages_pushed_total{{queue="{SHARED}",tenant="a"}} 3',
            f'queen_messages_pushed_total{{queue="{SHARED}",tenant="b"}} 2',
            f'queen_queue_depth{{queue="{SHARED}",tenant="b"}} 2',
            'queen_consumer_group_lag_messages{group="grp-b",queue="' + SHARED + '",tenant="b"}',
            'queen_group_restarts_total{tenant="a"} 0',
            'queen_group_serving{tenant="b"} 1',
        ):
            assert want in text, f"missing {want}"

    # A restart starts both tenants' groups again, with their data.
    b.stop()
    assert (b.data_dir / "tenants" / "a" / "state.redb").is_file()
    b.start()
    with client(b, tenant="a") as a, client(b, tenant="b") as bb, client(b) as default:
        # Tenant groups found on disk start in the background once `default` serves.
        deadline = time.monotonic() + 30
        while 'queen_group_serving{tenant="b"} 1' not in default.get("/metrics/prometheus").text:
            assert time.monotonic() < deadline, "tenant b was not started at boot"
            time.sleep(0.1)
        # The node's page names every tenant and queue: not for a tenant's token.
        page = a.get("/metrics/prometheus")
        assert page.status_code == 403 and "tenant" in page.json()["error"], page.text
        assert listed_txns(a, SHARED) == {"a-0", "a-1", "a-2"}
        assert listed_txns(a, "only-a-q") == {"a-only"}
        assert listed_txns(bb, SHARED) == {"b-0", "b-1"}


def test_bad_tenant_names_are_refused(broker_factory):
    b = broker_factory("tenant-names", env={"QUEEN_JWT_SECRET": SECRET}).start()
    with httpx.Client(base_url=b.url, timeout=10.0) as http:
        for bad in ("../etc", "a/b", "", "x" * 65, "a.b", "é", "Acme"):
            r = http.get("/api/v1/resources/queues", headers=bearer(tenant=bad))
            assert r.status_code == 401, (bad, r.text)
            assert "tenant" in r.json()["error"], r.text
    assert not (b.data_dir / "tenants").exists()


def test_the_tenant_cap_refuses_one_more(broker_factory):
    b = broker_factory(
        "tenant-cap", env={"QUEEN_JWT_SECRET": SECRET, "QUEEN_MAX_TENANTS": "3"}
    ).start()
    with httpx.Client(base_url=b.url, timeout=10.0) as http:
        # `default` is one of the three.
        for t in ("t1", "t2"):
            r = http.post("/api/v1/push", json={"items": [item("q", "p", t, 1)]},
                          headers=bearer(tenant=t))
            assert r.status_code == 201, r.text
        r = http.post("/api/v1/push", json={"items": [item("q", "p", "t3", 1)]},
                      headers=bearer(tenant="t3"))
        assert r.status_code == 403, r.text
        assert "max_tenants" in r.json()["error"], r.text
        # The tenants already running keep serving.
        r = http.get("/api/v1/messages", params={"queue": "q"}, headers=bearer(tenant="t2"))
        assert r.status_code == 200 and len(r.json()["messages"]) == 1, r.text
    assert not (b.data_dir / "tenants" / "t3").exists()
