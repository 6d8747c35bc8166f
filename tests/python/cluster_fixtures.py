"""The fixtures of the cluster tests (test_cluster.py, test_cluster_membership.py): three
`queen` processes over loopback started and settled, pushes retried until acknowledged, and
everything popped back. Every wait is bounded; nothing is timed."""

import time

import httpx

import queen_api
from queen_broker import free_port

TOKEN = "cluster-test-token-" + "x" * 32
QUEUE = "clustered"
GROUP = "cluster-group"
FORM_S = 60.0  # the bound on every wait for the cluster to settle
# Wider than openraft's single-node 100 ms (review s16 B5): the heartbeat is the whole
# append timeout, a follower's fsync on a loaded test machine included. Shorter than the
# defaults (500 / 5000) so that failovers fit the test's waits.
HEARTBEAT_MS = 300
ELECTION_MS = 3000
# What a follower adds to a request it relays; a node that does not lead answers such a
# request itself (503 not_leader) instead of relaying it again.
RELAYED = {"x-queen-forwarded": "9"}


def make_cluster(broker_factory, peer_kafka=False, extra_env=None):
    """Three unstarted members; with `peer_kafka`, each knows every member's Kafka port (the
    brokers its Kafka Metadata lists); `extra_env` is added to every member's."""
    ids = [1, 2, 3]
    # Every port reserved up front, Kafka's too: a later pick could take a port reserved
    # for a node not started yet (review s16 A8).
    raft_ports = {i: free_port() for i in ids}
    http_ports = {i: free_port() for i in ids}
    kafka_ports = {i: free_port() for i in ids}
    peers = ",".join(f"{i}=127.0.0.1:{raft_ports[i]}" for i in ids)
    peer_http = ",".join(f"{i}=http://127.0.0.1:{http_ports[i]}" for i in ids)
    kafka_env = {"QUEEN_PEER_KAFKA": ",".join(f"{i}=127.0.0.1:{kafka_ports[i]}" for i in ids)}
    nodes = {}
    for i in ids:
        nodes[i] = broker_factory(
            f"node{i}",
            http_port=http_ports[i],
            kafka_port=kafka_ports[i],
            env={
                "QUEEN_CLUSTER_TOKEN": TOKEN,
                "QUEEN_CLUSTER_ADDR": f"127.0.0.1:{raft_ports[i]}",
                "QUEEN_NODE_ID": str(i),
                "QUEEN_PEERS": peers,
                "QUEEN_PEER_HTTP": peer_http,
                "QUEEN_CLUSTER_HEARTBEAT_MS": str(HEARTBEAT_MS),
                "QUEEN_CLUSTER_ELECTION_TIMEOUT_MS": str(ELECTION_MS),
                **(kafka_env if peer_kafka else {}),
                **(extra_env or {}),
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


def started_cluster(broker_factory, http, peer_kafka=False, extra_env=None):
    """Three nodes made, spawned and settled: (nodes, the leader's id)."""
    nodes = make_cluster(broker_factory, peer_kafka=peer_kafka, extra_env=extra_env)
    for n in nodes.values():
        spawn(n)
    views = wait_settled(http, nodes)
    return nodes, next(i for i, v in views.items() if v["role"] == "leader")


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


def pop_all(http, base, expected):
    """Pops and acks from `base` until every one of `expected` came; what came."""
    got = []
    last = None
    deadline = time.monotonic() + FORM_S
    while set(expected) - set(got):
        assert time.monotonic() < deadline, (
            f"missing {sorted(set(expected) - set(got))}; last answer {last}")
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
    return got
