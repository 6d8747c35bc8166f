"""H4 of the dedup index (docs/storage-format.md "The id files in the stream"): with a small
hot id table (`QUEEN_DEDUP_HOT_IDS`) on every node, ids the leader spilled to its id files
while a follower was stopped reach that follower in the snapshot that catches it up; elected
once the others are gone, it answers a repeat of such an id as a duplicate, not a new message.

The same way of forcing a snapshot as test_cluster_snapshot.py (SIGSTOP, retention filler
until the leader reclaimed past the follower's log). Nothing is timed: every wait polls.
"""

import signal
import time

import httpx

import queen_api
from cluster_fixtures import make_cluster, raft_of, spawn, wait_settled
from test_cluster_snapshot import (AGED, ENV, FILLER, FORM_S, PER_PUSH, configure, first_index,
                                   installs, push, wait_for)

DEDUP = "snap-dedup"
HOT = 16


def push_once(http, base, queue, txn):
    """The push's one result, retried while the cluster answers 503."""
    items = [queen_api.item(queue, "p", txn, {"t": txn})]
    deadline = time.monotonic() + FORM_S
    while True:
        res = http.post(f"{base}/api/v1/push", json={"items": items}, timeout=10.0)
        if res.status_code in (200, 201):
            return res.json()[0]
        assert res.status_code == 503, res.text
        assert time.monotonic() < deadline, f"push never accepted: {res.text}"
        time.sleep(0.2)


def test_a_follower_caught_up_by_snapshot_knows_the_ids_its_leader_spilled(broker_factory):
    nodes = make_cluster(broker_factory)
    for n in nodes.values():
        n.env.update(ENV)
        n.env["QUEEN_DEDUP_HOT_IDS"] = str(HOT)
        spawn(n)
    with httpx.Client(timeout=10.0) as http:
        views = wait_settled(http, nodes)
        lead = next(i for i, v in views.items() if v["role"] == "leader")
        base = nodes[lead].url
        configure(http, base, AGED, retentionEnabled=True, retentionSeconds=1)
        configure(http, base, DEDUP, dedupWindowSeconds=3600)
        push(http, base, AGED, [f"before-{i}" for i in range(5)])
        stopped_id = next(i for i in nodes if i != lead)
        other_id = next(i for i in nodes if i not in (lead, stopped_id))
        stopped = nodes[stopped_id]
        target = raft_of(http, nodes[lead])["applied"]
        wait_for(lambda: (raft_of(http, stopped) or {}).get("applied", 0) >= target,
                 "the follower never applied the first pushes")
        had = raft_of(http, stopped)["lastLogIndex"]

        stopped.proc.send_signal(signal.SIGSTOP)
        try:
            round_no = 0
            while first_index(nodes[lead]) <= had:
                assert round_no < 300, f"the leader never reclaimed past {had}"
                push(http, base, AGED, [f"f{round_no}-{i}" for i in range(PER_PUSH)], FILLER)
                round_no += 1
                time.sleep(0.1)
            # Ids the stopped follower never applies itself: the first ones leave the hot
            # table for the leader's id files as the later ones come.
            ids = [f"dup-{i}" for i in range(4 * HOT)]
            for t in ids:
                assert push_once(http, base, DEDUP, t)["status"] == "queued"
            # A checkpoint (every second) past all of them, so the snapshot covers them.
            applied = raft_of(http, nodes[lead])["applied"]
            time.sleep(3.0)
            push(http, base, AGED, ["after-checkpoint"])
            assert raft_of(http, nodes[lead])["applied"] > applied
            assert installs(http, stopped) == 0
        finally:
            stopped.proc.send_signal(signal.SIGCONT)

        wait_for(lambda: installs(http, stopped) >= 1, "the follower installed no snapshot")
        target = raft_of(http, nodes[lead])["applied"]
        wait_for(lambda: (raft_of(http, stopped) or {}).get("applied", 0) >= target,
                 "the follower never caught up after the snapshot")

        # Only the caught-up node can lead: the other follower is killed, a write lands on the
        # caught-up node, then the leader goes and the other comes back behind it.
        nodes[other_id].kill()
        push(http, base, AGED, ["last-before-failover"])
        target = raft_of(http, nodes[lead])["applied"]
        wait_for(lambda: (raft_of(http, stopped) or {}).get("applied", 0) >= target,
                 "the caught-up follower did not apply the last write")
        nodes[lead].kill()
        spawn(nodes[other_id])
        views = wait_settled(http, {stopped_id: stopped, other_id: nodes[other_id]})
        assert views[stopped_id]["role"] == "leader", views
        base = stopped.url

        # The oldest ids were spilled by the old leader before the snapshot: a repeat is a
        # duplicate on the node that only knows them from the snapshot's id files.
        for t in ids[:HOT]:
            got = push_once(http, base, DEDUP, t)
            assert got["status"] == "duplicate", (t, got)
        assert stopped.proc.poll() is None, stopped.log_tail()
        assert "snapshot staged" in stopped.log_text(), stopped.log_tail(80)
