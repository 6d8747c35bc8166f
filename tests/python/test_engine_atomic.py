"""All or nothing in the engine (issue 8): a transaction's acks are resolved against the view its
earlier operations leave (a message pushed earlier in the bundle is the one its transactionId
names), and a refused request leaves nothing behind, not even the queues and partitions it
would have created.

The old broker resolved a bundle's acks against the state before the bundle and then planned
every push before every ack: [push X, ack X] committed the push and failed the ack with 200,
[ack X, push X] acked the new X instead of the delivered one (and failed), and a push refused
for an unreadable dedup frame had already created the other items' queues.
"""

import httpx

from queen_api import ack_batch, item, pop, push
from segments import HEADER_LEN, read_segment, segment_files


def _configure(http: httpx.Client, queue: str, **options) -> None:
    res = http.post("/api/v1/configure", json={"queue": queue, "options": options})
    assert res.status_code in (200, 201), res.text


def _delivered_x(http: httpx.Client, url: str, queue: str) -> dict:
    # dedupWindowSeconds 0: a second push of X is a new message, not caught as a duplicate.
    _configure(http, queue, dedupWindowSeconds=0)
    push(http, url, [item(queue, "p", "X", {"n": 1})])
    msgs = pop(http, url, queue, batch=1, wait=False)
    assert [m["transactionId"] for m in msgs] == ["X"]
    return msgs[0]


def test_an_ack_after_a_push_of_the_same_id_resolves_to_the_pushed_message(broker):
    with httpx.Client(base_url=broker.url, timeout=30.0) as http:
        m = _delivered_x(http, broker.url, "atx1")
        ops = [
            {"type": "push", "items": [item("atx1", "p", "X", {"n": 2})]},
            {"type": "ack", "transactionId": "X", "partitionId": m["partitionId"],
             "status": "completed", "leaseId": m["leaseId"]},
        ]
        body = http.post("/api/v1/transaction", json={"operations": ops}).json()
        # The X the ack names is the one just pushed (offset 1), outside the lease: refused whole.
        assert body.get("success") is False, body
        assert "operation 1" in body.get("error", ""), body
        # Nothing happened: the delivered X is still leased and acks fine, no second X exists.
        results = ack_batch(http, broker.url, [m], None)
        assert [r["success"] for r in results] == [True], results
        assert pop(http, broker.url, "atx1", wait=False) == []


def test_an_ack_before_a_push_of_the_same_id_acks_the_delivered_message(broker):
    with httpx.Client(base_url=broker.url, timeout=30.0) as http:
        m = _delivered_x(http, broker.url, "atx2")
        ops = [
            {"type": "ack", "transactionId": "X", "partitionId": m["partitionId"],
             "status": "completed", "leaseId": m["leaseId"]},
            {"type": "push", "items": [item("atx2", "p", "X", {"n": 2})]},
        ]
        body = http.post("/api/v1/transaction", json={"operations": ops}).json()
        assert body.get("success") is True, body
        assert [r["success"] for r in body["results"]] == [True, True], body
        # The delivered X is committed; the new X is the next message.
        again = pop(http, broker.url, "atx2", wait=False)
        assert [(m2["transactionId"], m2["data"], m2["offset"]) for m2 in again] == [
            ("X", {"n": 2}, 1)
        ], again


def test_a_push_refused_for_an_unreadable_dedup_frame_creates_nothing(broker_factory):
    b = broker_factory("dedup").start()
    with httpx.Client(base_url=b.url, timeout=30.0) as http:
        _configure(http, "keep", dedupWindowSeconds=3600)
        push(http, b.url, [item("keep", "p", "D", {"payload": "y" * 64})])
    # Restarted, the message is no longer in the entry cache: a repeat of D reads it from disk.
    b.stop()
    b.start()
    # A flipped byte in D's record while the broker runs (the start-up check passed already).
    hits = []
    for seg in segment_files(b.data_dir):
        _, records = read_segment(seg)
        hits += [(seg, r) for r in records if b"y" * 64 in r.payload]
    assert len(hits) == 1, hits
    seg, rec = hits[0]
    at = rec.payload_offset + rec.payload.index(b"y" * 64) + 10
    assert at > HEADER_LEN
    with open(seg, "r+b") as f:
        f.seek(at)
        f.write(b"z")
    with httpx.Client(base_url=b.url, timeout=30.0) as http:
        before = http.get("/api/v1/resources/overview").json()
        assert (before["queues"], before["partitions"]) == (1, 1), before
        res = http.post("/api/v1/push", json={"items": [
            item("fresh", "a", "F", 1),
            item("keep", "new-partition", "G", 2),
            item("keep", "p", "D", 3),
        ]})
        assert res.status_code == 503, res.text
        assert "nothing was written" in res.json()["error"], res.text
        # Neither the queue nor the partition of the other items exists.
        after = http.get("/api/v1/resources/overview").json()
        assert (after["queues"], after["partitions"]) == (1, 1), after
        assert "fresh" not in http.get("/api/v1/resources/queues").text
