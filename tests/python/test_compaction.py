"""The compactor against the real binary: a queue without retention holding a few old
messages no longer pins the log. Under a steady load on a queue with retention, the segment
holding the old messages is compacted (its live runs copied forward) and deleted while the
load runs, the log stays bounded, and every old message is still popped with its id and
payload, also after kill -9 and a restart (docs/storage-format.md "Pinning and the
compactor").

Segments are 1 MiB, checkpoints come every second and retention sweeps every 50 ms at its
floor of 1 s. Nothing is timed: every check polls for the expected state with a deadline.
"""

import time

import httpx

import queen_api
from segments import segment_files

ENV = {
    "QUEEN_RETENTION_INTERVAL_MS": "50",
    "QUEEN_CHECKPOINT_INTERVAL_SECS": "1",
    "QUEEN_SEGMENT_BYTES": str(1 << 20),
}
DEADLINE_S = 60.0
MIB = 1 << 20
# 16 KiB payloads, 16 to a push: a push is a quarter of a segment.
FILLER = "x" * (16 << 10)
PER_PUSH = 16
# Pushes the load makes at most: 64 MiB, far more than the bound the log must stay under.
MAX_PUSHES = 256


def configure(http: httpx.Client, queue: str, **options) -> None:
    res = http.post("/api/v1/configure", json={"queue": queue, "options": options})
    assert res.status_code == 200, res.text


def metric(http: httpx.Client, name: str) -> float:
    text = http.get("/metrics/prometheus").text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + "{") or line.startswith(name + " ")
    )


def log_bytes(data_dir) -> int:
    return sum(p.stat().st_size for p in segment_files(data_dir))


def wait_until(check, label: str, seconds: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, label
        time.sleep(0.1)


def push_load(http: httpx.Client, base: str, n: int) -> None:
    items = [queen_api.item("cp-age", "p", f"age-{n}-{i}", {"fill": FILLER}) for i in range(PER_PUSH)]
    assert all(queen_api.accepted(r) for r in queen_api.push(http, base, items))


def read_kept(http: httpx.Client, base: str, group: str) -> dict[str, tuple[str, dict]]:
    """transactionId -> (message id, payload) of every cp-keep message a fresh group reads."""
    out = {}
    while True:
        got = queen_api.pop(http, base, "cp-keep", group=group, batch=100, wait=False, mode="all")
        if not got:
            return out
        out.update({m["transactionId"]: (m["id"], m["data"]) for m in got})
        assert all(r["success"] for r in queen_api.ack_batch(http, base, got, group))


def test_old_messages_of_a_queue_without_retention_stop_pinning_the_log(broker_factory):
    broker = broker_factory("compaction", env=ENV).start()
    with httpx.Client(base_url=broker.url, timeout=15.0) as http:
        base = broker.url
        configure(http, "cp-age", retentionEnabled=True, retentionSeconds=1)
        configure(http, "cp-keep")
        kept_items = [
            queen_api.item("cp-keep", "p", f"keep-{i}", {"n": i, "note": "old and held"})
            for i in range(5)
        ]
        answer = queen_api.push(http, base, kept_items)
        assert all(queen_api.accepted(r) for r in answer)
        kept = {r["transactionId"]: (r["message_id"], it["payload"]) for r, it in zip(answer, kept_items)}
        first_segment = segment_files(broker.data_dir)[0].name

        # The load runs until the segment the kept messages were written to was compacted
        # and deleted; without the compactor they would pin it, and every later one.
        pushes = 0
        while segment_files(broker.data_dir)[0].name == first_segment:
            assert pushes < MAX_PUSHES, "the pinned first segment was never deleted under load"
            push_load(http, base, pushes)
            pushes += 1
        assert metric(http, "queen_compaction_segments_total") >= 1
        assert metric(http, "queen_compaction_bytes_copied_total") > 0
        # More load, then none: the log shrinks to the few segments appends and the last
        # checkpoints still need, though cp-keep's messages are older than all of it.
        for n in range(pushes, pushes + 32):
            push_load(http, base, n)
        assert (pushes + 32) * PER_PUSH * len(FILLER) > 8 * MIB
        wait_until(lambda: log_bytes(broker.data_dir) <= 4 * MIB, "the log shrank to a bound")

        assert read_kept(http, base, "before") == kept
        after = log_bytes(broker.data_dir)

    broker.kill()
    broker.start()
    with httpx.Client(base_url=broker.url, timeout=15.0) as http:
        assert log_bytes(broker.data_dir) <= after + MIB, "deleted segments stayed deleted"
        assert read_kept(http, broker.url, "after") == kept
