"""Producers and three consumers (two groups and queue mode) run together.

For DURATION seconds (QUEEN_CONCURRENCY_SECONDS, default and minimum 60)
producers push to PARTITIONS partitions of one queue, each request spanning
several partitions, while two named groups (subscriptionMode=all) and queue
mode pop multi-partition batches with long polls and ack them. After the
producers stop, the consumers drain. Each of the three must have received every
accepted message exactly once, in push order per partition, nothing skipped.
"""

import os
import random
import threading
import time
from collections import Counter, defaultdict

import httpx
import pytest

import queen_api

QUEUE = "concurrency"
PARTITIONS = [f"lane-{i:02d}" for i in range(64)]
PRODUCERS = 4
RATE_PER_PRODUCER = 200  # messages per second
CONSUMER_KINDS = {"conc-a": "conc-a", "conc-b": "conc-b", "queue-mode": None}
THREADS_PER_KIND = 2
DURATION = max(60.0, float(os.environ.get("QUEEN_CONCURRENCY_SECONDS", "60")))
DRAIN_S = 90.0


class Ledger:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.accepted = defaultdict(list)  # partition -> seqs answered queued/duplicate, in order
        self.uncertain = defaultdict(set)  # partition -> seqs answered "failed" or never answered
        self.arrivals = 0
        self.received = {kind: [] for kind in CONSUMER_KINDS}  # kind -> [(arrival, partition, seq)]
        self.errors = []

    def error(self, where: str, error: object) -> None:
        with self.lock:
            self.errors.append(f"{where}: {error!r}")

    def unique_received(self, kind: str) -> int:
        with self.lock:
            return len({(p, s) for _, p, s in self.received[kind]})


def produce(n: int, base: str, ledger: Ledger, stop: threading.Event) -> None:
    rng = random.Random(n)
    owned = PARTITIONS[n::PRODUCERS]
    next_seq = dict.fromkeys(owned, 0)
    sent, started = 0, time.monotonic()
    with httpx.Client(timeout=15.0) as http:
        while not stop.is_set():
            items, seqs = [], []
            for partition in rng.sample(owned, rng.randint(1, 4)):
                for _ in range(rng.randint(1, 5)):
                    seq = next_seq[partition]
                    next_seq[partition] += 1
                    seqs.append((partition, seq))
                    items.append(queen_api.item(QUEUE, partition, f"{partition}-{seq}",
                                                {"p": partition, "seq": seq}))
            results = None
            for _attempt in range(5):  # resend the same body: dedup makes it idempotent
                try:
                    results = queen_api.push(http, base, items)
                    break
                except (httpx.TransportError, httpx.HTTPStatusError) as error:
                    ledger.error(f"producer {n} push", error)
                    time.sleep(0.2)
            with ledger.lock:
                for (partition, seq), result in zip(seqs, results or [{}] * len(seqs)):
                    if queen_api.accepted(result):
                        ledger.accepted[partition].append(seq)
                    else:
                        ledger.uncertain[partition].add(seq)
            sent += len(items)
            time.sleep(max(0.0, started + sent / RATE_PER_PRODUCER - time.monotonic()))


def consume(kind: str, n: int, base: str, ledger: Ledger, stop: threading.Event) -> None:
    group = CONSUMER_KINDS[kind]
    mode = "all" if group else None
    with httpx.Client(timeout=15.0) as http:
        while not stop.is_set():
            try:
                messages = queen_api.pop(http, base, QUEUE, group=group, mode=mode, batch=50,
                                         partitions=4, wait=True, timeout_ms=1000)
            except (httpx.TransportError, httpx.HTTPStatusError) as error:
                ledger.error(f"{kind} consumer {n} pop", error)
                time.sleep(0.2)
                continue
            if not messages:
                continue
            with ledger.lock:
                ledger.arrivals += 1
                ledger.received[kind] += [(ledger.arrivals, m["data"]["p"], m["data"]["seq"])
                                          for m in messages]
            try:
                results = queen_api.ack_batch(http, base, messages, group)
            except (httpx.TransportError, httpx.HTTPStatusError) as error:
                ledger.error(f"{kind} consumer {n} ack", error)
                continue
            refused = [r for r in results if not r.get("success")]
            if refused:
                ledger.error(f"{kind} consumer {n} ack", refused[:3])


@pytest.mark.timeout(DURATION + DRAIN_S + 120)
def test_two_groups_and_queue_mode_each_get_every_message_once_in_order(broker):
    ledger = Ledger()
    stop_producing, stop_consuming = threading.Event(), threading.Event()
    producers = [threading.Thread(target=produce, args=(n, broker.url, ledger, stop_producing),
                                  daemon=True) for n in range(PRODUCERS)]
    consumers = [threading.Thread(target=consume, args=(kind, n, broker.url, ledger, stop_consuming),
                                  daemon=True)
                 for kind in CONSUMER_KINDS for n in range(THREADS_PER_KIND)]
    for thread in producers + consumers:
        thread.start()
    total = 0
    try:
        time.sleep(DURATION)
        stop_producing.set()
        for thread in producers:
            thread.join(timeout=60)
        total = sum(len(seqs) for seqs in ledger.accepted.values())
        deadline = time.monotonic() + DRAIN_S
        while time.monotonic() < deadline and any(
                ledger.unique_received(kind) < total for kind in CONSUMER_KINDS):
            time.sleep(0.5)
        time.sleep(2.0)  # room for a late duplicate to show up
    finally:
        stop_producing.set()
        stop_consuming.set()
        for thread in producers + consumers:
            thread.join(timeout=30)

    print(f"concurrency: {total} accepted messages in {DURATION:.0f} s; received "
          + ", ".join(f"{kind} {len(got)}" for kind, got in ledger.received.items()))
    assert not any(t.is_alive() for t in producers + consumers), "a client thread hangs"
    assert total > 0, "nothing was accepted"
    problems = [check_kind(kind, ledger) for kind in CONSUMER_KINDS]
    problems = [p for p in problems if p]
    assert not problems and not ledger.errors, "\n".join(problems + ledger.errors[:20])


def check_kind(kind: str, ledger: Ledger) -> str:
    """'' when `kind` got every accepted message once and in order, else what went wrong."""
    received = sorted(ledger.received[kind])
    per_partition = defaultdict(list)
    for _, partition, seq in received:
        per_partition[partition].append(seq)
    problems = []
    for partition in PARTITIONS:
        got = per_partition[partition]
        accepted = set(ledger.accepted[partition])
        twice = sorted(seq for seq, n in Counter(got).items() if n > 1)
        if twice:
            problems.append(f"{partition}: delivered more than once: {twice[:10]}")
        if got != sorted(got):
            problems.append(f"{partition}: out of order: {got[:40]}")
        skipped = sorted(accepted - set(got))
        if skipped:
            problems.append(f"{partition}: {len(skipped)} accepted never delivered: {skipped[:10]}")
        unknown = sorted(set(got) - accepted - ledger.uncertain[partition])
        if unknown:
            problems.append(f"{partition}: delivered but never pushed: {unknown[:10]}")
    if not problems:
        return ""
    return f"{kind}: " + "; ".join(problems[:10]) + (f" (+{len(problems) - 10} more)" if len(problems) > 10 else "")
