"""A client-side history of pushes, deliveries and acks, and the checks run over it
(test_cluster_chaos.py; docs/cluster.md "Chaos test").

Every event carries the monotonic times the client sent its request and got its answer. A
client never knows when the broker acted, only that it was between the two, so every check
flags only what no such moment can explain:

- a lost push: acknowledged, never delivered;
- an out-of-order delivery: in one partition, a message delivered for the first time before
  one pushed earlier by the same sequential producer, or a batch not in push order;
- two live leases: a message delivered again while the lease of an earlier delivery must
  still have been live. That lease began after its pop was sent, so it lasted at least until
  `sent + lease`; the second delivery happened before its answer came (`recv`). Flagged when
  recv2 < sent1 + lease and nothing released the first lease (an ack answered success
  releases it: that case is the next check's);
- an acked message delivered again to the group: a pop sent after the answer of an ack that
  was answered success returned the message;
- a duplicated push: one transactionId of a partition delivered as two messages (two ids):
  a retry reuses its transactionId, so the broker's dedup must have answered it "duplicate";
- a message the group lost after one delivery: delivered, every ack of it refused or
  unanswered, never delivered again, and the broker does not count it consumed by the group
  once the run drained (review s23 five H1: the other checks are met by one delivery).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Push:
    partition: str
    txn: str
    seq: int  # the producer's order in its partition (one sequential producer each)
    sent: float
    recv: float
    ok: bool | None  # True: acknowledged; False: refused; None: no answer or "may or may not"
    error: str = ""  # what answered a push not acknowledged (status and code, or the exception)


@dataclass
class Delivery:
    consumer: str
    partition: str
    txn: str
    lease_id: str
    sent: float
    recv: float
    lease_end: float  # the earliest the lease can end: pop sent + the queue's lease time
    batch: int  # the pop that delivered it (one id per answered pop)
    msg_id: str = ""  # the broker's message id
    partition_id: str = ""  # the broker's partition id (for GET /api/v1/messages/{pid}/{txn})


@dataclass
class Ack:
    consumer: str
    partition: str
    txn: str
    lease_id: str
    sent: float
    recv: float
    ok: bool | None  # the item's answer: True success, False refused, None no answer


@dataclass
class History:
    pushes: list[Push] = field(default_factory=list)
    deliveries: list[Delivery] = field(default_factory=list)
    acks: list[Ack] = field(default_factory=list)
    # What a fresh consumer group read back from the start once the run was over: the
    # messages the cluster still holds. None when no read-back was made.
    stored: set[tuple[str, str]] | None = None
    # For each message of `unsettled()`, whether the broker counted it consumed by the
    # consumers' group once the run drained (None: the broker could not be asked).
    consumed: dict[tuple[str, str], bool | None] | None = None

    def acknowledged(self) -> set[tuple[str, str]]:
        return {(p.partition, p.txn) for p in self.pushes if p.ok}

    def delivered(self) -> set[tuple[str, str]]:
        return {(d.partition, d.txn) for d in self.deliveries}

    def acked_ok(self) -> set[tuple[str, str]]:
        return {(a.partition, a.txn) for a in self.acks if a.ok}

    def unsettled(self) -> dict[tuple[str, str], str]:
        """Acknowledged pushes delivered to the group but never acked with a success answer
        (every ack refused or unanswered), with their partition ids: each must have been
        acked after all (the answer lost) or come again; only the broker can tell which."""
        acknowledged, ok = self.acknowledged(), self.acked_ok()
        return {(d.partition, d.txn): d.partition_id for d in self.deliveries
                if (d.partition, d.txn) in acknowledged and (d.partition, d.txn) not in ok}


def lost_pushes(h: History) -> list[str]:
    """Acknowledged pushes never delivered."""
    missing = sorted(h.acknowledged() - h.delivered())
    return [f"acknowledged push {p}/{t} was never delivered" for p, t in missing]


def lost_after_delivery(h: History) -> list[str]:
    """Acknowledged pushes the cluster no longer holds: delivered once (maybe), then lost,
    e.g. a committed message whose ack went unanswered during a kill."""
    if h.stored is None:
        return []
    missing = sorted(h.acknowledged() - h.stored)
    return [f"acknowledged push {p}/{t} is not read back by a fresh group" for p, t in missing]


def lost_for_the_group(h: History) -> list[str]:
    """Delivered, no ack answered success, and the group neither got it again nor holds it
    consumed: at-least-once broken for the group, though a fresh group still reads it."""
    if h.consumed is None:
        return []
    found = []
    for key in sorted(h.unsettled()):
        state = h.consumed.get(key)
        if state is None:
            found.append(f"delivered {key[0]}/{key[1]}: the broker could not say whether "
                         "the group consumed it")
        elif not state:
            found.append(f"delivered {key[0]}/{key[1]}, no ack of it answered success, and "
                         "once drained the group neither got it again nor consumed it")
    return found


def out_of_order(h: History) -> list[str]:
    """Per partition: each answered pop in push order, and first deliveries in push order."""
    seq = {}
    for p in h.pushes:
        seq.setdefault((p.partition, p.txn), p.seq)
    found = []
    by_batch: dict[int, list[Delivery]] = {}
    for d in h.deliveries:
        by_batch.setdefault(d.batch, []).append(d)
    for batch, items in by_batch.items():
        last: dict[str, int] = {}
        for d in items:
            s = seq.get((d.partition, d.txn))
            if s is None:
                continue
            if d.partition in last and s <= last[d.partition]:
                found.append(f"pop {batch} delivered {d.partition}/{d.txn} (#{s}) after "
                             f"#{last[d.partition]} of the same partition")
            last[d.partition] = s
    highest: dict[str, tuple[int, str]] = {}
    seen = set()
    for d in sorted(h.deliveries, key=lambda d: (d.recv, d.batch)):
        key = (d.partition, d.txn)
        s = seq.get(key)
        if s is None or key in seen:
            continue
        seen.add(key)
        top = highest.get(d.partition)
        if top is not None and s < top[0]:
            found.append(f"{d.partition}/{d.txn} (#{s}) first delivered after "
                         f"{top[1]} (#{top[0]}), pushed later")
        else:
            highest[d.partition] = (s, d.txn)
    return found


def double_leases(h: History) -> list[str]:
    """A message delivered while an earlier delivery's lease must still have been live."""
    found = []
    by_message: dict[tuple[str, str], list[Delivery]] = {}
    for d in h.deliveries:
        by_message.setdefault((d.partition, d.txn), []).append(d)
    for (partition, txn), ds in by_message.items():
        ds.sort(key=lambda d: d.sent)
        for i, first in enumerate(ds):
            for later in ds[i + 1:]:
                if later.lease_id == first.lease_id and later.batch == first.batch:
                    continue
                # Acked or not: a message handed out again inside the first lease is either
                # a completed message given out again or two live leases, both violations.
                if later.recv < first.lease_end:
                    found.append(
                        f"{partition}/{txn} delivered under lease {later.lease_id} "
                        f"(answered at {later.recv:.3f}) while lease {first.lease_id} "
                        f"lived until at least {first.lease_end:.3f}")
    return found


def acked_redelivered(h: History) -> list[str]:
    """A message delivered again, by a pop sent after an ack of it was answered success."""
    acked_at: dict[tuple[str, str], float] = {}
    for a in h.acks:
        if a.ok:
            key = (a.partition, a.txn)
            acked_at[key] = min(acked_at.get(key, a.recv), a.recv)
    return [
        f"{d.partition}/{d.txn} delivered again (pop sent at {d.sent:.3f}) after its ack "
        f"was answered success at {acked_at[(d.partition, d.txn)]:.3f}"
        for d in h.deliveries
        if (d.partition, d.txn) in acked_at and d.sent > acked_at[(d.partition, d.txn)]
    ]


def duplicated(h: History) -> list[str]:
    """One partition's transactionId delivered under two message ids."""
    ids: dict[tuple[str, str], set[str]] = {}
    for d in h.deliveries:
        if d.msg_id:
            ids.setdefault((d.partition, d.txn), set()).add(d.msg_id)
    return [f"{p}/{t} delivered as {len(i)} messages: {sorted(i)}"
            for (p, t), i in sorted(ids.items()) if len(i) > 1]


CHECKS = {
    "lost": lost_pushes,
    "lost_after_delivery": lost_after_delivery,
    "order": out_of_order,
    "leases": double_leases,
    "redelivered": acked_redelivered,
    "duplicated": duplicated,
    "lost_for_the_group": lost_for_the_group,
}


def violations(h: History) -> dict[str, list[str]]:
    """Every check's findings, by name (empty lists when the history is clean)."""
    return {name: check(h) for name, check in CHECKS.items()}
