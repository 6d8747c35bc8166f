"""The compactor against the real binary: a queue without retention holding a few old
messages no longer pins the log. Under a steady load on a queue with retention, the segment
holding the old messages is compacted (its live runs copied forward) and deleted while the
load runs, the log stays bounded, and every old message is still popped with its id and
payload, also after kill -9 and a restart (docs/storage-format.md "Pinning and the
compactor").

Segments are 1 MiB, checkpoints come every second and retention sweeps every 50 ms at its
floor of 1 s (the smallest each key takes). Nothing is timed: the load runs until the
compactor's work shows on disk, bounded only by a generous deadline and push count that fail
with what was seen, so a slow or loaded machine needs more time, never a different result.
"""

import time

import httpx

import queen_api
from segments import segment_files
# The same small segments, fast checkpoints and retention sweeps, load and polling as the
# reclamation test.
from test_space import ENV, FILLER, MIB, configure, log_bytes, wait_until

# The load: pushes of 4 messages of 16 KiB (a segment every 16 pushes), paced so that it
# spans checkpoints rather than racing them: the pinned segment goes after a few checkpoints
# of 1 s whatever the push rate, so the pace bounds the disk a broken compactor would fill
# (at most MAX_PUSHES pushes, 160 MiB) without making a slow machine fail.
LOAD_BATCH = 4
LOAD_PAUSE_S = 0.02
MAX_PUSHES = 2560
LOAD_DEADLINE_S = 90.0


def metric(http: httpx.Client, name: str) -> float:
    text = http.get("/metrics/prometheus").text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + "{") or line.startswith(name + " ")
    )


def push_load(http: httpx.Client, base: str, n: int) -> None:
    items = [queen_api.item("cp-age", "p", f"age-{n}-{i}", {"fill": FILLER}) for i in range(LOAD_BATCH)]
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
        # Exported at 0 before any copy (review C8).
        scraped = http.get("/metrics/prometheus").text
        for series in ("queen_compaction_bytes_copied_total", "queen_compaction_segments_total"):
            assert f"{series}{{" in scraped, series
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
        started = time.monotonic()
        while segment_files(broker.data_dir)[0].name == first_segment:
            elapsed = time.monotonic() - started
            assert pushes < MAX_PUSHES and elapsed < LOAD_DEADLINE_S, (
                f"the pinned first segment {first_segment} was not deleted after {pushes} pushes"
                f" in {elapsed:.0f} s: {len(segment_files(broker.data_dir))} segments,"
                f" {log_bytes(broker.data_dir)} bytes, compacted segments"
                f" {metric(http, 'queen_compaction_segments_total')}, bytes copied"
                f" {metric(http, 'queen_compaction_bytes_copied_total')}, segments deleted"
                f" {metric(http, 'queen_log_segments_deleted_total')}"
            )
            push_load(http, base, pushes)
            pushes += 1
            time.sleep(LOAD_PAUSE_S)
        assert metric(http, "queen_compaction_segments_total") >= 1
        assert metric(http, "queen_compaction_bytes_copied_total") > 0
        # More load, then none: the log shrinks to the few segments appends and the last
        # checkpoints still need, though cp-keep's messages are older than all of it.
        for n in range(pushes, pushes + 128):
            push_load(http, base, n)
        assert (pushes + 128) * LOAD_BATCH * len(FILLER) > 8 * MIB
        wait_until(
            lambda: log_bytes(broker.data_dir) <= 4 * MIB,
            "the log shrank to a bound",
            seconds=LOAD_DEADLINE_S,
        )

        assert read_kept(http, base, "before") == kept
        after = log_bytes(broker.data_dir)

    broker.kill()
    broker.start()
    with httpx.Client(base_url=broker.url, timeout=15.0) as http:
        assert log_bytes(broker.data_dir) <= after + MIB, "deleted segments stayed deleted"
        assert read_kept(http, broker.url, "after") == kept


def test_a_kill_between_the_copy_and_the_deletion_of_the_old_segment_loses_nothing(broker_factory):
    """Review C10: kill -9 after the copy is committed and before the checkpoints that let
    the old segment go. RECLAIM_PAUSED, created as soon as the first segment is compacted,
    holds the old segment (and stops the compactor) across the kill: the restart replays the
    copy over the checkpoint before it, the kept messages read back unchanged, and once the
    pause is lifted the old segment goes and they still do."""
    broker = broker_factory("compaction-kill", env=ENV).start()
    pause = broker.data_dir / "RECLAIM_PAUSED"
    with httpx.Client(base_url=broker.url, timeout=15.0) as http:
        base = broker.url
        configure(http, "cp-age", retentionEnabled=True, retentionSeconds=1)
        configure(http, "cp-keep")
        kept_items = [
            queen_api.item("cp-keep", "p", f"keep-{i}", {"n": i, "note": "copied, then killed"})
            for i in range(5)
        ]
        answer = queen_api.push(http, base, kept_items)
        assert all(queen_api.accepted(r) for r in answer)
        kept = {r["transactionId"]: (r["message_id"], it["payload"]) for r, it in zip(answer, kept_items)}
        first_segment = segment_files(broker.data_dir)[0].name

        pushes = 0
        started = time.monotonic()
        while metric(http, "queen_compaction_segments_total") < 1:
            elapsed = time.monotonic() - started
            assert pushes < MAX_PUSHES and elapsed < LOAD_DEADLINE_S, (
                f"no segment was compacted after {pushes} pushes in {elapsed:.0f} s: skipped"
                f" {metric(http, 'queen_compaction_skipped_total')}, bytes copied"
                f" {metric(http, 'queen_compaction_bytes_copied_total')}"
            )
            push_load(http, base, pushes)
            pushes += 1
            time.sleep(LOAD_PAUSE_S)
        pause.write_text("hold the compacted segment across the kill\n")

    broker.kill()
    # The old segment goes two checkpoints after the copy: the pause came first, so the kill
    # landed between the committed copy and the deletion.
    assert first_segment in [p.name for p in segment_files(broker.data_dir)], (
        "the compacted segment was deleted before the pause: the kill missed the window"
    )
    broker.start()
    with httpx.Client(base_url=broker.url, timeout=15.0) as http:
        base = broker.url
        assert read_kept(http, base, "after-kill") == kept
        pause.unlink()
        ticks = iter(range(1 << 20))

        def old_segment_gone() -> bool:
            # Checkpoints are written only when something was applied.
            push_load(http, base, 100_000 + next(ticks))
            return first_segment not in [p.name for p in segment_files(broker.data_dir)]

        wait_until(old_segment_gone, "the compacted segment deleted once the pause is lifted")
        assert read_kept(http, base, "after-deletion") == kept
