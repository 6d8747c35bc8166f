"""Conflation (last-value delivery, spec native-api §2.5.4) through the official client.

A conflating group gets, per partition, only the newest visible message and the rest behind it
is retired for that group only; the policy is the group's, stored at its first registration
(kept across kill -9), and a pop asking the opposite gets the stored policy plus
`conflationConflict`. Every conflating answer carries `"conflation": true`, an empty one too
(200, not 204): the client raises ConflationUnsupportedError otherwise. Refused (400) without a
group and with commit-on-delivery.
"""


import httpx
import pytest
from queen import Queen

import queen_api


async def push(client: Queen, queue: str, partition: str, values: list[int]) -> None:
    for v in values:
        await client.queue(queue).partition(partition).push([{"data": {"v": v}}])


async def pop(client: Queen, queue: str, group: str, conflation: bool) -> list[dict]:
    builder = client.queue(queue).group(group).subscription_mode("all").batch(10).partitions(10).wait(False)
    if conflation:
        builder = builder.conflation(True)
    return await builder.pop()


def values(messages: list[dict]) -> list[tuple[str, int]]:
    return sorted((m["partition"], m["data"]["v"]) for m in messages)


def raw_pop(http: httpx.Client, base: str, queue: str, group: str, conflation: bool) -> httpx.Response:
    params = {"consumerGroup": group, "wait": "false", "batch": 10, "partitions": 10, "subscriptionMode": "all"}
    if conflation:
        params["conflation"] = "true"
    return http.get(f"{base}/api/v1/pop/queue/{queue}", params=params)


def test_a_conflating_group_gets_the_newest_per_partition_and_keeps_its_policy(broker_factory):
    broker = broker_factory("conflation").start()

    async def first(client: Queen) -> None:
        await push(client, "lv", "a", [1, 2, 3])
        await push(client, "lv", "b", [10, 20])
        popped = await pop(client, "lv", "last", True)
        assert values(popped) == [("a", 3), ("b", 20)], popped
        await client.ack(popped, True, {"group": "last"})
        # Everything behind the newest was retired: the next pop is empty, and the client
        # (which checks the echo on empty answers too) does not raise.
        assert await pop(client, "lv", "last", True) == []
        # Another group of the queue is untouched: it gets every message.
        every = await pop(client, "lv", "every", False)
        assert values(every) == [("a", 1), ("a", 2), ("a", 3), ("b", 10), ("b", 20)]
        await push(client, "lv", "a", [4, 5])

    queen_api.with_client(broker.url, first)
    with httpx.Client(timeout=10.0) as http:
        empty = raw_pop(http, broker.url, "lv-none", "last", True)
        assert empty.status_code == 200, empty.text
        assert empty.json()["conflation"] is True and empty.json()["messages"] == []

    broker.kill()
    broker.start()

    async def depths(client: Queen) -> tuple[dict, dict]:
        return (
            await client.admin.get_queue_depth("lv", "last"),
            await client.admin.get_queue_depth("lv", "every"),
        )

    # Depth reads the policy too: two messages behind, one handler run owed.
    last, every = queen_api.with_client(broker.url, depths)
    assert (last["conflation"], last["pending"], last["effectivePending"]) == (True, 2, 1), last
    assert every["conflation"] is False and every["effectivePending"] == every["pending"], every

    with httpx.Client(timeout=10.0) as http:
        # The stored policy survived the crash: a pop that does not ask still conflates, and
        # says the declaration differs.
        res = raw_pop(http, broker.url, "lv", "last", False)
        assert res.status_code == 200, res.text
        body = res.json()
        assert body.get("conflation") is True and body.get("conflationConflict") is True, body
        assert [m["data"]["v"] for m in body["messages"]] == [5], body


def test_the_stored_policy_wins_over_a_conflicting_declaration(broker):
    async def declared(client: Queen) -> None:
        await push(client, "plain", "a", [1, 2])
        first = await pop(client, "plain", "g", False)
        assert values(first) == [("a", 1), ("a", 2)]
        await client.ack(first, True, {"group": "g"})
        await push(client, "plain", "a", [3, 4])
        # Registered without conflation: asking for it now delivers every message, and the
        # client keeps working (it warns once) instead of raising.
        second = await pop(client, "plain", "g", True)
        assert values(second) == [("a", 3), ("a", 4)]

    queen_api.with_client(broker.url, declared)
    with httpx.Client(timeout=10.0) as http:
        res = raw_pop(http, broker.url, "plain", "g", True)
        # Nothing left: an empty answer, with the conflict and without the conflation key.
        assert res.status_code == 200, res.text
        body = res.json()
        assert body.get("conflationConflict") is True and "conflation" not in body, body


def test_conflation_is_refused_without_a_group_and_with_commit_on_delivery(broker):
    async def refused(client: Queen) -> None:
        await push(client, "refused", "a", [1])
        with pytest.raises(httpx.HTTPStatusError) as no_group:
            await client.queue("refused").conflation(True).wait(False).pop()
        assert no_group.value.response.status_code == 400
        with pytest.raises(httpx.HTTPStatusError) as auto_ack:
            await client.queue("refused").group("g").conflation(True).commit_on_delivery().wait(False).pop()
        assert auto_ack.value.response.status_code == 400
        # Nothing was consumed or registered by the refusals.
        left = await pop(client, "refused", "g", False)
        assert values(left) == [("a", 1)]

    queen_api.with_client(broker.url, refused)


def test_a_long_poll_that_ends_empty_still_echoes(broker, http):
    queen_api.push(http, broker.url, [queen_api.item("lp", "a", "lp-1", {"v": 1})])
    res = raw_pop(http, broker.url, "lp", "g", True)
    assert res.json()["conflation"] is True
    params = {"consumerGroup": "g", "wait": "true", "timeout": 300, "conflation": "true"}
    parked = http.get(f"{broker.url}/api/v1/pop/queue/lp", params=params)
    assert parked.status_code == 200, parked.text
    assert parked.json() == {"success": True, "messages": [], "partitionsClaimed": 0, "conflation": True}

