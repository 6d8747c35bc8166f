"""SIGKILL at random moments under load loses no acknowledged write.

Producers push JSON messages with unique transactionIds and a per-partition
sequence number; a consumer group pops (subscriptionMode=all, long poll) and
acks. The broker is killed with SIGKILL at random moments (ROUNDS times) and
restarted on the same data dir; a producer resends an unanswered push with the
same transactionIds. Afterwards:
- every message whose push was answered 2xx (queued or duplicate) is present
  exactly once and in push order per partition (read with a fresh group);
- no message is delivered to the consumer group by a pop sent after an ack of
  it was answered with success;
- the consumer group got every accepted message.
"""

import random
import threading
import time
from collections import Counter, defaultdict

import httpx
import pytest

import queen_api

QUEUE = "crash"
PARTITIONS = [f"p{i}" for i in range(8)]
PRODUCERS = 4
CONSUMERS = 3
GROUP = "crash-group"
ROUNDS = 6
LEASE_SECONDS = 5
RETRY_FOR_S = 60.0  # how long a client keeps resending one request


class Ledger:
    """What the clients saw, recorded under one lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.accepted = defaultdict(list)  # partition -> seqs answered queued/duplicate, in order
        self.refused = defaultdict(set)  # partition -> seqs answered "failed"
        self.unanswered = defaultdict(set)  # partition -> seqs whose push never got an answer
        self.deliveries = []  # (time the pop was sent, transactionId) for GROUP
        self.acked = {}  # transactionId -> time its first successful ack was answered
        self.errors = []
        self.pushes = 0

    def error(self, where: str, error: BaseException) -> None:
        with self.lock:
            self.errors.append(f"{where}: {error!r}")


def retrying(call, deadline: float):
    """call() until it answers; network errors and 5xx are retried, 4xx raise."""
    while True:
        try:
            return call()
        except httpx.TransportError:
            pass
        except httpx.HTTPStatusError as error:
            if error.response.status_code < 500:
                raise
        if time.monotonic() > deadline:
            return None
        time.sleep(0.05)


def produce(n: int, broker, ledger: Ledger, stop: threading.Event) -> None:
    rng = random.Random(n)
    owned = PARTITIONS[n::PRODUCERS]
    next_seq = dict.fromkeys(owned, 0)
    with httpx.Client() as http:
        while not stop.is_set():
            partition = rng.choice(owned)
            seqs = list(range(next_seq[partition], next_seq[partition] + rng.randint(1, 5)))
            next_seq[partition] = seqs[-1] + 1
            items = [
                queen_api.item(QUEUE, partition, f"{partition}-{seq}", {"p": partition, "seq": seq})
                for seq in seqs
            ]
            try:
                results = retrying(lambda: queen_api.push(http, broker.url, items, timeout=5.0),
                                   time.monotonic() + RETRY_FOR_S)
            except Exception as error:  # noqa: BLE001 - reported by the test
                ledger.error(f"producer {n}", error)
                return
            with ledger.lock:
                ledger.pushes += 1
                if results is None:
                    ledger.unanswered[partition].update(seqs)
                    return
                for seq, result in zip(seqs, results):
                    if queen_api.accepted(result):
                        ledger.accepted[partition].append(seq)
                    else:
                        ledger.refused[partition].add(seq)
            time.sleep(0.002)


def consume(n: int, broker, ledger: Ledger, stop: threading.Event) -> None:
    with httpx.Client() as http:
        while not stop.is_set():
            sent = time.monotonic()
            try:
                messages = queen_api.pop(http, broker.url, QUEUE, group=GROUP, mode="all", batch=20,
                                         wait=True, timeout_ms=500, lease_seconds=LEASE_SECONDS)
            except httpx.TransportError:
                time.sleep(0.05)
                continue
            except Exception as error:  # noqa: BLE001
                if isinstance(error, httpx.HTTPStatusError) and error.response.status_code >= 500:
                    time.sleep(0.05)
                    continue
                ledger.error(f"consumer {n} pop", error)
                return
            if not messages:
                continue
            with ledger.lock:
                ledger.deliveries += [(sent, m["transactionId"]) for m in messages]
            try:
                results = retrying(lambda: queen_api.ack_batch(http, broker.url, messages, GROUP),
                                   time.monotonic() + RETRY_FOR_S)
            except Exception as error:  # noqa: BLE001
                ledger.error(f"consumer {n} ack", error)
                return
            answered = time.monotonic()
            with ledger.lock:
                for message, result in zip(messages, results or []):
                    if result.get("success"):
                        ledger.acked.setdefault(message["transactionId"], answered)


@pytest.mark.timeout(240)
def test_sigkill_at_random_moments_loses_no_acknowledged_write(broker_factory):
    broker = broker_factory("crash").start()
    ledger = Ledger()
    stop_producing, stop_consuming = threading.Event(), threading.Event()
    producers = [threading.Thread(target=produce, args=(n, broker, ledger, stop_producing), daemon=True)
                 for n in range(PRODUCERS)]
    consumers = [threading.Thread(target=consume, args=(n, broker, ledger, stop_consuming), daemon=True)
                 for n in range(CONSUMERS)]
    for thread in producers + consumers:
        thread.start()

    rng = random.Random(20261202)
    try:
        for _ in range(ROUNDS):  # restarts happen here, in the main thread (see queen_broker)
            time.sleep(rng.uniform(1.0, 2.5))
            broker.kill()
            time.sleep(rng.uniform(0.0, 0.5))
            broker.start()
        time.sleep(2.0)
    finally:
        stop_producing.set()
        for thread in producers:
            thread.join(timeout=RETRY_FOR_S + 10)
        stop_consuming.set()
        for thread in consumers:
            thread.join(timeout=RETRY_FOR_S + 10)
    last_restart = time.monotonic()
    assert not any(t.is_alive() for t in producers + consumers), "a client thread hangs"
    assert not ledger.errors, ledger.errors
    total = sum(len(seqs) for seqs in ledger.accepted.values())
    print(f"crash: {ledger.pushes} pushes, {total} accepted messages, "
          f"{len(ledger.deliveries)} deliveries, {len(ledger.acked)} acked, {broker.starts} starts")
    assert total > 0 and ledger.acked, "the run produced or consumed nothing"

    with httpx.Client() as http:
        for partition in PARTITIONS:
            stored = queen_api.drain(http, broker.url, QUEUE, "crash-verify", partition=partition)
            assert all(m["data"]["p"] == partition for m in stored), f"foreign message in {partition}"
            check_partition(partition, [m["data"]["seq"] for m in stored], ledger)

        # Leases of batches popped before a kill and never acked expire; then the
        # group drains the rest of the queue.
        time.sleep(max(0.0, last_restart + LEASE_SECONDS + 1 - time.monotonic()))
        sent = time.monotonic()
        rest = queen_api.drain(http, broker.url, QUEUE, GROUP)
        ledger.deliveries += [(sent, m["transactionId"]) for m in rest]

    redelivered = sorted({txn for sent, txn in ledger.deliveries
                          if txn in ledger.acked and sent > ledger.acked[txn]})
    assert not redelivered, f"{len(redelivered)} acked messages delivered again: {redelivered[:10]}"
    delivered = {txn for _, txn in ledger.deliveries}
    never = [f"{p}-{seq}" for p, seqs in ledger.accepted.items() for seq in seqs
             if f"{p}-{seq}" not in delivered]
    assert not never, f"{len(never)} accepted messages never reached {GROUP}: {never[:10]}"


def check_partition(partition: str, seqs: list[int], ledger: Ledger) -> None:
    accepted = ledger.accepted[partition]
    assert accepted == sorted(accepted)
    duplicates = sorted(seq for seq, n in Counter(seqs).items() if n > 1)
    assert not duplicates, f"{partition}: stored more than once: {duplicates[:10]}"
    assert seqs == sorted(seqs), f"{partition}: out of push order: {seqs[:50]}"
    missing = sorted(set(accepted) - set(seqs))
    assert not missing, f"{partition}: {len(missing)} accepted pushes lost: {missing[:10]}"
    refused = sorted(ledger.refused[partition] & set(seqs))
    assert not refused, f"{partition}: pushes answered 'failed' are stored: {refused[:10]}"
    unknown = sorted(set(seqs) - set(accepted) - ledger.unanswered[partition])
    assert not unknown, f"{partition}: stored messages nobody pushed: {unknown[:10]}"
