"""The binary wire forms (docs/binary-forms.md) against the real binary, with the official
client's own encoders and decoder (queen.http.push_binary, queen.http.pop_frames) as the
ground truth for the bytes: QPB1 plain and frames pushes, the QTB1 transaction, the QPF1
pop answer; a malformed body is a 400 with a JSON error and changes nothing."""

import struct

import httpx
import pytest
from queen.http.pop_frames import decode_pop_frames, is_pop_frames
from queen.http.push_binary import binary_push_body, transaction_frames
from queen.http.zstd import compress as zstd_compress

BINARY = {"Content-Type": "application/x-queen-push"}


def items(queue: str, n: int, partition: str = "Default", prefix: str = "t") -> list[dict]:
    return [
        {"queue": queue, "partition": partition, "transactionId": f"{prefix}{i}", "payload": {"n": i}}
        for i in range(n)
    ]


def push_binary(http: httpx.Client, batch: list[dict], compress: bool) -> httpx.Response:
    body = binary_push_body(batch, compress)
    assert body is not None
    return http.post("/api/v1/push", content=body, headers=BINARY)


def pop(http: httpx.Client, queue: str, frames: bool, **params) -> httpx.Response:
    query = {"batch": 100, "wait": "false", **params}
    if frames:
        query["frames"] = "true"
    return http.get(f"/api/v1/pop/queue/{queue}", params=query)


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "frames"])
def test_binary_push_then_framed_pop(http, compress):
    queue = f"bin-{int(compress)}"
    batch = items(queue, 3) + items(queue, 2, partition="p2", prefix="u")
    res = push_binary(http, batch, compress)
    assert res.status_code == 201, res.text
    answer = res.json()
    assert [r["transactionId"] for r in answer] == ["t0", "t1", "t2", "u0", "u1"]
    assert {r["status"] for r in answer} == {"queued"}

    again = push_binary(http, batch[:1], compress)
    assert again.json()[0]["status"] == "duplicate"
    assert again.json()[0]["message_id"] == answer[0]["message_id"]

    res = pop(http, queue, frames=True, partitions=2)
    assert res.status_code == 200
    assert res.headers["content-type"] == "application/x-queen-pop"
    assert is_pop_frames(res.content)
    got = decode_pop_frames(res.content)
    by_txn = {m["transactionId"]: m for m in got["messages"]}
    assert sorted(by_txn) == ["t0", "t1", "t2", "u0", "u1"]
    assert [by_txn[f"t{i}"]["data"] for i in range(3)] == [{"n": 0}, {"n": 1}, {"n": 2}]
    ids = {r["transactionId"]: r["message_id"] for r in answer}
    assert all(m["id"] == ids[t] for t, m in by_txn.items())
    assert got["partitionsClaimed"] == 2
    assert got["leaseId"]
    assert [m["offset"] for m in got["messages"] if m["partition"] == "Default"] == [0, 1, 2]


def test_framed_pop_of_json_pushed_messages_matches_the_json_answer(http):
    queue = "bin-json"
    body = {"items": items(queue, 2) + [{"queue": queue, "payload": None, "traceId": "0190a000-0000-7000-8000-0000000000ff"}]}
    assert http.post("/api/v1/push", json=body).status_code == 201
    as_json = pop(http, queue, frames=False, consumerGroup="a", subscriptionMode="all").json()
    framed = decode_pop_frames(pop(http, queue, frames=True, consumerGroup="b", subscriptionMode="all").content)
    keys = ["id", "transactionId", "traceId", "data", "createdAt", "partitionId", "partition", "offset", "deliveryAttempt"]
    assert [{k: m[k] for k in keys} for m in framed["messages"]] == [
        {k: m[k] for k in keys} for m in as_json["messages"]
    ]
    for k in ["queue", "partition", "partitionId", "partitionsClaimed"]:
        assert framed[k] == as_json[k], k


def test_an_empty_framed_pop_is_204(http):
    assert pop(http, "bin-none", frames=True).status_code == 204


def test_binary_transaction_acks_and_pushes_in_one_commit(http):
    queue = "bin-txn"
    assert push_binary(http, items(queue, 1), False).status_code == 201
    [message] = pop(http, queue, frames=False).json()["messages"]
    request = {
        "operations": [
            {"type": "push", "items": [{"queue": "bin-txn-out", "payload": {"done": 1}, "transactionId": "out-1"}]},
            {"type": "ack", "transactionId": message["transactionId"], "partitionId": message["partitionId"],
             "leaseId": message["leaseId"], "status": "completed"},
        ],
        "requiredLeases": [message["leaseId"]],
    }
    framed = transaction_frames(request)
    assert framed is not None
    body, order = framed
    assert order == [1, 0], "the broker lists the head's ack before the push"
    res = http.post("/api/v1/transaction", content=body, headers=BINARY)
    assert res.status_code == 200, res.text
    answer = res.json()
    assert answer["success"] is True
    assert [r["type"] for r in answer["results"]] == ["ack", "push"]
    [out] = pop(http, "bin-txn-out", frames=False).json()["messages"]
    assert (out["transactionId"], out["data"]) == ("out-1", {"done": 1})
    assert pop(http, queue, frames=False).status_code == 204


def text16(s: bytes) -> bytes:
    return struct.pack("<H", len(s)) + s


def frame(payload: bytes, flags: int = 0, extra: bytes = b"") -> bytes:
    """A stored frame as the client writes it: flags, id, an empty transaction id, payload."""
    body = bytes([flags]) + bytes(16) + text16(b"") + extra + payload
    return struct.pack("<I", len(body)) + body


def framed_body(queue: bytes, n: int, z: bytes) -> bytes:
    return b"QPB1\x08" + struct.pack("<I", 1) + text16(queue) + text16(b"") + struct.pack("<II", n, len(z)) + z


def plain_body(queue: bytes, payloads: list[bytes]) -> bytes:
    out = b"QPB1\x00" + struct.pack("<I", 1) + text16(queue) + text16(b"") + struct.pack("<I", len(payloads))
    return out + b"".join(struct.pack("<I", len(p)) + p for p in payloads)


def bad_bodies() -> dict[str, bytes]:
    good = binary_push_body(items("bin-bad", 2), False)
    framed = binary_push_body(items("bin-bad", 2), True)
    not_json = bytearray(good)
    not_json[-1] = ord("x")  # the last payload's closing brace
    huge_count = b"QPB1\x04" + struct.pack("<I", 1) + b"\x07\x00bin-bad\x00\x00" + struct.pack("<I", 10**9)
    return {
        "truncated": good[:-3],
        "trailing": good + b"\x00",
        "bad magic": b"QPB2" + good[4:],
        "unknown flag": good[:4] + b"\x44" + good[5:],
        "payload not JSON": bytes(not_json),
        "item count over the cap": huge_count,
        "frames truncated": framed[:-1],
        "empty": b"",
        # Review of the binary forms, findings 1, 3, 4, 5.
        "queue name over 512 bytes": plain_body(b"q" * 600, [b"1"] * 100),
        "a group with no messages": framed_body(b"bin-bad", 0, zstd_compress(b"")),
        "a frame with a producer": framed_body(b"bin-bad", 1, zstd_compress(frame(b"1", 2, text16(b"p" * 60_000)))),
        "a frame with a trace id": framed_body(b"bin-bad", 1, zstd_compress(frame(b"1", 1, bytes(16)))),
        "bytes after a group's frame": framed_body(b"bin-bad", 1, zstd_compress(frame(b"1")) + b"\x00"),
        "two frames in a group": framed_body(b"bin-bad", 1, zstd_compress(frame(b"1")) + zstd_compress(frame(b"2"))),
    }


@pytest.mark.parametrize("name", list(bad_bodies()))
def test_a_malformed_push_body_is_400_and_changes_nothing(http, name):
    res = http.post("/api/v1/push", content=bad_bodies()[name], headers=BINARY)
    assert res.status_code in (400, 413), res.text
    body = res.json()
    assert body["code"] in ("bad_request", "payload_too_large") and body["error"], body
    assert http.get("/api/v1/resources/queues/bin-bad").status_code == 404


def test_a_malformed_transaction_body_is_400_and_changes_nothing(http):
    request = {"operations": [{"type": "push", "items": items("bin-bad", 1)}]}
    body, _ = transaction_frames(request)
    for bad in (body[:-2], b"QTB1\x00" + struct.pack("<I", 1 << 31), b"QTB1\x00\x02\x00\x00\x00{]" + body[-4:]):
        res = http.post("/api/v1/transaction", content=bad, headers=BINARY)
        assert res.status_code in (400, 413), res.text
        assert res.json()["error"]
    assert http.get("/api/v1/resources/queues/bin-bad").status_code == 404


def test_a_payload_that_is_not_utf8_is_refused_on_both_paths(http):
    """A string with a byte that is not UTF-8 inside a payload: stored, it would be served as
    null in JSON and break the client's framed pop decoder. Review finding 2."""
    res = http.post(
        "/api/v1/push",
        content=b'{"items":[{"queue":"bin-utf8","payload":"\xff"}]}',
        headers={"Content-Type": "application/json"},
    )
    assert res.status_code == 400, res.text
    res = http.post("/api/v1/push", content=plain_body(b"bin-utf8", [b'"\xff"']), headers=BINARY)
    assert res.status_code == 400, res.text
    assert "not JSON" in res.json()["error"]
    assert http.get("/api/v1/resources/queues/bin-utf8").status_code == 404


def test_small_payloads_in_a_big_group_are_pushed_and_popped_as_sent(http):
    """Long transaction ids around one-byte payloads: the payloads are copied out of the
    decompressed group (which they would otherwise keep alive); they read back the same."""
    frames = b""
    for i in range(200):
        txn = f"{i:0>400}".encode()
        body = bytes([0]) + bytes(16) + text16(txn) + str(i % 10).encode()
        frames += struct.pack("<I", len(body)) + body
    res = http.post("/api/v1/push", content=framed_body(b"bin-small", 200, zstd_compress(frames)), headers=BINARY)
    assert res.status_code == 201, res.text
    got = pop(http, "bin-small", frames=False, batch=200).json()["messages"]
    assert sorted((int(m["transactionId"]), m["data"]) for m in got) == [(i, i % 10) for i in range(200)]
