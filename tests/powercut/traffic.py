"""Client traffic against a broker on powerfs and the checks after a restart,
shared by the power-cut tests: producers push, a consumer group pops and acks,
and a Ledger records what each of them was answered."""

from __future__ import annotations

import random
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import httpx

import queen_api
from queen_broker import READY_TIMEOUT_S, Broker, BrokerError

QUEUE = "powercut"
PARTITIONS = [f"p{i}" for i in range(4)]
GROUP = "powercut-group"
PRODUCERS = 2
CONSUMERS = 2
LEASE_SECONDS = 5
BROKER_ENV = {
    # Checkpoints (state.redb rewrites) and segment rolls within every round.
    "QUEEN_CHECKPOINT_INTERVAL_SECS": "1",
    "QUEEN_SEGMENT_BYTES": "1048576",
}
REFUSAL = re.compile(r"error|refus|missing|lost|cannot|failed", re.IGNORECASE)


@dataclass
class Ledger:
    """What the clients of one lineage (one disk) were answered."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    acked_pushes: set = field(default_factory=set)
    refused_pushes: set = field(default_factory=set)
    all_pushes: set = field(default_factory=set)
    acked: dict = field(default_factory=dict)  # txn -> when its ack was answered success
    deliveries: list = field(default_factory=list)  # (when the pop was sent, txn) to GROUP
    errors: list = field(default_factory=list)
    round_acked: int = 0
    cuts: int = 0


class PowerBroker(Broker):
    """A Broker that leaves creating the data dir to the broker (it may not
    exist yet) and tells a refusal to start apart from a hang."""

    def start_or_refuse(self) -> bool:
        if self.proc is not None and self.proc.poll() is None:
            raise BrokerError("broker already running")
        self._spawn()
        try:
            self._wait_healthy(READY_TIMEOUT_S)
        except BrokerError:
            if self.proc.poll() is not None and self.proc.returncode != -9:
                return False
            raise
        return True


def produce(n: int, url: str, ledger: Ledger, stop: threading.Event, round_no: int) -> None:
    rng = random.Random(round_no * 1000 + n)
    seq = 0
    with httpx.Client() as http:
        while not stop.is_set():
            items = []
            for _ in range(rng.randint(1, 5)):
                txn = f"r{round_no}-w{n}-{seq}"
                seq += 1
                items.append(queen_api.item(QUEUE, rng.choice(PARTITIONS), txn,
                                            {"t": txn, "pad": "x" * rng.randint(0, 3000)}))
            with ledger.lock:
                ledger.all_pushes.update(i["transactionId"] for i in items)
            try:
                results = queen_api.push(http, url, items, timeout=10.0)
            except httpx.HTTPStatusError as error:
                if error.response.status_code >= 500 or error.response.status_code == 429:
                    time.sleep(0.05)  # not answered: may or may not be stored, at most once
                    continue
                with ledger.lock:
                    ledger.errors.append(f"producer {n}: {error!r}")
                return
            except (httpx.HTTPError, AssertionError, ValueError):
                return  # the cut: this push has no answer, the round is over for us
            with ledger.lock:
                for item, result in zip(items, results):
                    if queen_api.accepted(result):
                        ledger.acked_pushes.add(item["transactionId"])
                        ledger.round_acked += 1
                    else:
                        ledger.refused_pushes.add(item["transactionId"])


def consume(url: str, ledger: Ledger, stop: threading.Event) -> None:
    with httpx.Client() as http:
        while not stop.is_set():
            sent = time.monotonic()
            try:
                messages = queen_api.pop(http, url, QUEUE, group=GROUP, mode="all", batch=20,
                                         wait=True, timeout_ms=300, lease_seconds=LEASE_SECONDS)
            except httpx.HTTPStatusError as error:
                if error.response.status_code in (404, 429) or error.response.status_code >= 500:
                    time.sleep(0.05)  # no queue yet, or busy
                    continue
                with ledger.lock:
                    ledger.errors.append(f"consumer: {error!r}")
                return
            except (httpx.HTTPError, ValueError):
                return
            if not messages:
                continue
            with ledger.lock:
                ledger.deliveries += [(sent, m["transactionId"]) for m in messages]
            try:
                results = queen_api.ack_batch(http, url, messages, GROUP)
            except (httpx.HTTPError, AssertionError, ValueError):
                return
            answered = time.monotonic()
            with ledger.lock:
                for message, result in zip(messages, results):
                    if result.get("success"):
                        ledger.acked.setdefault(message["transactionId"], answered)


def read_back(url: str, group: str) -> list[dict]:
    """Every stored message, read with a fresh group from the start of the queue."""
    stored: list[dict] = []
    deadline = time.monotonic() + 60.0
    with httpx.Client() as http:
        while time.monotonic() < deadline:
            try:
                messages = queen_api.pop(http, url, QUEUE, group=group, mode="all", batch=1000,
                                         wait=True, timeout_ms=300)
            except httpx.HTTPStatusError as error:
                if error.response.status_code == 404:
                    return stored  # no such queue: nothing stored
                raise
            if not messages:
                return stored
            stored += messages
            results = queen_api.ack_batch(http, url, messages, group)
            refused = [r for r in results if not r.get("success")]
            assert not refused, f"acks refused while reading back: {refused[:3]}"
    raise AssertionError(f"reading the queue back took more than 60 s ({len(stored)} so far)")


def check_restart(url: str, ledger: Ledger, verify_group: str) -> list[str]:
    """What is wrong with the data the broker serves after a restart."""
    stored = read_back(url, verify_group)
    counts = Counter(m["transactionId"] for m in stored)
    problems = []
    bad_payload = [m["transactionId"] for m in stored
                   if not isinstance(m.get("data"), dict) or m["data"].get("t") != m["transactionId"]]
    if bad_payload:
        problems.append(f"{len(bad_payload)} messages with a payload not theirs: {bad_payload[:5]}")
    duplicates = sorted(t for t, n in counts.items() if n > 1)
    if duplicates:
        problems.append(f"{len(duplicates)} messages stored more than once: {duplicates[:5]}")
    with ledger.lock:
        missing = sorted(ledger.acked_pushes - counts.keys())
        unknown = sorted(counts.keys() - ledger.all_pushes)
        refused = sorted(ledger.refused_pushes & counts.keys())
        total = len(ledger.acked_pushes)
    if missing:
        problems.append(f"{len(missing)} of {total} acknowledged pushes lost: {missing[:5]}")
    if unknown:
        problems.append(f"{len(unknown)} messages nobody pushed: {unknown[:5]}")
    if refused:
        problems.append(f"{len(refused)} pushes answered 'failed' are stored: {refused[:5]}")
    return problems


def redelivered(ledger: Ledger) -> list[str]:
    with ledger.lock:
        return sorted({txn for sent, txn in ledger.deliveries
                       if txn in ledger.acked and sent > ledger.acked[txn]})


def redelivery_problems(url: str, ledger: Ledger) -> list[str]:
    """The acking group pops (and acks) what is there now: nothing it acked before
    may come back."""
    deadline = time.monotonic() + 30.0
    with httpx.Client() as http:
        while time.monotonic() < deadline:
            sent = time.monotonic()
            try:
                messages = queen_api.pop(http, url, QUEUE, group=GROUP, mode="all", batch=1000,
                                         wait=True, timeout_ms=300, lease_seconds=LEASE_SECONDS)
            except httpx.HTTPStatusError as error:
                if error.response.status_code == 404:
                    break
                raise
            if not messages:
                break
            results = queen_api.ack_batch(http, url, messages, GROUP)
            answered = time.monotonic()
            with ledger.lock:
                ledger.deliveries += [(sent, m["transactionId"]) for m in messages]
                for message, result in zip(messages, results):
                    if result.get("success"):
                        ledger.acked.setdefault(message["transactionId"], answered)
    again = redelivered(ledger)
    return [f"{len(again)} acked messages delivered again to {GROUP}: {again[:5]}"] if again else []


def start_clients(url: str, ledger: Ledger, round_no: int) -> tuple[threading.Event, list]:
    """PRODUCERS pushing and CONSUMERS popping and acking until the event is set."""
    stop = threading.Event()
    threads = [threading.Thread(target=produce, args=(n, url, ledger, stop, round_no), daemon=True)
               for n in range(PRODUCERS)]
    threads += [threading.Thread(target=consume, args=(url, ledger, stop), daemon=True)
                for _ in range(CONSUMERS)]
    for thread in threads:
        thread.start()
    return stop, threads


def stop_clients(stop: threading.Event, threads: list, what: str) -> None:
    stop.set()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(t.is_alive() for t in threads), f"{what}: a client thread hangs"
