"""Reads by offset (POST /api/v1/fetch) and partition discovery
(POST /api/v1/partitions/changed): bad input, limits, and what a restart keeps.

The official client suite (test_reads.py) covers the happy path; this file
covers what it does not send.
"""

import httpx

import queen_api

Q = "offset-reads"


def fetch(http: httpx.Client, entries: list[dict], **extra) -> httpx.Response:
    return http.post("/api/v1/fetch", json={"entries": entries, **extra})


def entry(partition: str, offset: int = 0, **extra) -> dict:
    return {"queue": Q, "partition": partition, "offset": offset, **extra}


def seed(http: httpx.Client, base: str, partition: str, n: int, size: int = 10) -> None:
    items = [queen_api.item(Q, partition, f"{partition}-{i}", {"i": i, "pad": "x" * size}) for i in range(n)]
    results = queen_api.push(http, base, items)
    assert all(queen_api.accepted(r) for r in results), results


def test_bad_offsets_and_counts(broker, http):
    seed(http, broker.url, "p", 3)
    # A negative offset is not an offset.
    res = fetch(http, [entry("p", -1)])
    assert res.status_code == 400, res.text
    assert res.json()["code"] == "bad_request"
    # Past the end (and far past it): out of range, no records, the bounds still told.
    for offset in (4, 2**63, 2**64 - 1):
        [e] = fetch(http, [entry("p", offset)]).json()["entries"]
        assert (e["error"], e["records"], e["highWatermark"], e["logStartOffset"]) == (
            "OFFSET_OUT_OF_RANGE", [], 3, 0), offset
    # At the end: nothing yet, and no error.
    [e] = fetch(http, [entry("p", 3)]).json()["entries"]
    assert e["records"] == [] and "error" not in e
    # An offset beyond 64 bits is refused.
    res = http.post("/api/v1/fetch", content=b'{"entries":[{"queue":"offset-reads","partition":"p","offset":1e30}]}',
                    headers={"content-type": "application/json"})
    assert res.status_code == 400, res.text
    # 1024 entries are served, index-aligned; 1025 are refused.
    many = [entry("p", i % 4) if i % 2 else entry(f"none-{i}") for i in range(1024)]
    got = fetch(http, many).json()["entries"]
    assert len(got) == 1024
    assert got[0]["error"] == "UNKNOWN_TOPIC_OR_PARTITION" and got[0]["records"] == []
    assert [r["offset"] for r in got[1]["records"]] == [1, 2]
    assert fetch(http, many + [entry("p")]).status_code == 400
    # A zero byte budget is refused; a huge one is clamped, not trusted.
    assert fetch(http, [entry("p", maxBytes=0)]).status_code == 400
    assert fetch(http, [entry("p")], maxBytes=0).status_code == 400
    [e] = fetch(http, [entry("p", maxBytes=2**62)], maxBytes=2**63).json()["entries"]
    assert [r["offset"] for r in e["records"]] == [0, 1, 2]
    # Other bad shapes.
    assert fetch(http, [{"queue": Q}]).status_code == 400
    assert http.post("/api/v1/fetch", json={"entries": {"queue": Q}}).status_code == 400


def test_byte_budgets_per_entry_and_per_call(broker, http):
    seed(http, broker.url, "big", 4, size=1000)
    seed(http, broker.url, "other", 2, size=1000)
    # The first record is always served, however small the budget.
    [e] = fetch(http, [entry("big", maxBytes=1)]).json()["entries"]
    assert [r["offset"] for r in e["records"]] == [0]
    # Two records' worth per entry.
    [e] = fetch(http, [entry("big", maxBytes=2300)]).json()["entries"]
    assert [r["offset"] for r in e["records"]] == [0, 1]
    # The call's budget is shared: the first entry spends it, the second gets nothing but
    # its bounds (the client asks it again).
    first, second = fetch(http, [entry("big"), entry("other")], maxBytes=3400).json()["entries"]
    assert [r["offset"] for r in first["records"]] == [0, 1, 2]
    assert second["records"] == [] and second["highWatermark"] == 2 and "error" not in second


def test_fetch_takes_no_lease_and_changed_pages(broker, http):
    seed(http, broker.url, "a", 2)
    seed(http, broker.url, "b", 1)
    fetch(http, [entry("a"), entry("b")])
    popped = queen_api.pop(http, broker.url, Q, group="g", mode="all", wait=False, batch=10, partitions=10)
    assert len(popped) == 3

    def changed(**e) -> dict:
        res = http.post("/api/v1/partitions/changed", json={"entries": [{"queue": Q, **e}]})
        assert res.status_code == 200, res.text
        return res.json()

    # One per page: the cursor walks the partitions in creation order.
    first = changed(limit=1)
    assert [p["name"] for p in first["entries"][0]["partitions"]] == ["a"]
    second = changed(limit=1, after=first["entries"][0]["next"])
    assert [p["name"] for p in second["entries"][0]["partitions"]] == ["b"]
    assert second["entries"][0]["partitions"][0]["lastOffset"] == 0
    third = changed(limit=1, after=second["entries"][0]["next"]) if "next" in second["entries"][0] else None
    if third is not None:
        assert third["entries"][0]["partitions"] == [] and "next" not in third["entries"][0]
    # Everything before safeTime was listed; nothing written after it yet.
    assert changed(since=first["safeTime"])["entries"][0]["partitions"] == []
    assert len(first["safeTime"]) == len(first["entries"][0]["partitions"][0]["lastWriteAt"])
    # Bad input.
    for bad in ({"since": "yesterday"}, {"after": "x"}, {"limit": 0}, {"limit": -1}):
        res = http.post("/api/v1/partitions/changed", json={"entries": [{"queue": Q, **bad}]})
        assert res.status_code == 400, (bad, res.text)
    unknown = http.post("/api/v1/partitions/changed", json={"entries": [{"queue": "nope"}]}).json()
    assert unknown["entries"][0]["error"] == "UNKNOWN_TOPIC_OR_PARTITION"


def test_a_restart_keeps_offsets(broker_factory):
    b = broker_factory().start()
    with httpx.Client(base_url=b.url, timeout=10.0) as http:
        seed(http, b.url, "kept", 3)
    b.stop()
    b.start()
    with httpx.Client(base_url=b.url, timeout=10.0) as http:
        [e] = fetch(http, [entry("kept", 1)]).json()["entries"]
        assert [(r["offset"], r["transactionId"], r["payload"]["i"]) for r in e["records"]] == [
            (1, "kept-1", 1), (2, "kept-2", 2)]
        assert (e["highWatermark"], e["logStartOffset"]) == (3, 0)
