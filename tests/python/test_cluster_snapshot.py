"""Issue 13, Done-when 3: a follower stopped (SIGSTOP) while the leader reclaims past every
log entry it has is caught up by snapshot once resumed (its installs counter rises), then
takes part in later writes and, elected once the leader is gone, serves every acknowledged
message in order from its own state (docs/cluster.md "Catching up by snapshot").

Three real `queen` processes with `cluster_snapshot_catch_up` on, 1 MiB segments, a
checkpoint every second and a queue whose messages retention removes after a second, so the
leader's dead segments go within seconds. Nothing is timed: every wait polls with a bound.
"""

import signal
import time

import httpx

import queen_api
from cluster_fixtures import (ELECTION_MS, FORM_S, HEARTBEAT_MS, TOKEN, make_cluster, raft_of,
                              spawn, wait_settled)
from queen_broker import free_port
from segments import read_segment, segment_files

ENV = {
    "QUEEN_CLUSTER_SNAPSHOT_CATCH_UP": "true",
    # Few entries kept below a snapshot, so the purge passes the stopped follower soon.
    "QUEEN_CLUSTER_SNAPSHOT_KEEP_ENTRIES": "4",
    "QUEEN_RETENTION_INTERVAL_MS": "50",
    "QUEEN_CHECKPOINT_INTERVAL_SECS": "1",
    "QUEEN_SEGMENT_BYTES": str(1 << 20),
}
AGED = "snap-aged"  # retention removes its messages after a second
KEPT = "snap-kept"  # no retention: every message must still be there at the end
FILLER = "x" * (16 << 10)
PER_PUSH = 16  # a quarter of a segment per push
BOUND_S = 90.0  # the whole catch-up, far above what it takes


def configure(http, base, queue, **options):
    """Retried while the cluster answers 503 (a leader just elected still applying its log)."""
    deadline = time.monotonic() + FORM_S
    while True:
        res = http.post(f"{base}/api/v1/configure", json={"queue": queue, "options": options})
        if res.status_code == 200:
            return
        assert res.status_code == 503, res.text
        assert time.monotonic() < deadline, f"configure never accepted: {res.text}"
        time.sleep(0.2)


def push(http, base, queue, txns, fill=""):
    """Pushes `txns` in one request, retried while the cluster answers 503."""
    items = [queen_api.item(queue, "p", t, {"t": t, "fill": fill}) for t in txns]
    deadline = time.monotonic() + FORM_S
    while True:
        res = http.post(f"{base}/api/v1/push", json={"items": items}, timeout=10.0)
        if res.status_code in (200, 201):
            assert all(queen_api.accepted(r) for r in res.json()), res.text
            return
        assert res.status_code == 503, res.text
        assert time.monotonic() < deadline, f"push never accepted: {res.text}"
        time.sleep(0.2)


def first_index(node) -> int:
    """The first index of the node's oldest segment; listed again when reclamation deletes
    the file between the listing and the read (the broker runs on meanwhile)."""
    for _ in range(50):
        files = segment_files(node.data_dir)
        assert files, f"no segment in {node.data_dir}"
        try:
            return read_segment(files[0])[0]
        except FileNotFoundError:
            continue
    raise AssertionError(f"the oldest segment of {node.data_dir} kept vanishing")


def installs(http, node) -> float:
    return queen_api.metric_at(http, node.url, "queen_raft_snapshot_installs_total")


def wait_for(check, label, seconds=BOUND_S):
    deadline = time.monotonic() + seconds
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, label
        time.sleep(0.2)


def test_a_stopped_follower_catches_up_by_snapshot_and_serves_on(broker_factory):
    nodes = make_cluster(broker_factory)
    for n in nodes.values():
        n.env.update(ENV)
        spawn(n)
    with httpx.Client(timeout=10.0) as http:
        views = wait_settled(http, nodes)
        lead = next(i for i, v in views.items() if v["role"] == "leader")
        base = nodes[lead].url
        configure(http, base, AGED, retentionEnabled=True, retentionSeconds=1)
        configure(http, base, KEPT)
        # Before the stop only aged messages: a kept one would pin its segment (and every
        # later one) against reclamation.
        push(http, base, AGED, [f"before-{i}" for i in range(5)])
        stopped_id = next(i for i in nodes if i != lead)
        other_id = next(i for i in nodes if i not in (lead, stopped_id))
        stopped = nodes[stopped_id]
        # Every node holds the pushes before the stop.
        target = raft_of(http, nodes[lead])["applied"]
        wait_for(lambda: (raft_of(http, stopped) or {}).get("applied", 0) >= target,
                 "the follower never applied the first pushes")
        had = raft_of(http, stopped)["lastLogIndex"]
        assert installs(http, stopped) == 0

        stopped.proc.send_signal(signal.SIGSTOP)
        try:
            # Aged filler until the leader's log starts past everything the stopped follower
            # has: it can only be caught up by snapshot now.
            round_no = 0
            while first_index(nodes[lead]) <= had:
                assert round_no < 300, f"the leader never reclaimed past {had}"
                push(http, base, AGED, [f"f{round_no}-{i}" for i in range(PER_PUSH)], FILLER)
                round_no += 1
                time.sleep(0.1)
            kept = [f"during-{i}" for i in range(5)]
            for t in kept:
                push(http, base, KEPT, [t])
            assert installs(http, stopped) == 0
        finally:
            stopped.proc.send_signal(signal.SIGCONT)

        wait_for(lambda: installs(http, stopped) >= 1, "the follower installed no snapshot")
        target = raft_of(http, nodes[lead])["applied"]
        wait_for(lambda: (raft_of(http, stopped) or {}).get("applied", 0) >= target,
                 "the follower never caught up after the snapshot")
        assert stopped.proc.poll() is None, stopped.log_tail()

        # Later writes need it: with the other follower gone, the leader's every commit
        # waits for the caught-up follower's acknowledgement.
        nodes[other_id].kill()
        after = [f"after-{i}" for i in range(5)]
        for t in after:
            push(http, base, KEPT, [t])
        kept += after
        target = raft_of(http, nodes[lead])["applied"]
        wait_for(lambda: (raft_of(http, stopped) or {}).get("applied", 0) >= target,
                 "the caught-up follower did not apply the later writes")

        # Review s26 snap M6: read the caught-up node's own state, not the leader's. The
        # leader is killed and the other follower started again: it lacks the later writes, so
        # only the caught-up node can be elected (Raft's up-to-date check), and every pop below
        # is answered from the state it installed and applied.
        nodes[lead].kill()
        spawn(nodes[other_id])
        pair = {stopped_id: stopped, other_id: nodes[other_id]}
        views = wait_settled(http, pair)
        assert views[stopped_id]["role"] == "leader", views
        base = stopped.url

        # Every acknowledged message of the kept queue is there, once and in order.
        got = []
        deadline = time.monotonic() + FORM_S
        while len(got) < len(kept):
            assert time.monotonic() < deadline, f"missing {sorted(set(kept) - set(got))}"
            msgs = queen_api.pop(http, base, KEPT, group="snap-check", batch=100, mode="all")
            got += [m["transactionId"] for m in msgs]
            if msgs:
                results = queen_api.ack_batch(http, base, msgs, "snap-check")
                assert all(r.get("success") for r in results), results
        assert got == kept, (got, kept)
        log = stopped.log_text()
        assert "snapshot staged" in log, stopped.log_tail(80)
        assert "waiting before the rebuild" not in log, stopped.log_tail(80)
        # The rebuild after the stage found the failed incarnation's files let go of.
        assert "files are still held" not in log, stopped.log_tail(80)


def test_a_learner_added_after_the_log_was_reclaimed_catches_up_by_snapshot(broker_factory):
    """Review s26 snap M2: once the leader's log was reclaimed a new node can still be added;
    it needs entries below the leader's first, so it is caught up by snapshot, with no write
    after it was added (review s25 H2, the membership history)."""
    nodes = make_cluster(broker_factory)
    for n in nodes.values():
        n.env.update(ENV)
        spawn(n)
    with httpx.Client(timeout=10.0) as http:
        views = wait_settled(http, nodes)
        lead = next(i for i, v in views.items() if v["role"] == "leader")
        base = nodes[lead].url
        configure(http, base, AGED, retentionEnabled=True, retentionSeconds=1)
        configure(http, base, KEPT)
        round_no = 0
        while first_index(nodes[lead]) <= 1:
            assert round_no < 300, "the leader never reclaimed"
            push(http, base, AGED, [f"f{round_no}-{i}" for i in range(PER_PUSH)], FILLER)
            round_no += 1
            time.sleep(0.1)
        kept = [f"kept-{i}" for i in range(5)]
        for t in kept:
            push(http, base, KEPT, [t])

        raft4, http4, kafka4 = free_port(), free_port(), free_port()
        new = broker_factory("node4", http_port=http4, kafka_port=kafka4, env={
            **ENV,
            "QUEEN_CLUSTER_TOKEN": TOKEN,
            "QUEEN_CLUSTER_ADDR": f"127.0.0.1:{raft4}",
            "QUEEN_NODE_ID": "4",
            # The members too: a joining node asks them for its horizon (review s33 H-1).
            "QUEEN_PEERS": ",".join([f"{i}={n.env['QUEEN_CLUSTER_ADDR']}" for i, n in sorted(nodes.items())]
                                    + [f"4=127.0.0.1:{raft4}"]),
            "QUEEN_PEER_HTTP": ",".join(f"{i}={n.url}" for i, n in sorted(nodes.items())),
            "QUEEN_CLUSTER_JOIN": "true",
            "QUEEN_CLUSTER_HEARTBEAT_MS": str(HEARTBEAT_MS),
            "QUEEN_CLUSTER_ELECTION_TIMEOUT_MS": str(ELECTION_MS),
        })
        spawn(new)
        wait_for(lambda: raft_of(http, new) is not None or None, "node 4 never answered")
        body = {"id": 4, "clusterAddr": f"127.0.0.1:{raft4}", "httpAddr": new.url}
        res = http.post(f"{base}/api/v1/cluster/learners", json=body, timeout=60.0)
        assert res.status_code == 200, res.text

        # No write after the change (review s25 H2): the checkpoint at the last write, saved
        # with the membership applied past it, is offered with the one in force at its index
        # from the membership history, and node 4 is caught up by it.
        wait_for(lambda: installs(http, new) >= 1 or None, "node 4 installed no snapshot")
        target = raft_of(http, nodes[lead])["applied"]
        wait_for(lambda: (raft_of(http, new) or {}).get("applied", 0) >= target,
                 "node 4 never caught up after the snapshot")
        # Caught up by snapshot: nothing at or below the leader's first index when it joined.
        assert first_index(new) > 1, segment_files(new.data_dir)
        assert new.proc.poll() is None, new.log_tail()
        assert "snapshot staged" in new.log_text(), new.log_tail(80)
