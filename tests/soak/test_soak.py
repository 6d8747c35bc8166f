"""The soak test of issue 12: minutes of steady push + pop + ack against the real binary, with
retention of 30 s on one queue and none on a small other one, then kill -9 under the load.

What it checks (docs/storage-format.md "Space reclamation", "Pinning and the compactor"):
- the data directory stops growing: after the warm-up its size never exceeds what the
  retention window holds plus a stated slack (`bound_bytes`), and its largest size in the
  last third of the run is no larger than in the middle third plus one slack;
- segments are deleted while the load runs (`queen_log_segments_deleted_total`), and the
  segment holding the kept queue's few old messages is compacted away
  (`queen_compaction_segments_total`): they would otherwise pin every later segment;
- kill -9 while the producer and the consumer run loses nothing acknowledged: every kept
  message is still there with its payload, every consumed message whose ack was answered is
  never delivered again, and every retained message whose push was answered and that was
  not delivered before the kill (a lease may hold those) is delivered, unless it was older
  than the retention window when it was looked for.

Length: SOAK_SECONDS (default 600). Nothing is timed: the load is paced, the sizes are
sampled, and every wait polls with a deadline.
"""

from __future__ import annotations

import os
import sys
import threading
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
MIB = 1 << 20
SEGMENT_BYTES = MIB
ENV = {
    "QUEEN_SEGMENT_BYTES": str(SEGMENT_BYTES),
    "QUEEN_CHECKPOINT_INTERVAL_SECS": "5",
    "QUEEN_RETENTION_INTERVAL_MS": "1000",
}
# The load: a push of BATCH messages of 1 KiB every PUSH_PAUSE_S, about 200 msg/s.
BATCH = 20
PUSH_PAUSE_S = 0.1
FILL = "s" * 1024
# One kept message every KEEP_EVERY pushes: a queue that is never consumed and never expires.
KEEP_EVERY = 300
SAMPLE_EVERY_S = 5.0
# How long the producer runs alone before the kill: the answered pushes the check looks for.
TAIL_S = 5.0
# What the directory may hold beyond the retention window's records: the segments a checkpoint
# and a sweep have not let go yet (two checkpoint intervals and a sweep at the load's rate),
# the active segment, the kept queue's copied runs, the checkpoint files and the state store.
SLACK_BYTES = 24 * MIB
# A record's bytes on disk per message pushed (payload, JSON envelope, frame), measured
# generously: the bound is a ceiling, not a guess of the exact size.
RECORD_BYTES = 2048


def bound_bytes() -> int:
    rate = BATCH / PUSH_PAUSE_S
    return int(RETENTION_S * rate * RECORD_BYTES) + SLACK_BYTES


def dir_bytes(root: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(root):
        for f in files:
            try:
                total += (Path(dirpath) / f).stat().st_size
            except FileNotFoundError:
                pass  # deleted between the listing and the stat
    return total


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


def test_the_data_directory_levels_off_under_a_steady_load_and_kill_9_loses_nothing(tmp_path):
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
        samples: list[tuple[float, int]] = []
        started = time.monotonic()
        warm_up = max(4 * RETENTION_S, SOAK_SECONDS / 5)
        with httpx.Client(base_url=broker.url, timeout=15.0) as http:
            deleted_at_warm_up = None
            while time.monotonic() - started < SOAK_SECONDS:
                time.sleep(SAMPLE_EVERY_S)
                at = time.monotonic() - started
                samples.append((at, dir_bytes(data)))
                if deleted_at_warm_up is None and at >= warm_up:
                    deleted_at_warm_up = metric(http, "queen_log_segments_deleted_total")
                assert broker.proc is not None and broker.proc.poll() is None, "the broker died"
            deleted_end = metric(http, "queen_log_segments_deleted_total")
            compacted = metric(http, "queen_compaction_segments_total")

        # Kill -9 under the producer's load, the consumer stopped first so that a few seconds
        # of answered pushes wait unconsumed, then restart on the same directory.
        load.halt_consumer()
        time.sleep(TAIL_S)
        broker.kill()
        load.halt()
        assert not load.errors, load.errors[:5]
        broker.start()

        bound = bound_bytes()
        settled = [(t, b) for t, b in samples if t >= warm_up]
        assert settled, "the run is shorter than its warm-up"
        worst = max(settled, key=lambda s: s[1])
        assert worst[1] <= bound, (
            f"the data directory held {worst[1] / MIB:.1f} MiB at {worst[0]:.0f} s, over the "
            f"bound of {bound / MIB:.1f} MiB; samples (s, MiB): "
            f"{[(round(t), round(b / MIB, 1)) for t, b in samples]}"
        )
        third = SOAK_SECONDS / 3
        middle = [b for t, b in samples if third <= t < 2 * third]
        last = [b for t, b in samples if t >= 2 * third]
        assert middle and last
        assert max(last) <= max(middle) + SLACK_BYTES, (
            f"still growing: largest {max(middle) / MIB:.1f} MiB in the middle third, "
            f"{max(last) / MIB:.1f} MiB in the last"
        )
        assert deleted_at_warm_up is not None and deleted_end > deleted_at_warm_up, (
            "no segment was deleted after the warm-up while the load ran"
        )
        assert compacted >= 1, "the segment pinned by the kept queue was never compacted"

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
