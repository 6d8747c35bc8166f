"""Membership operations reach the tenants' groups (issue 13 Done-when 4 with
`cluster_tenant_groups`; docs/cluster.md "Membership with tenant groups").

Three nodes with the key on and two tenants. Node 3 is killed and wiped, removed through the
route, and replaced by a new member (id 4, started with `cluster_join`) added as a learner and
promoted through the routes, while the official client pushes tenant A's messages. Each route
carries its change from `default` to both tenants' groups, each through that group's own
leader, and lists each group's outcome; a rerun changes nothing (`already`). Then node 1, an
original voter, is killed: both tenants still write and read, which needs node 4's vote in
their groups. Every wait is bounded; nothing is timed.
"""

import asyncio
import shutil
import threading
import time

import httpx

import cluster_fixtures as cf
from queen_api import item
from queen_broker import free_port
from test_cluster_tenants import (
    SECRET, TENANT_A, TENANT_B, QUEUE_A, QUEUE_B, bearer, listed, preferred,
    push_until_created, tenant_leader)

ON = {"QUEEN_JWT_SECRET": SECRET, "QUEEN_CLUSTER_TENANT_GROUPS": "true",
      "QUEEN_CLUSTER_SNAPSHOT_CATCH_UP": "true"}
ADMIN = bearer()  # no tenant claim: the membership is every tenant's
CLIENT_TIMEOUT_MS = 15000


class TenantLoad:
    """One sequential producer of tenant A through the official client on `urls`: push #k
    until acknowledged, with the same transactionId on every retry."""

    def __init__(self, urls):
        self.urls = urls
        self.acked = []
        self.failures = []
        self.stop = threading.Event()
        self.done = threading.Event()

    async def run(self):
        from queen import Queen

        token = bearer(tenant=TENANT_A)["Authorization"].removeprefix("Bearer ")
        client = Queen(urls=self.urls, timeout_millis=CLIENT_TIMEOUT_MS, retry_attempts=1,
                       load_balancing_strategy="round-robin",
                       health_retry_after_millis=1000, bearer_token=token)
        try:
            seq = 0
            while not self.stop.is_set():
                txn = f"load-{seq}"
                while not self.stop.is_set():
                    try:
                        res = await asyncio.wait_for(
                            client.queue(QUEUE_A).partition("p0").push(
                                [{"data": {"seq": seq}, "transactionId": txn}]),
                            CLIENT_TIMEOUT_MS / 1000 * 2)
                        if (isinstance(res, list) and len(res) == 1
                                and res[0].get("status") in ("queued", "duplicate")):
                            self.acked.append(txn)
                            break
                        self.failures.append(("answer", str(res)[:200]))
                    except Exception as e:  # noqa: BLE001 - judged in `finish`
                        status = getattr(getattr(e, "response", None), "status_code", None)
                        self.failures.append((status, f"{type(e).__name__}: {str(e)[:200]}"))
                    await asyncio.sleep(0.2)
                else:
                    return
                seq += 1
                await asyncio.sleep(0.05)
        finally:
            await client.close()
            self.done.set()

    def wait_acked(self, n):
        deadline = time.monotonic() + cf.FORM_S
        while len(self.acked) < n:
            assert not self.done.is_set(), "the load stopped"
            assert time.monotonic() < deadline, f"only {len(self.acked)} acked: {self.failures[-5:]}"
            time.sleep(0.1)

    def finish(self):
        self.stop.set()
        assert self.done.wait(timeout=CLIENT_TIMEOUT_MS / 1000 * 3), "the load did not stop"
        wrong = [f for f in self.failures if f[0] not in (None, 503)]
        assert not wrong, wrong[:5]
        return list(self.acked)


def call(http, node, method, path, **kw):
    return http.request(method, f"{node.url}/api/v1/cluster{path}", headers=ADMIN,
                        timeout=90.0, **kw)


def members(view):
    return ({m["id"] for m in view["voters"]}, {m["id"] for m in view["learners"]})


def carried(http, node, method, path, want, **kw):
    """Runs a route until `default` and both tenants' groups answer 200 with the membership
    `want`; a group still catching up (409) or between leaders (503) is rerun: the route is
    resumable. The last answer."""
    deadline = time.monotonic() + cf.FORM_S * 2
    while True:
        res = call(http, node, method, path, **kw)
        last = (res.status_code, res.text[:1500])
        if res.status_code == 200:
            body = res.json()
            groups = {g["group"]: g for g in body.get("groups", [])}
            assert set(groups) == {TENANT_A, TENANT_B}, last
            # 200 only when every group is done (review s31 member M2).
            assert body["complete"] is True and body["behind"] == [], last
            assert all(g["status"] == 200 for g in groups.values()), last
            if (members(body) == want and all(
                    g["status"] == 200 and members(g["answer"]) == want
                    for g in groups.values())):
                return body
            for g in groups.values():
                assert g["status"] in (200, 409, 503), last
        else:
            assert res.status_code in (409, 503), last
            body = res.json()
            if "groups" in body:
                # `default` changed, a tenant group did not: 503 naming the groups behind.
                assert res.status_code == 503 and body["complete"] is False, last
                assert set(body["behind"]) == {
                    g["group"] for g in body["groups"] if g["status"] != 200}, last
                assert body["behind"] and body["code"] == "unavailable", last
        assert time.monotonic() < deadline, last
        time.sleep(0.5)


def group_view(http, node, group):
    res = call(http, node, "GET", f"?group={group}")
    return res.json() if res.status_code == 200 else None


def wait_learner_matched(http, nodes, group, learner):
    """Until the group's leader has replicated to `learner` (read where the group leads)."""
    deadline = time.monotonic() + cf.FORM_S * 2
    last = None
    while time.monotonic() < deadline:
        for n in nodes.values():
            v = group_view(http, n, group)
            last = v
            if v and v["role"] == "leader" and any(
                    m["id"] == learner and m["matched"] is not None for m in v["learners"]):
                return
        time.sleep(0.3)
    raise AssertionError(f"learner {learner} never matched in {group}: {last}")


def read_until(http, node, tenant, queue, want):
    deadline = time.monotonic() + cf.FORM_S
    got = None
    while True:
        res = http.get(f"{node.url}/api/v1/messages", headers=bearer(tenant=tenant),
                       params={"queue": queue, "limit": 10000}, timeout=15.0)
        if res.status_code == 200:
            got = {m.get("transactionId") for m in res.json()["messages"]}
            if set(want) <= got:
                return got
        assert time.monotonic() < deadline, (res.status_code, res.text[:300],
                                             sorted(set(want) - (got or set()))[:10])
        time.sleep(0.3)


def test_a_wiped_node_replaced_under_a_new_id_becomes_a_voter_of_every_tenant_group(
        broker_factory):
    assert preferred(TENANT_A, [1, 2, 3]) == 1 and preferred(TENANT_B, [1, 2, 3]) == 2
    with httpx.Client() as http:
        nodes, _ = cf.started_cluster(broker_factory, http, extra_env=ON)
        push_until_created(http, nodes[2].url, TENANT_A, QUEUE_A, ["a-0"])
        push_until_created(http, nodes[2].url, TENANT_B, QUEUE_B, ["b-0"])
        tenant_leader(http, nodes, TENANT_A)
        tenant_leader(http, nodes, TENANT_B)
        # Rerunning a change that is done everywhere answers `already` in every group (and
        # touches nothing): the tenants' groups have the same voters as `default`.
        body = carried(http, nodes[2], "POST", "/voters", ({1, 2, 3}, set()),
                       json={"ids": [1, 2, 3]})
        assert body["already"] and all(g["answer"]["already"] for g in body["groups"]), body

        load = TenantLoad([n.url for n in nodes.values()])

        def steps(load):
            replace(http, broker_factory, nodes, load)

        async def main():
            task = asyncio.create_task(load.run())
            try:
                return await asyncio.to_thread(steps, load)
            finally:
                load.stop.set()
                await task

        new = asyncio.run(main())
        del new
        acked = load.finish()
        assert len(acked) >= 20, acked


def through_an_outsider(http, kept, new, learner):
    """Node 4 a learner of `default` alone (`?group=default`): it applies the declarations
    and opens each tenant's group as an outsider, which no tenant's leader has added yet.
    A tenant's writes sent to node 4 then go to `default`'s leader, which leads that tenant
    here (review s31 member M5: node 4 answered them 503 not_leader with no relay and no
    hint, for as long as the group did not add it). Only 503s retried are allowed, and the
    writes through node 4 must succeed."""
    res = call(http, kept[1], "POST", "/learners?group=default", json=learner)
    assert res.status_code == 200, res.text
    default_leader = res.json()["leader"]
    leaders = {t: tenant_leader(http, kept, t) for t in (TENANT_A, TENANT_B)}
    tenant = next((t for t, l in leaders.items() if l == default_leader), None)
    assert tenant is not None, (default_leader, leaders)
    queue = {TENANT_A: QUEUE_A, TENANT_B: QUEUE_B}[tenant]
    deadline = time.monotonic() + cf.FORM_S
    while group_view(http, new, tenant) is None:
        assert time.monotonic() < deadline, new.log_tail()
        time.sleep(0.2)
    view = group_view(http, new, tenant)
    assert 4 not in members(view)[0] | members(view)[1], view
    for k in range(5):
        deadline = time.monotonic() + cf.FORM_S
        while True:
            res = http.post(f"{new.url}/api/v1/push", headers=bearer(tenant=tenant),
                            json={"items": [item(queue, "p0", f"via-4-{k}", {"k": k})]},
                            timeout=15.0)
            if res.status_code == 201:
                assert all(r["status"] in ("queued", "duplicate") for r in res.json()), res.text
                break
            assert res.status_code == 503, res.text
            assert time.monotonic() < deadline, f"node 4 never took {tenant}'s write: {res.text}"
            time.sleep(0.2)
    # Still an outsider: the writes went by the relay, not through a group that added it.
    view = group_view(http, new, tenant)
    assert view is None or 4 not in members(view)[0] | members(view)[1], view


def replace(http, broker_factory, nodes, load):
    load.wait_acked(10)
    kept = {1: nodes[1], 2: nodes[2]}
    nodes[3].kill()
    shutil.rmtree(nodes[3].data_dir)
    cf.wait_settled(http, kept)
    # Removed from `default` and carried to both tenants' groups; a rerun is `already`.
    carried(http, nodes[2], "DELETE", "/members/3", ({1, 2}, set()))
    body = carried(http, nodes[1], "DELETE", "/members/3", ({1, 2}, set()))
    assert body["already"] and all(g["answer"]["already"] for g in body["groups"]), body

    raft4, http4, kafka4 = free_port(), free_port(), free_port()
    new = broker_factory("node4", http_port=http4, kafka_port=kafka4, env={
        "QUEEN_CLUSTER_TOKEN": cf.TOKEN,
        "QUEEN_CLUSTER_ADDR": f"127.0.0.1:{raft4}",
        "QUEEN_NODE_ID": "4",
        # The current members too: a joining node asks them for its horizon (review s33 H-1).
        "QUEEN_PEERS": ",".join([f"{i}={nodes[i].env['QUEEN_CLUSTER_ADDR']}" for i in sorted(kept)]
                                + [f"4=127.0.0.1:{raft4}"]),
        "QUEEN_PEER_HTTP": ",".join(f"{i}={nodes[i].url}" for i in sorted(kept)),
        "QUEEN_CLUSTER_JOIN": "true",
        "QUEEN_CLUSTER_HEARTBEAT_MS": str(cf.HEARTBEAT_MS),
        "QUEEN_CLUSTER_ELECTION_TIMEOUT_MS": str(cf.ELECTION_MS),
        **ON,
    })
    cf.spawn(new)
    deadline = time.monotonic() + cf.FORM_S
    while True:
        try:
            if call(http, new, "GET", "").status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, new.log_tail()
        time.sleep(0.2)
    learner = {"id": 4, "clusterAddr": f"127.0.0.1:{raft4}", "httpAddr": new.url}
    through_an_outsider(http, kept, new, learner)
    carried(http, nodes[1], "POST", "/learners", ({1, 2}, {4}), json=learner)
    load.wait_acked(len(load.acked) + 10)
    # Node 4 applies the declarations from `default`, opens both groups joining, and each
    # group's leader catches it up.
    for t in (TENANT_A, TENANT_B):
        wait_learner_matched(http, kept, t, 4)
    # Promoted everywhere (a group whose learner is still behind answers 409: rerun).
    carried(http, nodes[2], "POST", "/voters", ({1, 2, 4}, set()), json={"ids": [4]})
    for t in (TENANT_A, TENANT_B):
        deadline = time.monotonic() + cf.FORM_S
        while True:
            v = group_view(http, new, t)
            if v and members(v) == ({1, 2, 4}, set()):
                break
            assert time.monotonic() < deadline, v
            time.sleep(0.3)
    load.wait_acked(len(load.acked) + 10)
    acked = list(load.acked)

    # An original voter killed: each tenant's group keeps a majority only with node 4.
    nodes[1].kill()
    rest = {2: nodes[2], 4: new}
    cf.wait_settled(http, rest)
    push_until_created(http, new.url, TENANT_A, QUEUE_A, ["a-after"])
    push_until_created(http, nodes[2].url, TENANT_B, QUEUE_B, ["b-after"])
    read_until(http, new, TENANT_A, QUEUE_A, set(acked) | {"a-0", "a-after"})
    read_until(http, nodes[2], TENANT_B, QUEUE_B, {"b-0", "b-after"})
    return new
