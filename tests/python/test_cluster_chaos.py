"""Issue 13, "Done when" 2: a history checker run against three `queen` nodes under leader
kills (docs/cluster.md "Chaos test").

Producers (one sequential producer per partition, the official Python client given every
node's URL) push and record each push's transactionId and answer; a retry of an unanswered
or refused push reuses its transactionId. Consumers of one group pop and ack through the same
client and record every delivery and every ack's answer. Meanwhile the leader (read from
/health) is SIGKILLed at a random moment, ROUNDS times, restarted on its directory and
caught up before the next round. Once the load stops and the rest is drained, history.py
checks the history: no acknowledged push lost, per-partition push order, never two live
leases on a message, no acked message delivered again, no retried push stored twice. The
time from each kill to the first write acknowledged after it is printed and written to
.cache/test-results/cluster-failover.json; only the fastest round is held to a bound, one
that tells the fast failover (`leader_gone`) from openraft's lease alone.

The kill moments come from a seeded random (CHAOS_SEED, default below), printed; the
broker's own timing is not seeded, so a seed replays the faults, not the interleaving.
Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import signal
import time
from pathlib import Path

import httpx
import pytest

import history
from history import Ack, Delivery, History, Push
from queen_broker import REPO, Broker, free_port

TOKEN = "chaos-test-token-" + "x" * 32
QUEUE = "chaos"
GROUP = "chaos-group"
AUDIT_GROUP = "chaos-read-back"
PARTITIONS = ["p0", "p1", "p2"]
CONSUMERS = 2
ROUNDS = 5
SEED = int(os.environ.get("CHAOS_SEED", "2012"))
# The queue's leaseTime: longer than a failover (about 1 s when the leader's process is gone,
# 9-12 s should a survivor wait out openraft's lease), so a lease taken before a kill
# must still hold under the next leader; short enough that a lease lost with its answer ends
# within the drain.
LEASE_S = 15
HEARTBEAT_MS = 300  # as test_cluster.py: failovers within the waits of a loaded machine
ELECTION_MS = 3000
SETTLE_S = 60.0  # the bound on every wait for the cluster
DRAIN_S = 60.0  # the bound on draining what is left once the load stops
PUSH_GAP_S = 0.02  # between one producer's pushes: a steady load the 2-core machine carries
RETRY_GAP_S = 0.2
PROCESS_S = 0.3  # a consumer's pause between a pop's answer and its ack
CLIENT_TIMEOUT_MS = 15000

pytestmark = pytest.mark.timeout(240)


# ---------------------------------------------------------------------------------------
# The checker on hand-made histories: each must find the one violation it was made with.


def clean_history() -> History:
    h = History()
    for k in range(3):
        h.pushes.append(Push("p0", f"t{k}", k, k, k + 0.1, True))
    h.deliveries += [Delivery("c1", "p0", f"t{k}", "L1", 5.0, 5.1, 10.0, 1) for k in range(3)]
    h.acks += [Ack("c1", "p0", f"t{k}", "L1", 5.2, 5.3, True) for k in range(3)]
    return h


def test_a_clean_history_passes_every_check():
    assert history.violations(clean_history()) == {name: [] for name in history.CHECKS}


def test_the_checker_finds_a_lost_acknowledged_push():
    h = clean_history()
    h.pushes.append(Push("p0", "t3", 3, 4.0, 4.1, True))
    # An unanswered push never delivered is not lost: it may not have been done.
    h.pushes.append(Push("p0", "t4", 4, 4.2, 4.3, None))
    found = history.violations(h)
    assert found["lost"] == ["acknowledged push p0/t3 was never delivered"], found
    assert not found["order"] and not found["leases"] and not found["redelivered"]


def test_the_checker_finds_an_out_of_order_delivery():
    h = clean_history()
    h.deliveries = [
        Delivery("c1", "p0", "t0", "L1", 5.0, 5.1, 10.0, 1),
        Delivery("c1", "p0", "t2", "L1", 5.0, 5.1, 10.0, 1),
        Delivery("c1", "p0", "t1", "L2", 6.0, 6.1, 11.0, 2),
    ]
    h.acks = []
    assert len(history.out_of_order(h)) == 1, history.out_of_order(h)
    # Within one pop, too.
    h.deliveries = [
        Delivery("c1", "p0", "t1", "L1", 5.0, 5.1, 10.0, 1),
        Delivery("c1", "p0", "t0", "L1", 5.0, 5.1, 10.0, 1),
        Delivery("c1", "p0", "t2", "L1", 5.0, 5.1, 10.0, 1),
    ]
    assert any("pop 1" in v for v in history.out_of_order(h)), history.out_of_order(h)
    # Partitions are independent: p1's message between p0's is in order.
    h = clean_history()
    h.pushes.append(Push("p1", "u0", 0, 0.5, 0.6, True))
    h.deliveries.insert(1, Delivery("c1", "p1", "u0", "L1", 5.0, 5.1, 10.0, 1))
    assert history.out_of_order(h) == []


def test_the_checker_finds_two_live_leases_on_one_message():
    h = clean_history()
    h.acks = [a for a in h.acks if a.txn != "t1"]
    # Another consumer got t1 at 7.1, before the first lease (popped at 5.0) could end.
    h.deliveries.append(Delivery("c2", "p0", "t1", "L2", 7.0, 7.1, 12.0, 2))
    found = history.violations(h)
    assert len(found["leases"]) == 1 and "p0/t1" in found["leases"][0], found
    # After the first lease's earliest end it is a redelivery, allowed.
    h.deliveries[-1] = Delivery("c2", "p0", "t1", "L2", 10.5, 10.6, 15.5, 2)
    assert history.double_leases(h) == []


def test_the_checker_finds_a_second_lease_even_when_the_first_was_acked():
    """Review s20 lead D1: handed out again inside the first lease, then the first lease's ack
    answered success: a completed message given out again, or two live leases."""
    h = clean_history()
    h.deliveries.append(Delivery("c2", "p0", "t1", "L2", 5.15, 5.25, 10.15, 2))
    found = history.violations(h)
    assert len(found["leases"]) == 1 and "p0/t1" in found["leases"][0], found


def test_the_checker_finds_an_acknowledged_push_no_longer_stored():
    """Review s20 lead D2: delivered once, then gone (a fresh group does not read it back)."""
    h = clean_history()
    h.stored = {("p0", "t0"), ("p0", "t2")}
    found = history.violations(h)
    assert found["lost_after_delivery"] == [
        "acknowledged push p0/t1 is not read back by a fresh group"], found
    h.stored.add(("p0", "t1"))
    assert history.lost_after_delivery(h) == []


def test_the_checker_finds_an_acked_message_delivered_again():
    h = clean_history()
    h.deliveries.append(Delivery("c2", "p0", "t2", "L2", 20.0, 20.1, 25.0, 2))
    found = history.violations(h)
    assert len(found["redelivered"]) == 1 and "p0/t2" in found["redelivered"][0], found
    # A pop sent before the ack's answer came is not proof: the ack may not have been done.
    h.deliveries[-1] = Delivery("c2", "p0", "t2", "L2", 5.25, 20.1, 25.0, 2)
    assert history.acked_redelivered(h) == []


def test_the_checker_finds_a_message_the_group_lost_after_one_delivery():
    """Review s23 five H1: delivered once, its ack unanswered, never delivered again, and
    the broker does not count it consumed: every other check is met by that one delivery."""
    h = clean_history()
    h.acks[1].ok = None
    for d in h.deliveries:
        d.partition_id = "pid-0"
    h.consumed = {("p0", "t1"): False}
    found = history.violations(h)
    assert found["lost_for_the_group"] == [
        "delivered p0/t1, no ack of it answered success, and once drained the group neither "
        "got it again nor consumed it"], found
    assert all(not v for k, v in found.items() if k != "lost_for_the_group"), found
    # The ack was done after all (its answer was lost): consumed, nothing to report.
    h.consumed[("p0", "t1")] = True
    assert history.lost_for_the_group(h) == []
    # A refused ack followed by a redelivery acked with success is settled.
    h.acks[1].ok = False
    h.deliveries.append(Delivery("c2", "p0", "t1", "L2", 20.0, 20.1, 25.0, 2))
    h.acks.append(Ack("c2", "p0", "t1", "L2", 20.2, 20.3, True))
    assert h.unsettled() == {}
    # The broker could not be asked: reported, never taken as settled.
    h = clean_history()
    h.acks[2].ok = False
    h.consumed = {}
    assert len(history.lost_for_the_group(h)) == 1


def test_every_message_delivered_to_the_group_was_consumed_or_came_again(run):
    assert run[0].consumed is not None
    found = history.lost_for_the_group(run[0])
    assert not found, report(found)


def test_the_checker_finds_a_retried_push_stored_twice():
    h = clean_history()
    for d in h.deliveries:
        d.msg_id = f"id-{d.txn}"
    h.deliveries.append(Delivery("c2", "p0", "t1", "L2", 20.0, 20.1, 25.0, 2, "id-t1-again"))
    found = history.violations(h)
    assert len(found["duplicated"]) == 1 and "p0/t1" in found["duplicated"][0], found
    # The same message delivered twice (one id) is a redelivery, not a duplicate.
    h.deliveries[-1].msg_id = "id-t1"
    assert history.duplicated(h) == []


# ---------------------------------------------------------------------------------------
# The run: three nodes, the load, the kills, the drain.


def now() -> float:
    return time.monotonic()


class Cluster:
    """Nodes (three unless told) on reserved ports; every node started from the main thread
    (a broker dies with the thread that spawned it)."""

    def __init__(self, base: Path, ids=(1, 2, 3)):
        raft = {i: free_port() for i in ids}
        http_ports = {i: free_port() for i in ids}
        kafka = {i: free_port() for i in ids}
        peers = ",".join(f"{i}=127.0.0.1:{raft[i]}" for i in ids)
        peer_http = ",".join(f"{i}=http://127.0.0.1:{http_ports[i]}" for i in ids)
        self.base = base
        self.nodes = {
            i: Broker(base / f"node{i}-data", base / "logs", name=f"node{i}",
                      http_port=http_ports[i], kafka_port=kafka[i], env={
                          "QUEEN_CLUSTER_TOKEN": TOKEN,
                          "QUEEN_CLUSTER_ADDR": f"127.0.0.1:{raft[i]}",
                          "QUEEN_NODE_ID": str(i),
                          "QUEEN_PEERS": peers,
                          "QUEEN_PEER_HTTP": peer_http,
                          "QUEEN_CLUSTER_HEARTBEAT_MS": str(HEARTBEAT_MS),
                          "QUEEN_CLUSTER_ELECTION_TIMEOUT_MS": str(ELECTION_MS),
                      })
            for i in ids
        }

    def urls(self) -> list[str]:
        return [n.url for n in self.nodes.values()]

    def spawn(self, i: int) -> None:
        node = self.nodes[i]
        node.data_dir.mkdir(parents=True, exist_ok=True)
        node._spawn()

    def kill_all(self) -> None:
        for n in self.nodes.values():
            n.kill()

    def tails(self) -> str:
        return "\n".join(f"--- node{i} ---\n{n.log_tail(30)}" for i, n in self.nodes.items())

    async def raft_of(self, http: httpx.AsyncClient, i: int):
        try:
            res = await http.get(f"{self.nodes[i].url}/health", timeout=2.0)
            return res.json().get("raft")
        except (httpx.HTTPError, ValueError):
            return None

    async def settled(self, http: httpx.AsyncClient, ids) -> dict | None:
        """{id: raft block} once one leader and its followers agree on it in one term."""
        views = {i: await self.raft_of(http, i) for i in ids}
        if any(v is None for v in views.values()):
            return None
        leaders = [i for i, v in views.items() if v["role"] == "leader"]
        if len(leaders) != 1:
            return None
        term = views[leaders[0]]["term"]
        if any(v["leader"] != leaders[0] or v["term"] != term
               or v["role"] not in ("leader", "follower") for v in views.values()):
            return None
        return views

    async def wait_settled(self, http: httpx.AsyncClient, ids) -> dict:
        deadline = now() + SETTLE_S
        while now() < deadline:
            for i in ids:
                assert self.nodes[i].proc.poll() is None, f"node {i} exited:\n{self.tails()}"
            views = await self.settled(http, ids)
            if views is not None:
                return views
            await asyncio.sleep(0.2)
        raise AssertionError(f"no settled leader among {list(ids)} within {SETTLE_S} s")


def leader_of(views: dict) -> int:
    return next(i for i, v in views.items() if v["role"] == "leader")


def new_client(urls: list[str]):
    from queen import Queen

    # retry_attempts 1: the test retries itself, so that every attempt is in the history.
    # Round-robin: successive requests go to every node, the followers' relay included.
    return Queen(urls=urls, timeout_millis=CLIENT_TIMEOUT_MS, retry_attempts=1,
                 load_balancing_strategy="round-robin", health_retry_after_millis=1000)


async def producer(client, partition: str, h: History, stop: asyncio.Event) -> None:
    """One sequential producer: push #k until acknowledged (same transactionId on every
    retry), then #k+1. Stops between attempts once `stop` is set (the last push may then be
    unacknowledged)."""
    seq = 0
    while not stop.is_set():
        txn = f"{partition}-{seq}"
        while not stop.is_set():
            sent = now()
            ok, error = None, ""
            try:
                results = await asyncio.wait_for(
                    client.queue(QUEUE).partition(partition).push(
                        [{"data": {"seq": seq}, "transactionId": txn}]),
                    CLIENT_TIMEOUT_MS / 1000 * 2)
                if isinstance(results, list) and len(results) == 1:
                    ok = results[0].get("status") in ("queued", "duplicate")
                    error = "" if ok else str(results[0])[:200]
            except Exception as e:  # noqa: BLE001 - any failure is "not acknowledged", retried
                status = getattr(getattr(e, "response", None), "status_code", None)
                error = f"{status} {getattr(e, 'code', None)}" if status else type(e).__name__
            h.pushes.append(Push(partition, txn, seq, sent, now(), ok, error))
            if ok:
                break
            await asyncio.sleep(RETRY_GAP_S)
        else:
            return
        seq += 1
        await asyncio.sleep(PUSH_GAP_S)


async def consumer(client, name: str, h: History, stop: asyncio.Event, batches) -> None:
    """Pops (one group) and acks every batch; records each delivery and each ack's answer."""
    while not stop.is_set():
        sent = now()
        try:
            messages = await asyncio.wait_for(
                client.queue(QUEUE).group(GROUP).subscription_mode("all").batch(20)
                .partitions(1).wait(True).timeout_millis(1000).pop(),
                CLIENT_TIMEOUT_MS / 1000 * 2)
        except Exception:  # noqa: BLE001 - the client swallows most; a bound hit lands here
            messages = []
        recv = now()
        if not messages:
            if recv - sent < 0.5:  # an error, not a long poll: do not spin
                await asyncio.sleep(0.2)
            continue
        batch = next(batches)
        for m in messages:
            h.deliveries.append(Delivery(name, m["partition"], m["transactionId"],
                                         m.get("leaseId") or "", sent, recv,
                                         sent + LEASE_S, batch, m.get("id") or "",
                                         m.get("partitionId") or ""))
        # "Processing" before the ack: leases are open at most moments, so kills catch some.
        await asyncio.sleep(PROCESS_S)
        sent = now()
        try:
            answer = await asyncio.wait_for(client.ack(messages, True, {"group": GROUP}),
                                            CLIENT_TIMEOUT_MS / 1000 * 2)
        except Exception:  # noqa: BLE001
            answer = {"success": False}
        recv = now()
        results = answer.get("results")
        for k, m in enumerate(messages):
            if isinstance(results, list) and k < len(results) and isinstance(results[k], dict):
                ok = results[k].get("success") is True and not results[k].get("error")
            elif answer.get("success") is True:
                ok = True
            else:
                ok = None  # no answer: it may or may not be done
            h.acks.append(Ack(name, m["partition"], m["transactionId"],
                              m.get("leaseId") or "", sent, recv, ok))


async def read_back(client) -> set[tuple[str, str]]:
    """Every message the queue still holds, read from the start by a group of its own."""
    seen: set[tuple[str, str]] = set()
    empty = 0
    deadline = now() + DRAIN_S
    while empty < 3:
        assert now() < deadline, f"the read-back did not end within {DRAIN_S} s"
        messages = await asyncio.wait_for(
            client.queue(QUEUE).group(AUDIT_GROUP).subscription_mode("all").batch(100)
            .partitions(1).wait(False).pop(),
            CLIENT_TIMEOUT_MS / 1000 * 2)
        if not messages:
            empty += 1
            await asyncio.sleep(0.2)
            continue
        empty = 0
        seen.update((m["partition"], m["transactionId"]) for m in messages)
        # Acked so that the partition's next messages come to the next pop.
        await asyncio.wait_for(client.ack(messages, True, {"group": AUDIT_GROUP}),
                               CLIENT_TIMEOUT_MS / 1000 * 2)
    return seen


async def group_states(http: httpx.AsyncClient, url: str,
                       h: History) -> dict[tuple[str, str], bool | None]:
    """For each message delivered but never acked with a success answer, whether the
    broker counts it consumed by the group (GET /api/v1/messages/{pid}/{txn}); None when
    it could not be asked."""
    states: dict[tuple[str, str], bool | None] = {}
    for (partition, txn), pid in h.unsettled().items():
        states[(partition, txn)] = None
        if not pid:
            continue
        try:
            res = await http.get(f"{url}/api/v1/messages/{pid}/{txn}")
        except httpx.HTTPError:
            continue
        if res.status_code != 200:
            continue
        for g in res.json().get("consumerGroups") or []:
            if g.get("name") == GROUP:
                states[(partition, txn)] = g.get("consumed") is True
    return states


def drained(h: History) -> bool:
    """Every acknowledged push delivered, and either every delivery acked or none for longer
    than a lease: a message whose ack went unanswered was acked or comes again once its lease
    ends."""
    if not h.acknowledged() <= h.delivered():
        return False
    if h.delivered() <= h.acked_ok():
        return True
    last = max((d.recv for d in h.deliveries), default=0.0)
    return now() - last > LEASE_S + 1


def the_leader(_round: int, views: dict, _rng: random.Random) -> list[int]:
    """This test's victims: the leader alone, every round."""
    return [leader_of(views)]


async def chaos(cluster: Cluster, rng: random.Random, pick=the_leader,
                rounds: int = ROUNDS) -> tuple[History, list[dict]]:
    """The load on every node, `rounds` rounds of SIGKILL to the nodes `pick(round, views,
    rng)` names (restarted and caught up before the next round), then the drain and the
    read-back."""
    h = History()
    kills = []
    async with httpx.AsyncClient(timeout=5.0) as http:
        for i in cluster.nodes:
            cluster.spawn(i)
        views = await cluster.wait_settled(http, cluster.nodes)
        lead = leader_of(views)
        res = await http.post(f"{cluster.nodes[lead].url}/api/v1/configure", json={
            "queue": QUEUE, "options": {"leaseTime": LEASE_S, "retryLimit": 1000}})
        assert res.status_code == 200, res.text

        clients = [new_client(cluster.urls()) for _ in range(len(PARTITIONS) + CONSUMERS)]
        stop_push, stop_pop = asyncio.Event(), asyncio.Event()
        batches = iter(range(1, 1 << 62))
        tasks = [asyncio.create_task(producer(clients[k], p, h, stop_push))
                 for k, p in enumerate(PARTITIONS)]
        tasks += [asyncio.create_task(consumer(clients[len(PARTITIONS) + k], f"c{k}", h,
                                               stop_pop, batches))
                  for k in range(CONSUMERS)]
        try:
            for r in range(rounds):
                await asyncio.sleep(rng.uniform(0.5, 4.0))
                views = await cluster.wait_settled(http, cluster.nodes)
                victims = pick(r, views, rng)
                killed_at = now()
                for i in victims:
                    cluster.nodes[i].kill()
                rest = [i for i in cluster.nodes if i not in victims]
                views = await cluster.wait_settled(http, rest)
                commit = views[leader_of(views)]["commit"]
                for i in victims:
                    cluster.spawn(i)
                deadline = now() + SETTLE_S
                while True:
                    views = await cluster.settled(http, cluster.nodes)
                    if views is not None and all(views[i]["applied"] >= commit
                                                 for i in victims):
                        break
                    for i in victims:
                        assert cluster.nodes[i].proc.poll() is None, cluster.tails()
                    assert now() < deadline, f"nodes {victims} did not rejoin: {views}"
                    await asyncio.sleep(0.2)
                kills.append({"round": r, "nodes": victims, "at": killed_at,
                              "new_leader": leader_of(views)})
            stop_push.set()
            await asyncio.wait_for(asyncio.gather(*tasks[:len(PARTITIONS)]),
                                   CLIENT_TIMEOUT_MS / 1000 * 3)
            deadline = now() + DRAIN_S
            while not drained(h) and now() < deadline:
                await asyncio.sleep(0.5)
            stop_pop.set()
            await asyncio.wait(tasks, timeout=CLIENT_TIMEOUT_MS / 1000 * 3)
            views = await cluster.wait_settled(http, cluster.nodes)
            h.consumed = await group_states(http, cluster.nodes[leader_of(views)].url, h)
            # What the cluster still holds, whatever was delivered (review s20 lead D2).
            h.stored = await read_back(clients[0])
        finally:
            stop_push.set()
            stop_pop.set()
            await asyncio.wait(tasks, timeout=CLIENT_TIMEOUT_MS / 1000 * 3)
            for t in tasks:
                t.cancel()
            for c in clients:
                try:
                    await asyncio.wait_for(c.close(), 10)
                except Exception:  # noqa: BLE001 - closing is best effort
                    pass
    return h, kills


def failover_times(h: History, kills: list[dict]) -> list[dict]:
    """Per kill: seconds to the first acknowledged push sent after it (None if none)."""
    out = []
    for k in kills:
        firsts = [p.recv for p in h.pushes if p.ok and p.sent >= k["at"]]
        out.append({"round": k["round"], "killed": k["nodes"], "new_leader": k["new_leader"],
                    "first_write_s": round(min(firsts) - k["at"], 3) if firsts else None})
    return out


def execute(base: Path, seed: int, ids=(1, 2, 3), pick=the_leader, rounds: int = ROUNDS,
            name: str = "cluster") -> tuple[History, list[dict]]:
    """One chaos run on fresh nodes under `base`, its data dirs removed after: (history,
    failovers). The failovers go to .cache/test-results/<name>-failover.json and the history
    to <name>-chaos-history.json."""
    cluster = Cluster(base, ids)
    rng = random.Random(seed)
    print(f"\n{name} seed {seed} (CHAOS_SEED to replay the kill moments)")
    # The official client installs SIGINT/SIGTERM handlers; pytest's come back after.
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        h, kills = asyncio.run(chaos(cluster, rng, pick, rounds))
    except BaseException:
        print(cluster.tails())
        raise
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)
        cluster.kill_all()
        # Every data dir, on failure too (review s20 lead D3): the logs' tails are printed.
        shutil.rmtree(base, ignore_errors=True)
    failovers = failover_times(h, kills)
    print(f"{name} seed {seed}: {len(h.pushes)} push attempts, "
          f"{len(h.acknowledged())} acknowledged, {len(h.deliveries)} deliveries, "
          f"{sum(1 for a in h.acks if not a.ok)} acks not answered success")
    for f in failovers:
        print(f"failover round {f['round']}: nodes {f['killed']} killed, node "
              f"{f['new_leader']} leads, first write after {f['first_write_s']} s")
    results = REPO / ".cache" / "test-results"
    results.mkdir(parents=True, exist_ok=True)
    (results / f"{name}-failover.json").write_text(json.dumps({
        "seed": seed, "nodes": len(ids), "heartbeat_ms": HEARTBEAT_MS,
        "election_timeout_ms": ELECTION_MS, "rounds": failovers}, indent=2) + "\n")
    # The whole history, for reading a failure (times are time.monotonic(), kills included).
    (results / f"{name}-chaos-history.json").write_text(json.dumps({
        "seed": seed, "kills": kills, "pushes": [vars(p) for p in h.pushes],
        "deliveries": [vars(d) for d in h.deliveries], "acks": [vars(a) for a in h.acks],
        "stored": sorted(h.stored or []),
        "consumed": sorted([p, t, v] for (p, t), v in (h.consumed or {}).items())}))
    return h, failovers


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The chaos run, once for the checks below: (history, failovers)."""
    return execute(tmp_path_factory.mktemp("chaos"), SEED)


def report(found: list[str]) -> str:
    return f"seed {SEED}: {len(found)} violations, first: {found[:5]}"


def test_every_round_killed_a_leader_and_writes_resumed(run):
    h, failovers = run
    assert len(failovers) == ROUNDS, failovers
    # Writes resumed after every kill (how soon is printed, never asserted).
    assert all(f["first_write_s"] is not None for f in failovers), failovers
    assert len(h.acknowledged()) > 0 and len(h.deliveries) > 0


def test_the_fast_failover_replaced_a_killed_leader_before_openraft_could(run):
    """Review s24 failover L5: a build whose followers never detect the killed leader
    (`leader_gone` not called) passes every other check here. openraft alone elects after
    its lease (the election range's maximum, 2 x ELECTION_MS) plus a drawn timeout, at least
    9 s here; the fast path took about 1 s in every round measured. Only the fastest of the
    rounds is held, and only to the lease, so a loaded machine's slow rounds do not fail."""
    firsts = [f["first_write_s"] for f in run[1] if f["first_write_s"] is not None]
    assert firsts and min(firsts) < 2 * ELECTION_MS / 1000, run[1]


def test_no_acknowledged_push_is_lost(run):
    found = history.lost_pushes(run[0])
    assert not found, report(found)


def test_each_partition_delivers_in_push_order(run):
    found = history.out_of_order(run[0])
    assert not found, report(found)


def test_never_two_live_leases_on_one_message(run):
    found = history.double_leases(run[0])
    assert not found, report(found)


def test_no_acked_message_is_delivered_again_to_the_group(run):
    found = history.acked_redelivered(run[0])
    assert not found, report(found)


def test_every_acknowledged_push_is_still_held(run):
    assert run[0].stored is not None
    found = history.lost_after_delivery(run[0])
    assert not found, report(found)


def test_no_retried_push_is_stored_twice(run):
    found = history.duplicated(run[0])
    assert not found, report(found)
