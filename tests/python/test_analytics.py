"""`GET /api/v1/status/analytics` (spec native-api §2.19) through the official client.

The series counts the messages the log holds per time bucket of their append, from the
partitions' own records: so it is the same after kill -9. The per-replica system and worker
series (sampled in memory, lost on restart) are tested in test_node_metrics.py.
"""

import asyncio
from datetime import datetime, timedelta, timezone

import httpx
from queen import Queen

import queen_api


def iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


async def analytics(url: str, **params) -> dict:
    client = Queen(url)
    try:
        return await client.admin.get_analytics(**params)
    finally:
        await client.close()


def total(answer: dict) -> int:
    return sum(p["messages"] for p in answer["dataPoints"])


def test_the_series_counts_what_was_pushed_per_bucket_and_survives_kill_9(broker_factory):
    broker = broker_factory("analytics").start()
    with httpx.Client(timeout=10.0) as http:
        items = [queen_api.item("an-a", "p", f"a-{i}", {"i": i}) for i in range(3)]
        items += [queen_api.item("an-b", "p", f"b-{i}", {"i": i}) for i in range(2)]
        assert all(queen_api.accepted(r) for r in queen_api.push(http, broker.url, items))

    now = datetime.now(timezone.utc)
    window = {"interval": "minute", "from": iso(now - timedelta(minutes=5)), "to": iso(now + timedelta(minutes=1))}
    every = asyncio.run(analytics(broker.url, **window))
    assert every["interval"] == "minute"
    stamps = [p["timestamp"] for p in every["dataPoints"]]
    assert len(stamps) in (6, 7) and stamps == sorted(stamps), stamps
    assert all(s.endswith(":00.000Z") for s in stamps), stamps
    assert total(every) == 5, every
    assert total(asyncio.run(analytics(broker.url, queue="an-a", **window))) == 3
    # Defaults: the last 24 hours by the hour.
    daily = asyncio.run(analytics(broker.url))
    assert daily["interval"] == "hour" and total(daily) == 5, daily

    broker.kill()
    broker.start()

    assert total(asyncio.run(analytics(broker.url, **window))) == 5
    # Without `to` the window ends now, not at the last write before the restart.
    before = iso(datetime.now(timezone.utc))
    latest = asyncio.run(analytics(broker.url))
    assert latest["to"] >= before and total(latest) == 5, latest


def test_bad_parameters_are_refused(broker, http):
    assert http.get("/api/v1/status/analytics", params={"interval": "week"}).status_code == 400
    wide = {"interval": "minute", "from": "2020-01-01T00:00:00.000Z", "to": "2021-01-01T00:00:00.000Z"}
    assert http.get("/api/v1/status/analytics", params=wide).status_code == 400
    backwards = {"from": "2021-01-01T00:00:00.000Z", "to": "2020-01-01T00:00:00.000Z"}
    assert http.get("/api/v1/status/analytics", params=backwards).status_code == 400
