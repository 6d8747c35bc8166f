"""Dead-letter administration (spec native-api §2.10, §2.19) against the real binary.

`DELETE /api/v1/messages/{pid}/{txn}` removes a dead-letter row (404 for a live message),
`POST …/retry` replays the dead-lettered message into its partition (its group gets it again)
and `DELETE /api/v1/dlq` purges the rows its filter matches (admin role). Each is a replicated
write: what it changed is still so after kill -9.
"""

import asyncio

import httpx
import jwt
import pytest
from queen import Queen

SECRET = "dlq-admin-test-secret-0123456789abcdef"


async def dead_letter(url: str, queue: str, group: str) -> dict:
    """Pushes live-1, dead-1, dead-2 to `queue`/a, acks live-1 and dead-letters the other two
    for `group` (one pop and ack each); the DLQ listing after."""
    client = Queen(url)
    try:
        for txn in ("live-1", "dead-1", "dead-2"):
            await client.queue(queue).partition("a").push([{"data": {"txn": txn}, "transactionId": txn}])
        consumer = client.queue(queue).group(group).subscription_mode("all").batch(1).wait(False)
        for txn in ("live-1", "dead-1", "dead-2"):
            popped = await consumer.pop()
            assert [m["transactionId"] for m in popped] == [txn], popped
            await client.ack(popped, True if txn == "live-1" else "dlq", {"group": group})
        return await client.queue(queue).dlq(group).get()
    finally:
        await client.close()


async def dlq(url: str, queue: str, group: str) -> list[str]:
    client = Queen(url)
    try:
        listing = await client.queue(queue).dlq(group).get()
        return sorted(m["transactionId"] for m in listing["messages"])
    finally:
        await client.close()


def test_delete_retry_and_purge_change_the_dlq_and_survive_kill_9(broker_factory):
    broker = broker_factory("dlq-admin").start()
    listing = asyncio.run(dead_letter(broker.url, "dq", "g"))
    assert sorted(m["transactionId"] for m in listing["messages"]) == ["dead-1", "dead-2"], listing
    pid = listing["messages"][0]["partitionId"]

    async def admin_calls(url: str) -> dict:
        client = Queen(url)
        try:
            # A live message is no dead-letter row: 404, and it stays live.
            with pytest.raises(httpx.HTTPStatusError) as live:
                await client.admin.delete_message(pid, "live-1")
            assert live.value.response.status_code == 404
            with pytest.raises(httpx.HTTPStatusError) as unknown:
                await client.admin.retry_message(pid, "no-such-txn")
            assert unknown.value.response.status_code == 404
            return await client.admin.retry_message(pid, "dead-1")
        finally:
            await client.close()

    retried = asyncio.run(admin_calls(broker.url))
    assert retried["success"] is True and retried["status"] == "queued", retried
    assert asyncio.run(dlq(broker.url, "dq", "g")) == ["dead-2"]

    broker.kill()
    broker.start()

    assert asyncio.run(dlq(broker.url, "dq", "g")) == ["dead-2"], "the retry's delete was kept"

    async def replayed(url: str) -> list[dict]:
        client = Queen(url)
        try:
            return await client.queue("dq").group("g").batch(10).wait(False).pop()
        finally:
            await client.close()

    # The group gets the dead-lettered message again, under the replay's transaction id.
    again = asyncio.run(replayed(broker.url))
    assert [(m["transactionId"], m["data"]) for m in again] == [
        (retried["newTransactionId"], {"txn": "dead-1"})
    ], again

    with httpx.Client(base_url=broker.url, timeout=10.0) as http:
        assert http.delete("/api/v1/dlq").status_code == 400, "a purge names its queue"
        other = http.delete("/api/v1/dlq", params={"queue": "dq", "consumerGroup": "other"})
        assert other.status_code == 200 and other.json()["deleted"] == 0, other.text
        purged = http.delete("/api/v1/dlq", params={"queue": "dq", "consumerGroup": "g"})
        assert purged.status_code == 200 and purged.json()["deleted"] == 1, purged.text

    broker.kill()
    broker.start()

    assert asyncio.run(dlq(broker.url, "dq", "g")) == [], "the purge was kept"
    with httpx.Client(base_url=broker.url, timeout=10.0) as http:
        gone = http.delete(f"/api/v1/messages/{pid}/dead-2")
        assert gone.status_code == 404, gone.text


def test_delete_removes_one_dead_letter_row(broker):
    listing = asyncio.run(dead_letter(broker.url, "dd", "g"))
    pid = listing["messages"][0]["partitionId"]

    async def delete(url: str) -> dict:
        client = Queen(url)
        try:
            return await client.admin.delete_message(pid, "dead-2")
        finally:
            await client.close()

    answer = asyncio.run(delete(broker.url))
    assert answer["success"] is True and answer["dlqRows"] == 1, answer
    assert asyncio.run(dlq(broker.url, "dd", "g")) == ["dead-1"]


def bearer(role: str) -> dict:
    return {"Authorization": "Bearer " + jwt.encode({"sub": "t", "role": role}, SECRET, algorithm="HS256")}


def test_the_writes_need_their_roles(broker_factory):
    broker = broker_factory("dlq-roles", env={"QUEEN_JWT_SECRET": SECRET}).start()
    reader, rw, admin = bearer("read-only"), bearer("read-write"), bearer("admin")
    with httpx.Client(base_url=broker.url, timeout=10.0) as http:
        for headers in (reader,):
            assert http.delete("/api/v1/messages/1/t", headers=headers).status_code == 403
            assert http.post("/api/v1/messages/1/t/retry", json={}, headers=headers).status_code == 403
        # Deleting and replaying one message is read-write; a purge is administration.
        assert http.delete("/api/v1/messages/1/t", headers=rw).status_code == 404
        assert http.post("/api/v1/messages/1/t/retry", json={}, headers=rw).status_code == 404
        for headers in (reader, rw):
            assert http.delete("/api/v1/dlq", params={"queue": "q"}, headers=headers).status_code == 403
        assert http.delete("/api/v1/dlq", params={"queue": "q"}, headers=admin).status_code == 404
