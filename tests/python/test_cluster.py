"""Three `queen` processes as one cluster over loopback (docs/cluster.md).

The cluster forms (one leader, two followers, one term); pushes to the leader are
acknowledged; a follower refuses a write with 503 not_leader naming the leader; the leader
is killed with SIGKILL; a new leader is elected among the other two and every acknowledged
message is still there (popped and acked from the new leader); the killed node restarts,
rejoins as a follower and applies up to the leader's commit. Every wait is bounded; nothing
is timed.
"""

import signal
import threading
import time

import httpx

import queen_api
from cluster_fixtures import (  # noqa: F401 - shared with test_cluster_membership.py
    FORM_S, GROUP, QUEUE, RELAYED, TOKEN, make_cluster, pop_all, push_acknowledged,
    raft_of, settled, spawn, started_cluster, wait_settled)

def test_three_nodes_form_replicate_and_survive_losing_the_leader(broker_factory):
    with httpx.Client(timeout=10.0) as http:
        nodes, lead = started_cluster(broker_factory, http)
        leader = nodes[lead]
        acked = push_acknowledged(http, leader.url, 20, 0)

        # A follower plans nothing. A request relayed once already (x-queen-forwarded) is
        # not relayed again: 503 not_leader naming the leader and its HTTP address.
        follower_id = next(i for i in nodes if i != lead)
        res = http.post(
            f"{nodes[follower_id].url}/api/v1/push",
            json={"items": [queen_api.item(QUEUE, "p0", "refused", {"k": -1})]},
            headers=RELAYED,
        )
        assert res.status_code == 503, res.text
        body = res.json()
        assert body["code"] == "not_leader", body
        assert body["leader"] == lead, body
        assert body["leaderUrl"] == leader.url, body
        res = http.get(f"{nodes[follower_id].url}/api/v1/pop/queue/{QUEUE}",
                       params={"batch": 1, "wait": "false"}, headers=RELAYED)
        assert res.status_code == 503 and res.json()["code"] == "not_leader", res.text

        # The leader dies without a word; the other two elect one of them.
        leader.kill()
        rest = {i: n for i, n in nodes.items() if i != lead}
        views = wait_settled(http, rest)
        new_lead = next(i for i, v in views.items() if v["role"] == "leader")
        assert new_lead != lead
        base = nodes[new_lead].url
        acked += push_acknowledged(http, base, 5, 100)

        # Every acknowledged message is there, once: popped and acked from the new leader.
        got = pop_all(http, base, acked)
        assert sorted(got) == sorted(acked), "a message was delivered twice or is foreign"

        # The killed node comes back on its directory: a follower that catches up.
        spawn(leader)
        deadline = time.monotonic() + FORM_S
        while True:
            assert leader.proc.poll() is None, leader.log_tail()
            views = settled(http, nodes)
            if views is not None:
                leading = next(i for i, v in views.items() if v["role"] == "leader")
                if (views[lead]["role"] == "follower"
                        and views[lead]["applied"] >= views[leading]["commit"]):
                    break
            assert time.monotonic() < deadline, f"node {lead} did not catch up: {views}"
            time.sleep(0.2)
        ready = http.get(f"{leader.url}/ready")
        assert ready.status_code == 200, ready.text


STALLED = "did not answer in time"


def isolate_and_heal(http, nodes, lead, k):
    """SIGSTOPs every node but `lead`, checks that `lead` stops serving (503, not the
    stalled-engine text; /ready 503), then SIGCONTs them; the pushes acknowledged meanwhile
    (none expected, but any 200 counts) and the answers seen."""
    leader = nodes[lead]
    others = [n for i, n in nodes.items() if i != lead]
    for n in others:
        n.proc.send_signal(signal.SIGSTOP)
    acked = []
    try:
        # A write in flight when the followers stopped: it cannot commit. The leader gives it
        # up once no majority acknowledged it within its lease, answers it 503,
        # and every later request is refused at once, never left to the stalled-engine bound.
        deadline = time.monotonic() + FORM_S
        answers = []
        refused_quickly = 0
        while refused_quickly < 3:
            assert time.monotonic() < deadline, f"the cut-off leader kept serving: {answers[-5:]}"
            assert leader.proc.poll() is None, leader.log_tail()
            txn = f"cut{k}-{len(answers)}"
            try:
                res = http.post(
                    f"{leader.url}/api/v1/push",
                    json={"items": [queen_api.item(QUEUE, "p0", txn, {"k": -2})]},
                    timeout=10.0,
                )
            except httpx.TimeoutException:
                answers.append(("timeout", txn))
                continue
            answers.append((res.status_code, res.text[:200]))
            if res.status_code in (200, 201):
                acked.append(txn)
                refused_quickly = 0
                continue
            assert res.status_code == 503, res.text
            code = res.json().get("code")
            if STALLED in res.text:
                refused_quickly = 0
                continue
            assert code in ("unavailable", "not_leader"), res.text
            refused_quickly += 1
        ready = http.get(f"{leader.url}/ready", timeout=5.0)
        assert ready.status_code == 503, ready.text
    finally:
        for n in others:
            n.proc.send_signal(signal.SIGCONT)
    return acked, answers


def test_a_leader_cut_off_from_the_majority_stops_serving_and_recovers(broker_factory):
    """Review s16 B1 and B2: a leader whose followers are stopped (SIGSTOP) answers 503 within
    a bound and its /ready turns 503; once they run again the cluster settles, and every
    acknowledged message is there once. Cut off twice within a minute, the deposed leader
    reloads its group at once both times, never with the crash-loop backoff."""
    with httpx.Client(timeout=10.0) as http:
        nodes, lead = started_cluster(broker_factory, http)
        acked = push_acknowledged(http, nodes[lead].url, 10, 0)
        cut = []
        for k in range(2):
            got, _answers = isolate_and_heal(http, nodes, lead, k)
            acked += got
            cut.append(lead)
            views = wait_settled(http, nodes)
            lead = next(i for i, v in views.items() if v["role"] == "leader")
            acked += push_acknowledged(http, nodes[lead].url, 5, 100 + 10 * k)
        got = pop_all(http, nodes[lead].url, acked)
        # A push answered 503 while cut off may still have committed once the others came
        # back (the answer says so): such extras are allowed, nothing else.
        extra = set(got) - set(acked)
        assert all(t.startswith("cut") for t in extra), sorted(extra)
        assert len(got) == len(set(got)), f"a message was delivered twice: {sorted(got)}"
        for i in set(cut):
            log = nodes[i].log_text()
            assert "waiting before the rebuild" not in log, nodes[i].log_tail(80)


def test_leader_and_follower_stay_ready_under_write_load(broker_factory):
    """Review s16 B3: commit moves before apply, so a follower under steady replication
    trails by an entry at times; its /ready keeps the single node's slack and does not flap.
    Review s17 C1: the leader's own cycle is appended and unapplied at almost any moment
    under writes; its /ready must not flap either. 200 polls of each while another thread
    pushes to the leader: all 200."""
    with httpx.Client(timeout=10.0) as http:
        nodes, lead = started_cluster(broker_factory, http)
        follower = nodes[next(i for i in nodes if i != lead)]
        stop = threading.Event()
        pushed = []

        def push_loop():
            with httpx.Client(timeout=10.0) as client:
                k = 0
                while not stop.is_set():
                    items = [queen_api.item(QUEUE, f"p{j}", f"load{k}-{j}", {"k": k})
                             for j in range(4)]
                    res = client.post(f"{nodes[lead].url}/api/v1/push", json={"items": items})
                    if res.status_code in (200, 201):
                        pushed.append(k)
                    k += 1

        writer = threading.Thread(target=push_loop)
        writer.start()
        try:
            deadline = time.monotonic() + FORM_S
            while len(pushed) < 5:
                assert time.monotonic() < deadline, "the leader acknowledged no pushes"
                time.sleep(0.05)
            answers = [http.get(f"{node.url}/ready")
                       for _ in range(200) for node in (follower, nodes[lead])]
        finally:
            stop.set()
            writer.join()
        bad = [(r.status_code, r.text[:200]) for r in answers if r.status_code != 200]
        assert not bad, bad[:5]
        assert len(pushed) > 5, "the writes stopped during the polls"


def forwarded_count(http, node, outcome):
    """queen_forwarded_requests_total{outcome} of `node`."""
    text = http.get(f"{node.url}/metrics/prometheus").text
    for line in text.splitlines():
        if line.startswith("queen_forwarded_requests_total{") and f'outcome="{outcome}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_a_follower_relays_the_official_clients_pushes_pops_and_acks(broker_factory):
    """Issue 13: clients may use any node. The official client pointed at a follower pushes,
    pops and acks; the leader holds the messages (another group pops them all from it) and
    the acknowledged ones are gone for the acking group. A relayed request carries
    x-queen-forwarded, so one sent with it to a follower is refused, never relayed again."""
    with httpx.Client(timeout=10.0) as http:
        nodes, lead = started_cluster(broker_factory, http)
        follower = nodes[next(i for i in nodes if i != lead)]
        queue = "relayed"

        async def produce_and_consume(client):
            for k in range(10):
                await client.queue(queue).partition("p0").push([{"data": {"k": k}}])
            got = []
            deadline = time.monotonic() + FORM_S
            while len(got) < 10:
                assert time.monotonic() < deadline, f"popped only {got}"
                popped = await (client.queue(queue).group("relayed-group")
                                .subscription_mode("all").batch(10).wait(False).pop())
                if popped:
                    await client.ack(popped, True, {"group": "relayed-group"})
                    got += [m["data"]["k"] for m in popped]
            return got

        got = queen_api.with_client(follower.url, produce_and_consume)
        assert sorted(got) == list(range(10)), got
        assert forwarded_count(http, follower, "relayed") >= 12

        # The leader holds them: a fresh group reads all ten from it, and the acking group
        # has nothing left there.
        leader = nodes[lead]
        res = http.get(f"{leader.url}/api/v1/pop/queue/{queue}",
                       params={"batch": 100, "wait": "false", "consumerGroup": "audit",
                               "subscriptionMode": "all"})
        assert res.status_code == 200, res.text
        assert sorted(m["data"]["k"] for m in res.json()["messages"]) == list(range(10))
        res = http.get(f"{leader.url}/api/v1/pop/queue/{queue}",
                       params={"batch": 100, "wait": "false", "consumerGroup": "relayed-group"})
        assert res.status_code == 204, res.text

        # No loop: a request already relayed is answered by the follower itself.
        res = http.post(f"{follower.url}/api/v1/push",
                        json={"items": [queen_api.item(queue, "p0", "twice", {"k": -1})]},
                        headers=RELAYED)
        assert res.status_code == 503, res.text
        assert res.json()["code"] == "not_leader" and res.json()["leader"] == lead, res.text


def test_with_the_leader_killed_a_follower_answers_503_then_relays_to_the_new_leader(
        broker_factory):
    """The leader SIGKILLed: a follower still naming it cannot connect and answers 503 (the
    client's own timeout is never reached: no hang) until the survivors elect a leader; then
    the survivor that follows relays to the new leader, which holds the message."""
    with httpx.Client(timeout=30.0) as http:
        nodes, lead = started_cluster(broker_factory, http)
        survivors = {i: n for i, n in nodes.items() if i != lead}
        first = next(iter(survivors.values()))
        assert push_acknowledged(http, first.url, 1, 0) == ["m0"]
        nodes[lead].kill()

        answers = []
        deadline = time.monotonic() + FORM_S
        while True:
            assert time.monotonic() < deadline, f"no new leader: {answers[-6:]}"
            for i, n in survivors.items():
                res = http.post(
                    f"{n.url}/api/v1/push",
                    json={"items": [queen_api.item(QUEUE, "p0", f"gone{len(answers)}", {})]},
                )
                code = res.json().get("code") if res.status_code == 503 else None
                answers.append((i, res.status_code, code))
                assert res.status_code in (200, 201, 503), res.text
                if res.status_code == 503:
                    assert code in ("not_leader", "unavailable"), res.text
            if settled(http, survivors) is not None:
                break
            time.sleep(0.2)
        # Asked right after the kill, before any election could end: refused, not hung.
        assert answers[0][1] == 503, answers[:4]

        views = wait_settled(http, survivors)
        new_lead = next(i for i, v in views.items() if v["role"] == "leader")
        assert new_lead != lead
        follower = next(n for i, n in survivors.items() if i != new_lead)
        relayed = forwarded_count(http, follower, "relayed")
        acked = push_acknowledged(http, follower.url, 3, 500)
        assert forwarded_count(http, follower, "relayed") >= relayed + 3
        got = pop_all(http, nodes[new_lead].url, acked + ["m0"])
        assert set(acked + ["m0"]) <= set(got), got
