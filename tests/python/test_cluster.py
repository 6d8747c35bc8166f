"""Three `queen` processes as one cluster over loopback (docs/cluster.md).

The cluster forms (one leader, two followers, one term); pushes to the leader are
acknowledged; a follower refuses a write with 503 not_leader naming the leader; the leader
is killed with SIGKILL; a new leader is elected among the other two and every acknowledged
message is still there (popped and acked from the new leader); the killed node restarts,
rejoins as a follower and applies up to the leader's commit. Every wait is bounded; nothing
is timed.
"""

import time

import httpx

import queen_api
from queen_broker import free_port

TOKEN = "cluster-test-token-" + "x" * 32
QUEUE = "clustered"
GROUP = "cluster-group"
FORM_S = 60.0  # the bound on every wait for the cluster to settle


def make_cluster(broker_factory):
    ids = [1, 2, 3]
    raft_ports = {i: free_port() for i in ids}
    http_ports = {i: free_port() for i in ids}
    peers = ",".join(f"{i}=127.0.0.1:{raft_ports[i]}" for i in ids)
    peer_http = ",".join(f"{i}=http://127.0.0.1:{http_ports[i]}" for i in ids)
    nodes = {}
    for i in ids:
        nodes[i] = broker_factory(
            f"node{i}",
            http_port=http_ports[i],
            env={
                "QUEEN_CLUSTER_TOKEN": TOKEN,
                "QUEEN_CLUSTER_ADDR": f"127.0.0.1:{raft_ports[i]}",
                "QUEEN_NODE_ID": str(i),
                "QUEEN_PEERS": peers,
                "QUEEN_PEER_HTTP": peer_http,
            },
        )
    return nodes


def spawn(node):
    """Starts the process without waiting: a member is healthy only once a leader exists."""
    node.data_dir.mkdir(parents=True, exist_ok=True)
    node._spawn()


def raft_of(http, node):
    try:
        res = http.get(f"{node.url}/health", timeout=2.0)
        return res.json().get("raft")
    except (httpx.HTTPError, ValueError):
        return None


def settled(http, nodes):
    """{id: raft block} once exactly one leader and the rest followers agree on it in one
    term, else None."""
    views = {i: raft_of(http, n) for i, n in nodes.items()}
    if any(v is None for v in views.values()):
        return None
    leaders = [i for i, v in views.items() if v["role"] == "leader"]
    if len(leaders) != 1:
        return None
    lead = leaders[0]
    for v in views.values():
        if v["leader"] != lead or v["term"] != views[lead]["term"]:
            return None
        if v["role"] not in ("leader", "follower"):
            return None
    return views


def wait_settled(http, nodes):
    deadline = time.monotonic() + FORM_S
    while time.monotonic() < deadline:
        for i, n in nodes.items():
            assert n.proc.poll() is None, f"node {i} exited:\n{n.log_tail()}"
        views = settled(http, nodes)
        if views is not None:
            return views
        time.sleep(0.2)
    raise AssertionError(f"no settled leader within {FORM_S} s")


def push_acknowledged(http, base, n, start):
    """Pushes n messages one request each until answered; the accepted transactionIds."""
    done = []
    for k in range(start, start + n):
        txn = f"m{k}"
        deadline = time.monotonic() + FORM_S
        while True:
            res = http.post(
                f"{base}/api/v1/push",
                json={"items": [queen_api.item(QUEUE, "p0", txn, {"k": k})]},
                timeout=10.0,
            )
            if res.status_code == 200 or res.status_code == 201:
                assert queen_api.accepted(res.json()[0]), res.text
                done.append(txn)
                break
            assert res.status_code == 503, res.text
            assert time.monotonic() < deadline, f"push {txn} never accepted: {res.text}"
            time.sleep(0.2)
    return done


def test_three_nodes_form_replicate_and_survive_losing_the_leader(broker_factory):
    nodes = make_cluster(broker_factory)
    for n in nodes.values():
        spawn(n)
    with httpx.Client(timeout=10.0) as http:
        views = wait_settled(http, nodes)
        lead = next(i for i, v in views.items() if v["role"] == "leader")
        leader = nodes[lead]
        acked = push_acknowledged(http, leader.url, 20, 0)

        # A follower plans nothing: 503 not_leader naming the leader and its HTTP address.
        follower_id = next(i for i in nodes if i != lead)
        res = http.post(
            f"{nodes[follower_id].url}/api/v1/push",
            json={"items": [queen_api.item(QUEUE, "p0", "refused", {"k": -1})]},
        )
        assert res.status_code == 503, res.text
        body = res.json()
        assert body["code"] == "not_leader", body
        assert body["leader"] == lead, body
        assert body["leaderUrl"] == leader.url, body
        res = http.get(f"{nodes[follower_id].url}/api/v1/pop/queue/{QUEUE}",
                       params={"batch": 1, "wait": "false"})
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
        got = []
        last = None
        deadline = time.monotonic() + FORM_S
        while set(acked) - set(got):
            assert time.monotonic() < deadline, (
                f"missing {sorted(set(acked) - set(got))}; last answer {last}")
            res = http.get(f"{base}/api/v1/pop/queue/{QUEUE}",
                           params={"batch": 100, "wait": "true", "timeout": 1000,
                                   "consumerGroup": GROUP, "subscriptionMode": "all"},
                           timeout=15.0)
            last = (res.status_code, res.text[:300])
            if res.status_code == 204:
                continue
            if res.status_code == 503:
                time.sleep(0.2)
                continue
            res.raise_for_status()
            messages = [m for m in res.json().get("messages") or [] if m]
            got += [m["transactionId"] for m in messages]
            results = queen_api.ack_batch(http, base, messages, GROUP)
            assert all(r.get("success") for r in results), results
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
