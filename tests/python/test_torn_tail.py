"""A torn and corrupt log tail is cut at start; everything before it is served.

Messages are pushed one request each, the broker is SIGKILLed, the last
segment is truncated in the middle of its last message record and one payload
byte of the record before it is flipped. The restarted broker must log a
"torn tail" warning naming the segment and the offset it cut at, serve every
message before the damaged records (and none of those), and keep working on
top of the cut log, also across a further restart.
"""

import httpx

import queen_api
from segments import read_segment, segment_files

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
    holder = {}  # message number -> index in `records` of the record holding it
    for i in range(COUNT):
        found = [r for r, record in enumerate(records) if mark(i).encode() in record.payload]
        assert found, f"message {i} not found as plain bytes in {segment.name}"
        holder[i] = found[-1]
    torn = max(holder.values())  # the last record holding a message: cut in its middle
    corrupt = torn - 1  # the record before it: flip one payload byte
    assert corrupt >= 0 and records[corrupt].payload, "need two records to damage"

    damaged_from = records[corrupt].offset
    cut_at = records[torn].offset + records[torn].size // 2
    with open(segment, "r+b") as f:
        f.truncate(cut_at)
        flip_at = records[corrupt].payload_offset + len(records[corrupt].payload) // 2
        f.seek(flip_at)
        byte = f.read(1)
        f.seek(flip_at)
        f.write(bytes([byte[0] ^ 0xFF]))

    kept = [txn(i) for i in range(COUNT) if holder[i] < corrupt]
    lost = [txn(i) for i in range(COUNT) if holder[i] >= corrupt]
    assert len(kept) >= COUNT // 2 and lost, (kept, lost)

    broker.start()
    warnings = [line for line in broker.log_text().splitlines() if "torn tail" in line.lower()]
    assert warnings, f"no 'torn tail' in the log:\n{broker.log_tail()}"
    assert any(segment.name in line and str(damaged_from) in line for line in warnings), (
        f"expected a 'torn tail' line naming {segment.name} and offset {damaged_from} "
        f"({cut_at - damaged_from} bytes cut):\n" + "\n".join(warnings)
    )

    with httpx.Client(timeout=10.0) as http:
        assert drained_txns(http, broker.url, "torn-check") == kept

        # The log goes on after the cut: a new push is served, also after a restart.
        [result] = queen_api.push(http, broker.url, [queen_api.item(QUEUE, "Default", "torn-after", {"n": 1})])
        assert result["status"] == "queued", result
        assert drained_txns(http, broker.url, "torn-check") == ["torn-after"]
        broker.kill()
        broker.start()
        assert drained_txns(http, broker.url, "torn-again") == kept + ["torn-after"]
