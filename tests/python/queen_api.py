"""Thin calls to the Queen HTTP API (spec/native-api.md §2.3-§2.6) for our tests.

Every function takes an httpx.Client and the broker's base URL (it changes when
a broker restarts), returns parsed answers and raises on HTTP errors.
"""

from __future__ import annotations

import asyncio
import time

import httpx

QUEUE_MODE = "__QUEUE_MODE__"


def item(queue: str, partition: str, txn: str, payload) -> dict:
    return {"queue": queue, "partition": partition, "transactionId": txn, "payload": payload}


def push(http: httpx.Client, base: str, items: list[dict], timeout: float = 10.0) -> list[dict]:
    """POST /api/v1/push; the per-item results (one per item, in order)."""
    res = http.post(f"{base}/api/v1/push", json={"items": items}, timeout=timeout)
    res.raise_for_status()
    results = res.json()
    if not isinstance(results, list) or len(results) != len(items):
        raise AssertionError(f"push answered {results!r} for {len(items)} items")
    return results


def accepted(result: dict) -> bool:
    return result.get("status") in ("queued", "duplicate")


def pop(
    http: httpx.Client,
    base: str,
    queue: str,
    *,
    group: str | None = None,
    partition: str | None = None,
    batch: int = 100,
    wait: bool = True,
    timeout_ms: int = 1000,
    mode: str | None = None,
    partitions: int | None = None,
    lease_seconds: int | None = None,
) -> list[dict]:
    """GET /api/v1/pop/queue/{q}[/partition/{p}]; [] on 204."""
    params = {"batch": batch, "wait": str(wait).lower(), "timeout": timeout_ms}
    if group:
        params["consumerGroup"] = group
    if mode:
        params["subscriptionMode"] = mode
    if partitions:
        params["partitions"] = partitions
    if lease_seconds:
        params["leaseSeconds"] = lease_seconds
    path = f"/api/v1/pop/queue/{queue}" + (f"/partition/{partition}" if partition else "")
    res = http.get(f"{base}{path}", params=params, timeout=timeout_ms / 1000 + 10)
    if res.status_code == 204:
        return []
    res.raise_for_status()
    return [m for m in res.json().get("messages") or [] if m]


def ack_batch(
    http: httpx.Client, base: str, messages: list[dict], group: str | None, status: str = "completed"
) -> list[dict]:
    """POST /api/v1/ack/batch; the per-acknowledgment results."""
    acks = []
    for message in messages:
        ack = {
            "transactionId": message["transactionId"],
            "partitionId": message["partitionId"],
            "status": status,
            "error": None,
        }
        if message.get("leaseId"):
            ack["leaseId"] = message["leaseId"]
        acks.append(ack)
    res = http.post(
        f"{base}/api/v1/ack/batch",
        json={"acknowledgments": acks, "consumerGroup": group},
        timeout=15.0,
    )
    res.raise_for_status()
    results = res.json()
    if not isinstance(results, list) or len(results) != len(acks):
        raise AssertionError(f"ack/batch answered {results!r} for {len(acks)} acks")
    return results


def drain(
    http: httpx.Client,
    base: str,
    queue: str,
    group: str,
    *,
    partition: str | None = None,
    mode: str = "all",
    deadline_s: float = 60.0,
) -> list[dict]:
    """Pop and ack with `group` until a waiting pop comes back empty."""
    delivered: list[dict] = []
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        messages = pop(http, base, queue, group=group, partition=partition, mode=mode,
                       batch=500, wait=True, timeout_ms=1000)
        if not messages:
            return delivered
        delivered += messages
        results = ack_batch(http, base, messages, group)
        failed = [r for r in results if not r.get("success")]
        assert not failed, f"acks refused while draining {queue}: {failed[:3]}"
    raise AssertionError(f"{queue} not drained by group {group} within {deadline_s} s")


def metric(http: httpx.Client, name: str) -> float:
    """The sum of every series of `name` in GET /metrics/prometheus (on the client's base_url),
    0 when the broker exports none."""
    text = http.get("/metrics/prometheus").text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + "{") or line.startswith(name + " ")
    )


def with_client(url: str, body):
    """Runs `body(client)` with an official `queen` client on `url`, closed after."""
    from queen import Queen

    async def run():
        client = Queen(url)
        try:
            return await body(client)
        finally:
            await client.close()

    return asyncio.run(run())


def metric_at(http: httpx.Client, base: str, name: str) -> float:
    """`metric` of the broker at `base` (for a client without a base_url); 0 when the
    broker does not answer."""
    try:
        text = http.get(f"{base}/metrics/prometheus", timeout=5.0).text
    except httpx.HTTPError:
        return 0.0
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + "{") or line.startswith(name + " ")
    )
