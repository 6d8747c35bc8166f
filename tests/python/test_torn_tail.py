"""A torn tail of the log is cut at start; everything before it is served.

Messages are pushed one request each, the broker is SIGKILLed, and the first
part of one more record (the next index, its length prefix claiming more bytes
than follow) is appended to the last segment: what a power cut leaves of a
write whose fsync never returned, so nothing in it was acknowledged. The
restarted broker must log a "torn tail" warning naming the segment and the
offset it cut at, serve every acknowledged message, and keep working on top of
the cut log, also across a further restart.

Before issue 8 this test truncated the last acknowledged record and flipped a
byte of the one before it. Those records are at or below the persisted Raft
committed index (or may be: it is saved on a pace), so recovery now refuses to
drop them instead of cutting; tests/python/test_corrupt_start.py covers that.
"""

import struct

import httpx

import queen_api
from segments import crc32c, read_segment, segment_files

QUEUE = "torn-tail"
COUNT = 20


def mark(i: int) -> str:
    return f"torn-mark-{i:04d}"


def txn(i: int) -> str:
    return f"torn-txn-{i:04d}"


def drained_txns(http: httpx.Client, base: str, group: str) -> list[str]:
    return [m["transactionId"] for m in queen_api.drain(http, base, QUEUE, group, mode="all")]


def test_torn_tail_is_cut_and_everything_before_it_is_served(broker_factory):
    broker = broker_factory("torn").start()
    with httpx.Client(timeout=10.0) as http:
        for i in range(COUNT):
            payload = {"mark": mark(i), "pad": "p" * 64}
            [result] = queen_api.push(http, broker.url, [queen_api.item(QUEUE, "Default", txn(i), payload)])
            assert result["status"] == "queued", result
    broker.kill()

    segment = segment_files(broker.data_dir)[-1]
    _, records = read_segment(segment)
    last = records[-1]
    # The next record as a torn write leaves it: the header and half of a payload as long
    # as the last one's, so its length prefix runs past the end of the file.
    body = struct.pack("<QQ", last.index + 1, last.term) + last.payload
    whole = struct.pack("<II", len(body), crc32c(body)) + body
    torn = whole[: len(whole) // 2]
    cut_at = segment.stat().st_size
    with open(segment, "ab") as f:
        f.write(torn)

    kept = [txn(i) for i in range(COUNT)]
    broker.start()
    warnings = [line for line in broker.log_text().splitlines() if "torn tail" in line.lower()]
    assert warnings, f"no 'torn tail' in the log:\n{broker.log_tail()}"
    assert any(segment.name in line and str(cut_at) in line for line in warnings), (
        f"expected a 'torn tail' line naming {segment.name} and offset {cut_at} "
        f"({len(torn)} bytes cut):\n" + "\n".join(warnings)
    )
    assert segment.stat().st_size == cut_at

    with httpx.Client(timeout=10.0) as http:
        assert drained_txns(http, broker.url, "torn-check") == kept

        # The log goes on after the cut: a new push is served, also after a restart.
        [result] = queen_api.push(http, broker.url, [queen_api.item(QUEUE, "Default", "torn-after", {"n": 1})])
        assert result["status"] == "queued", result
        assert drained_txns(http, broker.url, "torn-check") == ["torn-after"]
        broker.kill()
        broker.start()
        assert drained_txns(http, broker.url, "torn-again") == kept + ["torn-after"]
