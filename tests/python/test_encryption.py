"""Encryption at rest (docs/architecture.md "Encryption at rest"): the payloads of a queue with
`encryptionEnabled` reach the log, the checkpoint and every other file of the data directory
only as AES-256-GCM envelopes, and every read path gives the original payload back.

The plain queue of the same broker is the control: its marker must be found by the same byte
search, or the search proves nothing.
"""

import base64
import json
import struct
import time
import uuid
from pathlib import Path

import httpx
import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from queen.http.pop_frames import decode_pop_frames
from queen.http.push_binary import binary_push_body

import queen_api
import segments

KEY = "0f1e2d3c4b5a69788796a5b4c3d2e1f0" + "00112233445566778899aabbccddeeff"
OTHER_KEY = "ff" * 32
BINARY = {"Content-Type": "application/x-queen-push"}
ENC, PLAIN, KAFKA = "enc-q", "plain-q", "enc-topic"


def marker(kind: str) -> str:
    # Distinctive and long: a chance match in unrelated bytes is out of the question.
    return f"{kind}-{uuid.uuid4().hex}"


def files_holding(data_dir: Path, needle: str) -> list[str]:
    found = []
    for path in sorted(Path(data_dir).rglob("*")):
        if path.is_file() and needle.encode() in path.read_bytes():
            found.append(str(path.relative_to(data_dir)))
    return found


def configure(http: httpx.Client, queue: str, encrypted: bool) -> httpx.Response:
    return http.post("/api/v1/configure", json={"queue": queue, "options": {"encryptionEnabled": encrypted}})


def push_json(http: httpx.Client, queue: str, txn: str, data) -> None:
    [r] = queen_api.push(http, "", [queen_api.item(queue, "p", txn, data)])
    assert r["status"] == "queued", r


def pop_all(http: httpx.Client, queue: str, group: str, frames: bool = False) -> dict[str, object]:
    """transactionId -> data of what a new group's first pop gets (all of it: one partition)."""
    params = {"batch": 100, "wait": "false", "consumerGroup": group, "subscriptionMode": "all"}
    if frames:
        params["frames"] = "true"
    res = http.get(f"/api/v1/pop/queue/{queue}", params=params)
    assert res.status_code == 200, res.text
    body = decode_pop_frames(res.content) if frames else res.json()
    return {m["transactionId"]: m["data"] for m in body["messages"]}


def fetched(http: httpx.Client, queue: str) -> list:
    res = http.post("/api/v1/fetch", json={"entries": [{"queue": queue, "partition": "p", "offset": 0}]})
    assert res.status_code == 200, res.text
    [e] = res.json()["entries"]
    assert "error" not in e, e
    return e["records"]


def kafka_values(broker, topic: str, n: int) -> list[bytes]:
    c = KafkaConsumer(bootstrap_servers=broker.kafka_bootstrap, group_id=None,
                      enable_auto_commit=False, consumer_timeout_ms=5000)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        values = []
        for _ in range(10):
            for recs in c.poll(timeout_ms=1000, max_records=100).values():
                values.extend(r.value for r in recs)
            if len(values) >= n:
                break
        return values
    finally:
        c.close()


def test_encrypted_payloads_are_ciphertext_on_disk_and_plaintext_on_every_read(broker_factory):
    broker = broker_factory(env={"QUEEN_ENCRYPTION_KEY": KEY}).start()
    m = {k: marker(k) for k in ("json", "bin", "framed", "txn", "kafka", "plain")}
    with httpx.Client(base_url=broker.url, timeout=10.0) as http:
        res = configure(http, ENC, True)
        assert res.status_code == 200, res.text
        assert res.json()["options"]["encryptionEnabled"] is True
        assert configure(http, KAFKA, True).status_code == 200
        push_json(http, ENC, "json", {"s": m["json"]})
        push_json(http, PLAIN, "plain", {"s": m["plain"]})
        for kind, compress in (("bin", False), ("framed", True)):
            body = binary_push_body(
                [{"queue": ENC, "partition": "p", "transactionId": kind, "payload": {"s": m[kind]}}], compress)
            res = http.post("/api/v1/push", content=body, headers=BINARY)
            assert res.status_code == 201 and res.json()[0]["status"] == "queued", res.text
        ops = [{"type": "push", "items": [queen_api.item(ENC, "p", "txn", {"s": m["txn"]})]}]
        res = http.post("/api/v1/transaction", json={"operations": ops})
        assert res.status_code == 200 and res.json().get("success") is True, res.text

    p = KafkaProducer(bootstrap_servers=broker.kafka_bootstrap, acks="all")
    p.send(KAFKA, value=json.dumps({"s": m["kafka"]}).encode(), partition=0).get(timeout=30)
    p.close()

    want = {k: {"s": m[k]} for k in ("json", "bin", "framed", "txn")}

    def check_reads(group: str) -> None:
        with httpx.Client(base_url=broker.url, timeout=10.0) as http:
            assert pop_all(http, ENC, f"{group}-json") == want
            assert pop_all(http, ENC, f"{group}-frames", frames=True) == want
            assert pop_all(http, PLAIN, group) == {"plain": {"s": m["plain"]}}
            records = fetched(http, ENC)
            assert {r["transactionId"]: r["payload"] for r in records} == want, records
            res = http.get("/api/v1/messages", params={"queue": ENC, "limit": 10})
            assert res.status_code == 200, res.text
            listed = res.json()["messages"]
            assert {x["transactionId"]: x["data"] for x in listed} == want, listed
            one = http.get(f"/api/v1/messages/{listed[0]['partitionId']}/{listed[0]['transactionId']}")
            assert one.status_code == 200, one.text
            assert one.json()["data"] == want[listed[0]["transactionId"]], one.text
        assert [json.loads(v) for v in kafka_values(broker, KAFKA, 1)] == [{"s": m["kafka"]}]

    check_reads("before")
    # A crash, then reads that must come from the log, not from the entry cache.
    broker.kill()
    for kind in ("json", "bin", "framed", "txn", "kafka"):
        assert files_holding(broker.data_dir, m[kind]) == [], kind
    assert files_holding(broker.data_dir, m["plain"]), "the byte search finds the plain queue's marker"
    broker.start()
    check_reads("after")
    broker.stop()  # a clean stop writes a checkpoint
    for kind in ("json", "bin", "framed", "txn", "kafka"):
        assert files_holding(broker.data_dir, m[kind]) == [], kind
    assert files_holding(broker.data_dir, m["plain"])


def test_without_a_key_encrypted_queues_are_refused_never_stored_in_plain(broker_factory):
    broker = broker_factory(env={"QUEEN_ENCRYPTION_KEY": KEY}).start()
    secret = marker("nokey")
    with httpx.Client(base_url=broker.url, timeout=10.0) as http:
        assert configure(http, ENC, True).status_code == 200
        push_json(http, ENC, "a", {"s": secret})
    broker.stop()

    # Without the key the start is refused (KEY_ID, see the test below); an operator who means
    # to run without it removes the record, and the sealed payloads stay unreadable.
    (Path(broker.data_dir) / "KEY_ID").unlink()
    broker.env = {}
    broker.start()
    with httpx.Client(base_url=broker.url, timeout=10.0) as http:
        res = configure(http, "other", True)
        assert res.status_code == 501, res.text
        assert res.json()["code"] == "unsupported" and "encryption_key" in res.text
        res = http.post("/api/v1/push", json={"items": [queen_api.item(ENC, "p", "b", {"s": secret})]})
        [r] = res.json()
        assert r["status"] == "failed" and "encryption_key" in json.dumps(r), r
        res = http.get(f"/api/v1/pop/queue/{ENC}", params={"batch": 10, "wait": "false"})
        assert res.status_code == 500 and "encryption_key" in res.text, res.text
        assert secret not in res.text
        # Turning encryption off is allowed; the stored message stays unreadable without the key.
        assert configure(http, ENC, False).status_code == 200
        metrics = http.get("/metrics/prometheus").text
        counted = [line for line in metrics.splitlines()
                   if line.startswith("queen_payload_decrypt_failures_total")]
        assert counted and float(counted[0].split()[-1]) >= 1, counted
    broker.stop()
    assert files_holding(broker.data_dir, secret) == []


def test_a_bad_key_value_refuses_the_start_without_printing_it(broker_factory):
    broker = broker_factory(env={"QUEEN_ENCRYPTION_KEY": "abc123" * 5})
    with pytest.raises(Exception) as err:
        broker.start(ready_timeout=20)
    text = broker.log_text()
    assert "encryption_key" in text and "64 hex digits" in text, text
    assert "abc123" not in text and "abc123" not in str(err.value).split("log")[0]


def test_a_flipped_ciphertext_byte_is_an_error_never_garbage(broker_factory):
    broker = broker_factory(env={"QUEEN_ENCRYPTION_KEY": KEY}).start()
    with httpx.Client(base_url=broker.url, timeout=10.0) as http:
        assert configure(http, ENC, True).status_code == 200
        push_json(http, ENC, "victim", {"s": "x" * 64})
        push_json(http, PLAIN, "bystander", {"s": "plain"})
    broker.stop()

    # The segment records carry a CRC32C: flip a byte inside the envelope's ciphertext and fix
    # the record's CRC, so only the envelope's own authentication can notice.
    flipped = False
    for path in segments.segment_files(broker.data_dir):
        data = bytearray(path.read_bytes())
        _, records = segments.read_segment(path)
        for rec in records:
            at = rec.payload.find(b"victim")
            if at < 0:
                continue
            # Frame: ... txn "victim" | envelope: version 1, key id 4, nonce 12, ciphertext...
            target = rec.payload_offset + at + len(b"victim") + 1 + 4 + 12 + 3
            data[target] ^= 0x40
            crc = segments.crc32c(bytes(data[rec.offset + 8:rec.offset + rec.size]))
            struct.pack_into("<I", data, rec.offset + 4, crc)
            flipped = True
        path.write_bytes(bytes(data))
    assert flipped, "the victim's record was found"

    broker.start()
    with httpx.Client(base_url=broker.url, timeout=10.0) as http:
        res = http.get(f"/api/v1/pop/queue/{ENC}", params={"batch": 10, "wait": "false"})
        assert res.status_code == 500, res.text
        assert "could not be decrypted" in res.text and "authentication" in res.text, res.text
        # Only the damaged message fails: a fetch and a listing that cover other queues answer.
        res = http.post("/api/v1/fetch", json={"entries": [
            {"queue": ENC, "partition": "p", "offset": 0}, {"queue": PLAIN, "partition": "p", "offset": 0}]})
        assert res.status_code == 200, res.text
        bad, good = res.json()["entries"]
        assert bad.get("error") == "CORRUPT_MESSAGE", bad
        assert [r["transactionId"] for r in good["records"]] == ["bystander"], good
        res = http.get("/api/v1/messages", params={"limit": 10})
        assert res.status_code == 200, res.text
        assert [m["transactionId"] for m in res.json()["messages"]] == ["bystander"], res.text
        metrics = http.get("/metrics/prometheus").text
        counted = [line for line in metrics.splitlines()
                   if line.startswith("queen_payload_decrypt_failures_total")]
        assert counted and float(counted[0].split()[-1]) >= 1, counted


def test_a_timer_into_an_encrypted_queue_keeps_its_payload_sealed_until_it_fires(broker_factory):
    broker = broker_factory(env={"QUEEN_ENCRYPTION_KEY": KEY}).start()
    secret = marker("timer")
    payload = base64.b64encode(json.dumps({"s": secret}).encode()).decode()

    def timer(key: str, delay_ms: int) -> dict:
        return {"op": "schedule", "queue": ENC, "timerKey": key, "payload": payload,
                "delayMs": delay_ms, "txn": f"tx-{key}"}

    with httpx.Client(base_url=broker.url, timeout=10.0) as http:
        assert configure(http, ENC, True).status_code == 200
        res = http.post("/api/v1/timers", json={"operations": [timer("later", 3_600_000)]})
        assert res.status_code == 200 and res.json()["results"][0]["status"] == "scheduled", res.text
        peek = http.get(f"/api/v1/timers/{ENC}/later").json()
        # Peek shows the payload as stored (spec/native-api.md §2.15): the envelope, flagged.
        assert peek["found"] is True and peek["encrypted"] is True, peek
        assert secret.encode() not in base64.b64decode(peek["payload"])
    broker.kill()
    assert files_holding(broker.data_dir, secret) == []
    broker.start()
    with httpx.Client(base_url=broker.url, timeout=10.0) as http:
        res = http.post("/api/v1/timers", json={"operations": [timer("now", -1)]})
        assert res.status_code == 200, res.text
        got = {}
        for _ in range(50):
            got = pop_all(http, ENC, "timers") if http.get(
                f"/api/v1/timers/{ENC}/now").json()["found"] is False else {}
            if got:
                break
            time.sleep(0.1)
        assert got == {"tx-now": {"s": secret}}, got
    broker.stop()
    assert files_holding(broker.data_dir, secret) == []


def test_another_key_or_no_key_is_refused_once_payloads_were_sealed(broker_factory):
    broker = broker_factory(env={"QUEEN_ENCRYPTION_KEY": OTHER_KEY}).start()
    broker.stop()
    assert not (Path(broker.data_dir) / "KEY_ID").exists(), "nothing sealed: nothing recorded"

    broker.env = {"QUEEN_ENCRYPTION_KEY": KEY}
    broker.start()
    secret = marker("keyid")
    with httpx.Client(base_url=broker.url, timeout=10.0) as http:
        assert configure(http, ENC, True).status_code == 200
        push_json(http, ENC, "a", {"s": secret})
    broker.stop()
    recorded = (Path(broker.data_dir) / "KEY_ID").read_text().strip()
    assert len(recorded) == 8, recorded

    for env, said in (({"QUEEN_ENCRYPTION_KEY": OTHER_KEY}, "refusing to start"),
                      ({}, "no encryption_key")):
        broker.env = env
        with pytest.raises(Exception):
            broker.start(ready_timeout=20)
        text = broker.log_text()
        assert said in text and f"sealed under key id {recorded}" in text, text
        assert OTHER_KEY not in text and KEY not in text

    broker.env = {"QUEEN_ENCRYPTION_KEY": KEY}
    broker.start()
    with httpx.Client(base_url=broker.url, timeout=10.0) as http:
        assert pop_all(http, ENC, "after") == {"a": {"s": secret}}
    broker.stop()
