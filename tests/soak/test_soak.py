"""The soak test of issue 12: minutes of steady push + pop + ack against the real binary, with
retention of 30 s on one queue and none on a small other one, then kill -9 under the load.

What it checks (docs/storage-format.md "Space reclamation", "Pinning and the compactor"), the
segments (`log/*.qlog`) and the rest of the directory (state store, checkpoints) apart, as the
rest grows by design for the whole run (every transaction id stays in the dedup window):
- the load reached at least half its planned rate after the warm-up, else every bound below
  would be vacuous, and RECORD_BYTES is a ceiling of what the broker wrote per message;
- after the warm-up the segments never exceed what the messages answered in the last retention
  window (plus the reclamation lag) take, plus SEGMENT_SLACK: the bound follows the rate the
  load achieved, not the planned one;
- the segments level off: the least-squares slope of their size over the settled part of the
  run, times its length, stays within SLOPE_SLACK (a leak of a fifth of the write rate grows
  by tens of MiB over the default run);
- the rest stays within the transaction ids answered × STATE_BYTES_PER_ID plus STATE_SLACK;
- segments are deleted while the load runs, at least as many after the warm-up as the bytes
  written since (at least a payload per message) less the segment bound take
  (`queen_log_segments_deleted_total`), and the segment holding the kept queue's few old
  messages is compacted away (`queen_compaction_segments_total`): they would otherwise pin
  every later segment;
- kill -9 while the producer and the consumer run loses nothing acknowledged: every kept
  message is still there with its payload, every consumed message whose ack was answered is
  never delivered again, and every retained message whose push was answered and that was
  not delivered before the kill (a lease may hold those) is delivered, unless it was older
  than the retention window when it was looked for.

Length: SOAK_SECONDS (default 600, at least MIN_SOAK_S); the warm-up and the sampling scale
with it. Nothing is timed: the load is paced, the sizes are sampled, and every wait polls with
a deadline.
"""

from __future__ import annotations

import os
import sys
import threading
from bisect import bisect_left, bisect_right
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts" / "lib"))
sys.path.insert(0, str(REPO / "tests" / "python"))

import queen_api  # noqa: E402
from queen_api import metric  # noqa: E402
from queen_broker import Broker  # noqa: E402

SOAK_SECONDS = float(os.environ.get("SOAK_SECONDS", "600"))
RETENTION_S = 30
CHECKPOINT_S = 5
MIB = 1 << 20
SEGMENT_BYTES = MIB
ENV = {
    "QUEEN_SEGMENT_BYTES": str(SEGMENT_BYTES),
    "QUEEN_CHECKPOINT_INTERVAL_SECS": str(CHECKPOINT_S),
    "QUEEN_RETENTION_INTERVAL_MS": "1000",
}
# The load: a push of BATCH messages of 1 KiB every PUSH_PAUSE_S, about 200 msg/s.
BATCH = 20
PUSH_PAUSE_S = 0.1
PLANNED_RATE = BATCH / PUSH_PAUSE_S
FILL = "s" * 1024
# One kept message every KEEP_EVERY pushes: a queue that is never consumed and never expires.
KEEP_EVERY = 300
# How long the producer runs alone before the kill: the answered pushes the check looks for.
TAIL_S = 5.0
# How long a message past the retention window may still hold its segment: the sweep (1 s)
# removes it from the state, a segment goes only below the floor of an earlier checkpoint (two
# checkpoint intervals), and a checkpoint and a sample take a while on a loaded runner (the
# lag measured on a 2-core machine shared by four builds was 13 s).
RECLAIM_LAG_S = 2 * CHECKPOINT_S + 5
# The warm-up covers the first window and its lag: before it the directory only fills.
MIN_WARM_UP_S = RETENTION_S + RECLAIM_LAG_S
MIN_SOAK_S = 2 * MIN_WARM_UP_S
# Log bytes per message answered (its record's share: payload, JSON envelope, frame, and the
# pop and ack entries that follow it), a ceiling the run checks against what the broker says it
# wrote (`queen_log_fsync_bytes`; 1 181 to 1 213 measured at 153 to 165 msg/s: smaller pop
# batches on a slower runner cost a little more per message).
RECORD_BYTES = 1536
# Segments beyond the window's records: the active segment, the oldest (deleted whole, once its
# newest message goes) and one pinned by a kept message until the compactor copies it away.
SEGMENT_SLACK = 3 * SEGMENT_BYTES
# What the segments may grow by over the settled part of the run (least-squares slope times its
# length): two segments, the granularity of reclamation.
SLOPE_SLACK = 2 * SEGMENT_BYTES
# The rest of the directory per transaction id answered (its dedup row in the checkpoints redb
# keeps, about 100 B measured, twice over: redb doubles its file as it grows), and beyond the
# ids. The default run ends at about 8.5 MiB for 100 000 ids.
STATE_BYTES_PER_ID = 256
STATE_SLACK = 4 * MIB


def dir_bytes(root: Path) -> tuple[int, int]:
    """(segment bytes, everything else) under `root`."""
    segments = rest = 0
    for dirpath, _, files in os.walk(root):
        for f in files:
            try:
                size = (Path(dirpath) / f).stat().st_size
            except FileNotFoundError:
                continue  # deleted between the listing and the stat
            if f.endswith(".qlog"):
                segments += size
            else:
                rest += size
    return segments, rest


def slope(points: list[tuple[float, int]]) -> float:
    """Least-squares slope of `points` (bytes per second)."""
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mb = sum(b for _, b in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    return sum((t - mt) * (b - mb) for t, b in points) / var if var else 0.0


class Load:
    """A producer and a consumer thread against one broker URL, recording what was answered."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.stop = threading.Event()
        self.stop_consumer = threading.Event()
        self.lock = threading.Lock()
        self.pushed_age: dict[str, float] = {}  # txn -> when its push was answered
        self.kept: dict[str, dict] = {}  # txn -> payload, answered
        self.acked: set[str] = set()  # age txns whose ack was answered success
        self.popped: set[str] = set()  # age txns delivered (a lease may hold them after a kill)
        self.errors: list[str] = []
        self.threads = [
            threading.Thread(target=self._produce, daemon=True),
            threading.Thread(target=self._consume, daemon=True),
        ]

    def start(self) -> "Load":
        for t in self.threads:
            t.start()
        return self

    def halt(self) -> None:
        self.stop.set()
        self.stop_consumer.set()
        for t in self.threads:
            t.join(timeout=60)

    def halt_consumer(self) -> None:
        """Stops the consumer after its last ack was answered: no lease of it outlives the
        kill (a queue-mode pop leases its partition for 300 s, which a restart keeps)."""
        self.stop_consumer.set()
        self.threads[1].join(timeout=60)

    def _produce(self) -> None:
        n = 0
        with httpx.Client(timeout=15.0) as http:
            while not self.stop.is_set():
                items = [
                    queen_api.item("soak-age", f"p{i % 4}", f"age-{n}-{i}", {"n": n, "fill": FILL})
                    for i in range(BATCH)
                ]
                keep = None
                if n % KEEP_EVERY == 0:
                    keep = queen_api.item("soak-keep", "k", f"keep-{n}", {"n": n, "kept": True})
                    items.append(keep)
                sent = time.monotonic()
                try:
                    answer = queen_api.push(http, self.url, items)
                except (httpx.HTTPError, AssertionError):
                    # Killed under the load: an unanswered push promises nothing.
                    if not self.stop.is_set():
                        time.sleep(0.05)
                    continue
                with self.lock:
                    for it, r in zip(items, answer):
                        if not queen_api.accepted(r):
                            self.errors.append(f"push of {it['transactionId']} refused: {r}")
                        elif it is keep:
                            self.kept[it["transactionId"]] = it["payload"]
                        else:
                            self.pushed_age[it["transactionId"]] = sent
                n += 1
                self.stop.wait(PUSH_PAUSE_S)

    def _consume(self) -> None:
        with httpx.Client(timeout=15.0) as http:
            while not self.stop_consumer.is_set():
                try:
                    got = queen_api.pop(http, self.url, "soak-age", batch=200, wait=True, timeout_ms=500)
                    if not got:
                        continue
                    with self.lock:
                        self.popped.update(m["transactionId"] for m in got)
                    results = queen_api.ack_batch(http, self.url, got, None)
                except (httpx.HTTPError, AssertionError):
                    if not self.stop_consumer.is_set():
                        time.sleep(0.05)
                    continue
                with self.lock:
                    for m, r in zip(got, results):
                        if r.get("success"):
                            self.acked.add(m["transactionId"])


def answered_between(times: list[float], lo: float, hi: float) -> int:
    """How many of the sorted `times` lie in [lo, hi]."""
    return bisect_right(times, hi) - bisect_left(times, lo)


def test_the_data_directory_levels_off_under_a_steady_load_and_kill_9_loses_nothing(tmp_path):
    assert SOAK_SECONDS >= MIN_SOAK_S, (
        f"SOAK_SECONDS={SOAK_SECONDS:g} is below {MIN_SOAK_S} s: the warm-up alone (the "
        f"retention window and its reclamation lag, {MIN_WARM_UP_S} s) needs half of that"
    )
    # The warm-up and the sampling scale with the length: 120 s and every 5 s for the default.
    warm_up = max(MIN_WARM_UP_S, min(4 * RETENTION_S, SOAK_SECONDS / 2))
    sample_every = min(5.0, SOAK_SECONDS / 90)
    data = tmp_path / "data"
    broker = Broker(data, tmp_path / "logs", name="soak", env=ENV).start()
    try:
        with httpx.Client(base_url=broker.url, timeout=15.0) as http:
            for queue, options in (
                ("soak-age", {"retentionEnabled": True, "retentionSeconds": RETENTION_S}),
                ("soak-keep", {}),
            ):
                res = http.post("/api/v1/configure", json={"queue": queue, "options": options})
                assert res.status_code == 200, res.text

        load = Load(broker.url).start()
        # (seconds since the start, segment bytes, other bytes)
        samples: list[tuple[float, int, int]] = []
        started = time.monotonic()
        with httpx.Client(base_url=broker.url, timeout=15.0) as http:
            deleted_at_warm_up = None
            while time.monotonic() - started < SOAK_SECONDS:
                time.sleep(sample_every)
                at = time.monotonic() - started
                samples.append((at, *dir_bytes(data)))
                if deleted_at_warm_up is None and at >= warm_up:
                    deleted_at_warm_up = metric(http, "queen_log_segments_deleted_total")
                assert broker.proc is not None and broker.proc.poll() is None, "the broker died"
            ended = time.monotonic() - started
            deleted_end = metric(http, "queen_log_segments_deleted_total")
            compacted = metric(http, "queen_compaction_segments_total")
            written = metric(http, "queen_log_fsync_bytes_sum")

        # Kill -9 under the producer's load, the consumer stopped first so that a few seconds
        # of answered pushes wait unconsumed, then restart on the same directory.
        load.halt_consumer()
        with load.lock:
            answered = sorted(t - started for t in load.pushed_age.values())
            kept_count = len(load.kept)
        time.sleep(TAIL_S)
        broker.kill()
        load.halt()
        assert not load.errors, load.errors[:5]
        broker.start()

        trace = [(round(t), round(seg / MIB, 1), round(rest / MIB, 1)) for t, seg, rest in samples]
        settled = [(t, seg, rest) for t, seg, rest in samples if t >= warm_up]
        assert len(settled) >= 10, f"only {len(settled)} samples after the warm-up of {warm_up:g} s"

        rate = answered_between(answered, warm_up, ended) / (ended - warm_up)
        assert rate >= PLANNED_RATE / 2, (
            f"load not reached: {rate:.0f} msg/s answered after the warm-up, planned "
            f"{PLANNED_RATE:.0f}; the bounds below would check too little"
        )
        messages = len(answered) + kept_count
        per_message = written / messages
        assert per_message <= RECORD_BYTES, (
            f"the broker wrote {per_message:.0f} log bytes per message answered, above "
            f"RECORD_BYTES={RECORD_BYTES}: the segment bound below is no ceiling"
        )

        # Segments: what the last window's answered messages take, at every settled sample.
        for t, seg, _ in settled:
            window = answered_between(answered, t - RETENTION_S - RECLAIM_LAG_S, t)
            bound = window * RECORD_BYTES + SEGMENT_SLACK
            assert seg <= bound, (
                f"the segments held {seg / MIB:.1f} MiB at {t:.0f} s, over the bound of "
                f"{bound / MIB:.1f} MiB ({window} messages answered in the last "
                f"{RETENTION_S + RECLAIM_LAG_S} s); samples (s, segment MiB, other MiB): {trace}"
            )
        span = settled[-1][0] - settled[0][0]
        growth = slope([(t, seg) for t, seg, _ in settled]) * span
        assert growth <= SLOPE_SLACK, (
            f"the segments still grow: {growth / MIB:.1f} MiB over the {span:.0f} s after the "
            f"warm-up by their least-squares slope (slack {SLOPE_SLACK / MIB:.0f} MiB); "
            f"samples: {trace}"
        )
        # The rest: the ids answered so far, at every settled sample.
        for t, _, rest in settled:
            ids = answered_between(answered, 0, t) + kept_count
            bound = ids * STATE_BYTES_PER_ID + STATE_SLACK
            assert rest <= bound, (
                f"the state and checkpoints held {rest / MIB:.1f} MiB at {t:.0f} s, over "
                f"{bound / MIB:.1f} MiB for {ids} ids; samples: {trace}"
            )

        # Deletions after the warm-up: each message took at least its payload on disk, and
        # what was written since is gone but for what the bound lets stay.
        after = answered_between(answered, warm_up, ended)
        must_delete = int((after * len(FILL) - (max(s for _, s, _ in settled))) // SEGMENT_BYTES)
        assert deleted_at_warm_up is not None and deleted_end - deleted_at_warm_up >= max(
            1, must_delete
        ), (
            f"{deleted_end - deleted_at_warm_up:.0f} segments deleted after the warm-up while "
            f"{after} messages (at least {after * len(FILL) / MIB:.1f} MiB) were written; "
            f"at least {max(1, must_delete)} expected"
        )
        assert compacted >= 1, "the segment pinned by the kept queue was never compacted"
        print(
            f"soak: {SOAK_SECONDS:g} s, warm-up {warm_up:g} s, {rate:.0f} msg/s, "
            f"{per_message:.0f} log bytes per message, segments deleted "
            f"{deleted_end:.0f} ({deleted_end - deleted_at_warm_up:.0f} after the warm-up), "
            f"compacted {compacted:.0f}; samples (s, segment MiB, other MiB): {trace}"
        )

        with httpx.Client(base_url=broker.url, timeout=15.0) as http:
            # Every kept message, with its payload.
            seen: dict[str, dict] = {}
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                got = queen_api.pop(http, broker.url, "soak-keep", group="soak-check", mode="all",
                                    batch=500, wait=False)
                if not got:
                    break
                seen.update({m["transactionId"]: m["data"] for m in got})
                assert all(r["success"] for r in queen_api.ack_batch(http, broker.url, got, "soak-check"))
            missing = set(load.kept) - set(seen)
            assert not missing, f"{len(missing)} acknowledged kept messages lost: {sorted(missing)[:5]}"
            assert all(seen[t] == p for t, p in load.kept.items())

            # The retained queue: no acknowledged ack undone, no answered push lost while young.
            delivered: set[str] = set()
            while True:
                got = queen_api.pop(http, broker.url, "soak-age", batch=500, wait=False)
                if not got:
                    break
                delivered.update(m["transactionId"] for m in got)
                queen_api.ack_batch(http, broker.url, got, None)
            looked = time.monotonic()
            again = delivered & load.acked
            assert not again, f"{len(again)} messages delivered again after their ack was answered"
            checked = [
                t for t, when in load.pushed_age.items()
                if t not in load.popped and looked - when < RETENTION_S - 2
            ]
            assert len(checked) >= 100, f"only {len(checked)} unconsumed young pushes to check"
            young_lost = [
                t for t, when in load.pushed_age.items()
                if t not in load.popped and t not in delivered and looked - when < RETENTION_S - 2
            ]
            assert not young_lost, (
                f"{len(young_lost)} answered pushes lost while younger than the retention: "
                f"{young_lost[:5]}"
            )
    finally:
        broker.stop()
