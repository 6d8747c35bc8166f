"""Spec native-api §2.19 (shapes and semantics the other official clients and the dashboard rely
on), one behaviour per test, against the real binary: with the official `queen` client where it
reaches, httpx otherwise. docs/spec-coverage.md maps every §2.19 behaviour to its test(s), here
or in the file that owns the area.

A behaviour the broker does not have yet is `xfail(strict=True)` with the reason: the test turns
red the day the behaviour lands, so the mark is removed with the fix.
"""


import httpx
import pytest
from queen import Queen

import queen_api


def configure(http: httpx.Client, body: dict) -> dict:
    res = http.post("/api/v1/configure", json=body)
    assert res.status_code == 200, res.text
    return res.json()


def push(http: httpx.Client, base: str, queue: str, partition: str, txns: list[str]) -> None:
    items = [queen_api.item(queue, partition, t, {"txn": t}) for t in txns]
    assert all(queen_api.accepted(r) for r in queen_api.push(http, base, items))


def queue_row(http: httpx.Client, queue: str) -> dict:
    rows = [q for q in http.get("/api/v1/resources/queues").json()["queues"] if q["name"] == queue]
    assert len(rows) == 1, rows
    return rows[0]


# --- Bullet 1: namespace and task ---------------------------------------------------------------


def test_namespace_and_task_inside_options_survive_a_top_level_null(broker, http):
    """§2.19 bullet 1: namespace and task may arrive inside `options`; a top-level null (what
    the official client sends from `.config({...}).create()`) does not clear them."""

    async def create(client: Queen):
        return await client.queue("opt-labels").config({"namespace": "billing", "task": "invoice"}).create()

    answer = queen_api.with_client(broker.url, create)
    assert (answer["namespace"], answer["task"]) == ("billing", "invoice"), answer
    detail = http.get("/api/v1/resources/queues/opt-labels").json()
    assert (detail["namespace"], detail["task"]) == ("billing", "invoice"), detail
    # The same over the raw wire, with the labels only in options.
    configure(http, {"queue": "opt-raw", "namespace": None, "task": None,
                     "options": {"namespace": "n2", "task": "t2"}})
    row = queue_row(http, "opt-raw")
    assert (row["namespace"], row["task"]) == ("n2", "t2"), row


def test_top_level_labels_are_kept_and_discovered(broker, http):
    """§2.19 bullet 1 (the top-level half): labels given at the top level are listed and a
    discovery pop by namespace and task finds the queue."""
    configure(http, {"queue": "top-labels", "namespace": "shop", "task": "ship", "options": {}})
    push(http, broker.url, "top-labels", "Default", ["s-1"])
    row = queue_row(http, "top-labels")
    assert (row["namespace"], row["task"]) == ("shop", "ship"), row

    async def discover(client: Queen):
        return await client.queue().namespace("shop").task("ship").batch(10).wait(False).pop()

    assert [m["transactionId"] for m in queen_api.with_client(broker.url, discover)] == ["s-1"]


def test_a_dotted_queue_created_by_a_push_gets_namespace_and_task(broker, http):
    """§2.19 bullet 1: a never-configured queue named `A.B.rest` gets namespace A and task B;
    the queue listing, the namespace and task listings and a discovery pop all see them."""

    async def produce(client: Queen):
        await client.queue("Orders.Ship.eu").push([{"data": {"n": 1}, "transactionId": "o-1"}])

    queen_api.with_client(broker.url, produce)
    row = queue_row(http, "Orders.Ship.eu")
    assert (row["namespace"], row["task"]) == ("Orders", "Ship"), row
    namespaces = [n["namespace"] for n in http.get("/api/v1/resources/namespaces").json()["namespaces"]]
    tasks = [t["task"] for t in http.get("/api/v1/resources/tasks").json()["tasks"]]
    assert "Orders" in namespaces and "Ship" in tasks, (namespaces, tasks)

    async def discover(client: Queen):
        return await client.queue().namespace("Orders").task("Ship").batch(10).wait(False).pop()

    assert [m["transactionId"] for m in queen_api.with_client(broker.url, discover)] == ["o-1"]


# --- Bullet 2: a batch nack of a whole claim ----------------------------------------------------


def test_a_batch_nack_of_a_whole_claim_succeeds_and_the_claim_comes_back(broker, http):
    """§2.19 bullet 2: every item `failed` under the claim's lease in one /ack/batch succeeds
    (judged against the lease as the call began), the lease is released once after the call,
    and the next pop gets the whole claim again, in order, delivery attempt + 1."""
    configure(http, {"queue": "nack", "options": {"retryLimit": 5}})
    push(http, broker.url, "nack", "p", ["n-1", "n-2", "n-3"])

    async def nack(client: Queen):
        consumer = client.queue("nack").group("g").subscription_mode("all").batch(10).wait(False)
        first = await consumer.pop()
        assert [m["transactionId"] for m in first] == ["n-1", "n-2", "n-3"], first
        assert len({m["leaseId"] for m in first}) == 1
        answer = await client.ack(first, False, {"group": "g"})
        again = await consumer.pop()
        return first, answer, again

    first, answer, again = queen_api.with_client(broker.url, nack)
    assert answer["success"] is True, answer
    results = answer["results"]
    assert len(results) == 3, results
    assert all(r["success"] is True for r in results), results
    assert sum(1 for r in results if r.get("leaseReleased")) == 1, results
    assert [m["transactionId"] for m in again] == ["n-1", "n-2", "n-3"], again
    assert [m["deliveryAttempt"] for m in again] == [m["deliveryAttempt"] + 1 for m in first], (first, again)


def test_a_batch_nack_from_the_middle_clamps_the_cursor_at_the_first_failure(broker, http):
    """§2.19 bullet 2: completed items before the first failure stay done; the cursor is
    clamped at the first failed item, which comes back with everything after it."""
    configure(http, {"queue": "nack-mid", "options": {"retryLimit": 5}})
    push(http, broker.url, "nack-mid", "p", ["m-1", "m-2", "m-3", "m-4"])
    first = queen_api.pop(http, broker.url, "nack-mid", group="g", mode="all", wait=False)
    assert [m["transactionId"] for m in first] == ["m-1", "m-2", "m-3", "m-4"], first
    acks = [{"transactionId": m["transactionId"], "partitionId": m["partitionId"],
             "leaseId": m["leaseId"], "status": "completed" if i == 0 else "failed"}
            for i, m in enumerate(first)]
    res = http.post("/api/v1/ack/batch", json={"acknowledgments": acks, "consumerGroup": "g"})
    assert res.status_code == 200 and all(r["success"] for r in res.json()), res.text
    again = queen_api.pop(http, broker.url, "nack-mid", group="g", wait=False)
    assert [m["transactionId"] for m in again] == ["m-2", "m-3", "m-4"], again


# --- Bullet 3: queue detail `segments` ----------------------------------------------------------


def test_queue_detail_counts_what_is_stored_under_segments(broker, http):
    """§2.19 bullet 3: `segments.messages` in the queue detail is what is stored, consumed or
    not, beside the per-state `messages` counts."""
    push(http, broker.url, "seg", "p", ["s-1", "s-2", "s-3"])
    taken = queen_api.pop(http, broker.url, "seg", batch=2, wait=False)
    assert all(r["success"] for r in queen_api.ack_batch(http, broker.url, taken, None))

    async def detail(client: Queen):
        return await client.admin.get_queue("seg")

    body = queen_api.with_client(broker.url, detail)
    assert body["messages"]["pending"] == 1, body
    assert body["segments"]["messages"] == 3, body


# --- Bullet 4: message detail -------------------------------------------------------------------

MESSAGE_KEYS = {"id", "transactionId", "partitionId", "partition", "queue", "queuePath", "namespace",
                "task", "status", "data", "payload", "createdAt", "retryCount", "queueConfig",
                "consumerGroups"}


def test_message_detail_carries_every_key_the_dashboard_reads(broker, http):
    """§2.19 bullet 4: every key of the message detail, `queuePath` = namespace/task/queue,
    `payload` = `data`, and one `consumerGroups` row per group {name, consumed,
    leaseExpiresAt} (a lease held now has its expiry)."""
    configure(http, {"queue": "md", "namespace": "ns", "task": "tk", "options": {}})
    push(http, broker.url, "md", "p", ["md-1", "md-2"])
    done = queen_api.pop(http, broker.url, "md", group="done", mode="all", batch=2, wait=False)
    assert all(r["success"] for r in queen_api.ack_batch(http, broker.url, done, "done"))
    held = queen_api.pop(http, broker.url, "md", group="held", mode="all", batch=1, wait=False)
    assert [m["transactionId"] for m in held] == ["md-1"]
    pid = held[0]["partitionId"]

    async def detail(client: Queen):
        return await client.admin.get_message(pid, "md-1")

    body = queen_api.with_client(broker.url, detail)
    assert MESSAGE_KEYS <= set(body), sorted(MESSAGE_KEYS - set(body))
    assert body["queuePath"] == "ns/tk/md" and (body["namespace"], body["task"]) == ("ns", "tk"), body
    assert body["payload"] == body["data"] == {"txn": "md-1"}, body
    assert (body["partitionId"], body["partition"], body["queue"]) == (pid, "p", "md"), body
    assert body["status"] == "processing" and body["retryCount"] == 0, body
    assert body["queueConfig"]["leaseTime"] == 300, body
    groups = {g["name"]: g for g in body["consumerGroups"]}
    assert groups["done"]["consumed"] is True and groups["done"]["leaseExpiresAt"] is None, groups
    assert groups["held"]["consumed"] is False and groups["held"]["leaseExpiresAt"], groups


# --- Bullet 5: admin shapes the dashboard reads -------------------------------------------------


def test_lagging_consumers_answer_a_bare_array(broker, http):
    """§2.19 bullet 5: `GET /api/v1/consumer-groups/lagging` answers a bare array of rows."""
    push(http, broker.url, "lag", "p", ["l-1"])
    assert queen_api.pop(http, broker.url, "lag", group="slow", mode="all", wait=False)

    async def lagging(client: Queen):
        return await client.admin.get_lagging_consumers(0)

    body = queen_api.with_client(broker.url, lagging)
    assert isinstance(body, list), body
    assert any(r["consumerGroup"] == "slow" and r["queue"] == "lag" for r in body), body


def test_a_group_detail_lists_each_queue_with_its_name_and_partitions(broker, http):
    """§2.19 bullet 5: a consumer group's detail lists each of its queues with the queue's name
    and its partitions."""
    push(http, broker.url, "gd-a", "p1", ["a-1"])
    push(http, broker.url, "gd-a", "p2", ["a-2"])
    push(http, broker.url, "gd-b", "p1", ["b-1"])
    for queue in ("gd-a", "gd-b"):
        queen_api.drain(http, broker.url, queue, "gd")

    async def detail(client: Queen):
        return await client.admin.get_consumer_group("gd")

    body = queen_api.with_client(broker.url, detail)
    assert body["name"] == "gd", body
    queues = {q["queue"]: q for q in body["queues"]}
    assert set(queues) == {"gd-a", "gd-b"}, body
    # `partitions` is the number of the queue's partitions the group has a cursor on.
    assert (queues["gd-a"]["partitions"], queues["gd-b"]["partitions"]) == (2, 1), body


def test_a_subscription_timestamp_change_is_stored_to_the_millisecond(broker, http):
    """§2.19 bullet 5: a subscription-timestamp change stores the instant it was sent, to the
    millisecond: the group's detail shows it back."""
    push(http, broker.url, "ts", "p", ["t-1"])
    assert queen_api.pop(http, broker.url, "ts", group="tg", mode="all", wait=False)
    sent = "2024-03-05T06:07:09.456Z"
    res = http.post("/api/v1/consumer-groups/tg/subscription", json={"subscriptionTimestamp": sent})
    assert res.status_code == 200 and res.json()["newTimestamp"] == sent, res.text

    async def detail(client: Queen):
        return await client.admin.get_consumer_group("tg")

    group = queen_api.with_client(broker.url, detail)
    assert [q["subscribedAt"] for q in group["queues"]] == [sent], group


def test_a_seek_timestamp_is_stored_to_the_millisecond(broker, http):
    """§2.19 bullet 5: a seek to a timestamp stores the instant it was sent, to the millisecond
    (the group's detail shows it back)."""
    push(http, broker.url, "ts", "p", ["t-1"])
    assert queen_api.pop(http, broker.url, "ts", group="tg", mode="all", wait=False)
    sent = "2024-03-05T06:07:08.123Z"

    async def seek(client: Queen):
        return await client.admin.seek_consumer_group("tg", "ts", {"timestamp": sent})

    answer = queen_api.with_client(broker.url, seek)
    assert answer["success"] is True and answer["targetTimestamp"] == sent, answer
    group = http.get("/api/v1/consumer-groups/tg").json()
    assert [q["subscribedAt"] for q in group["queues"]] == [sent], group


def test_queue_detail_partitions_carry_stats(broker, http):
    """§2.19 bullet 5 (and §2.2): each partition of the queue detail carries
    stats{total,pending,processing,completed,failed,deadLetter} with its counts."""
    push(http, broker.url, "pst", "p", ["p-1", "p-2", "p-3"])
    taken = queen_api.pop(http, broker.url, "pst", batch=1, wait=False)
    assert all(r["success"] for r in queen_api.ack_batch(http, broker.url, taken, None))
    part = http.get("/api/v1/resources/queues/pst").json()["partitions"][0]
    stats = part["stats"]
    assert {"total", "pending", "processing", "completed", "failed", "deadLetter"} <= set(stats), part
    assert (stats["total"], stats["pending"], stats["completed"]) == (3, 2, 1), part
    assert part["cursor"]["totalConsumed"] == 1, part
    # A held lease moves one message from pending to processing.
    assert len(queen_api.pop(http, broker.url, "pst", batch=1, wait=False)) == 1
    stats = http.get("/api/v1/resources/queues/pst").json()["partitions"][0]["stats"]
    assert (stats["pending"], stats["processing"], stats["completed"]) == (1, 1, 1), stats


def test_the_overview_carries_its_lag_block(broker, http):
    """§2.19 bullet 5 (and §2.2): the overview carries
    lag{time{avg,median,min,max}, offset{...}}."""
    push(http, broker.url, "ov", "p", ["o-1", "o-2", "o-3"])
    push(http, broker.url, "ov", "q", ["o-4"])
    # One group 4 messages behind, one 1 behind (it completed three).
    assert len(queen_api.pop(http, broker.url, "ov", group="behind", partition="p", mode="all",
                              wait=False)) == 3
    queen_api.drain(http, broker.url, "ov", "ahead", partition="p")

    async def overview(client: Queen):
        return await client.admin.get_overview()

    body = queen_api.with_client(broker.url, overview)
    assert {"avg", "median", "min", "max"} <= set(body["lag"]["time"]), body
    offset = body["lag"]["offset"]
    assert (offset["min"], offset["max"], offset["avg"], offset["median"]) == (1, 4, 2.5, 2.5), body


def test_a_message_listing_carries_total_as_its_page_length(broker, http):
    """§2.19 bullet 5: a message listing carries `total`, the length of the page."""
    push(http, broker.url, "ml", "p", [f"ml-{i}" for i in range(5)])

    async def listing(client: Queen):
        return await client.admin.list_messages(queue="ml", limit=2)

    body = queen_api.with_client(broker.url, listing)
    assert len(body["messages"]) == 2 and body["total"] == 2, body


def test_the_trace_name_listing_answers_under_trace_names(broker, http):
    """§2.19 bullet 5: `GET /api/v1/traces/names` answers its names under `trace_names`."""
    push(http, broker.url, "tn", "p", ["tn-1"])
    msg = queen_api.pop(http, broker.url, "tn", wait=False)[0]
    res = http.post("/api/v1/traces", json={
        "transactionId": "tn-1", "partitionId": msg["partitionId"], "leaseId": msg["leaseId"],
        "traceNames": ["order-7"], "eventType": "step", "data": {"k": 1}})
    assert res.status_code in (200, 201), res.text

    async def names(client: Queen):
        return await client.admin.get_trace_names()

    body = queen_api.with_client(broker.url, names)
    listed = body["trace_names"]
    assert [n if isinstance(n, str) else n.get("traceName") for n in listed] == ["order-7"], body


def test_the_partitions_resource_ranks_a_queue_s_partitions_by_pending(broker, http):
    """§2.19 bullet 5: the partitions resource ranks a queue's partitions by pending count
    (not by stored count nor creation order)."""
    push(http, broker.url, "rank", "a", [f"a-{i}" for i in range(4)])
    push(http, broker.url, "rank", "b", ["b-1"])
    push(http, broker.url, "rank", "c", ["c-1", "c-2"])
    # Queue mode consumes all of `a`: most stored, none pending.
    queen_api.drain(http, broker.url, "rank", queen_api.QUEUE_MODE, partition="a")

    async def partitions(client: Queen):
        return await client.admin.get_partitions(queue="rank")

    body = queen_api.with_client(broker.url, partitions)
    assert [p["name"] for p in body["partitions"]] == ["c", "b", "a"], body


# --- Bullet 6: the dead-letter switch -----------------------------------------------------------


@pytest.mark.parametrize("dlq, after, kept", [
    (True, True, True),
    (True, False, True),
    (False, True, True),
    (False, False, False)])
def test_exhausted_retries_dead_letter_unless_both_switches_are_off(broker, http, dlq, after, kept):
    """§2.19 bullet 6: exhausted retries dead-letter unless both `deadLetterQueue` and
    `dlqAfterMaxRetries` are false."""
    configure(http, {"queue": "sw", "options": {
        "retryLimit": 0, "deadLetterQueue": dlq, "dlqAfterMaxRetries": after}})
    push(http, broker.url, "sw", "p", ["sw-1", "sw-2"])
    first = queen_api.pop(http, broker.url, "sw", group="g", mode="all", batch=1, wait=False)
    assert [m["transactionId"] for m in first] == ["sw-1"]
    results = queen_api.ack_batch(http, broker.url, first, "g", status="failed")
    assert results[0]["success"] is True and results[0]["dlq"] is kept, results

    async def dead(client: Queen):
        return await client.queue("sw").dlq("g").get()

    listing = queen_api.with_client(broker.url, dead)
    assert [m["transactionId"] for m in listing["messages"]] == (["sw-1"] if kept else []), listing
    # Either way the exhausted message is past: the group goes on with the next one.
    after_pop = queen_api.pop(http, broker.url, "sw", group="g", batch=1, wait=False)
    assert [m["transactionId"] for m in after_pop] == ["sw-2"], after_pop


# --- Bullet 7: every option sent is kept --------------------------------------------------------

INERT = {"retryDelay": 2500, "ttl": 77, "maxSize": 1234, "priority": 9}


def test_inert_options_are_kept_and_echoed_everywhere_across_a_restart(broker_factory):
    """§2.19 bullet 7: inert options are persisted and echoed in the configure answer, the queue
    listing and the queue detail, also after kill -9."""
    broker = broker_factory("options").start()

    async def create(client: Queen):
        return await client.queue("inert").config({"retry_delay": 2500, "ttl": 77, "max_size": 1234,
                                                   "priority": 9}).create()

    answer = queen_api.with_client(broker.url, create)

    def shown(options: dict) -> dict:
        return {k: options.get(k) for k in INERT}

    assert shown(answer["options"]) == INERT, answer
    for restarted in (False, True):
        if restarted:
            broker.kill()
            broker.start()
        with httpx.Client(base_url=broker.url, timeout=10.0) as http:
            assert shown(queue_row(http, "inert")["options"]) == INERT, restarted
            detail = http.get("/api/v1/resources/queues/inert").json()
            assert shown(detail["options"]) == INERT, (restarted, detail)


# --- Bullet 8: subscriptionMode=new and late partitions -----------------------------------------


def test_a_new_group_skips_what_was_stored_but_gets_a_late_partition_from_its_start(broker, http):
    """§2.19 bullet 8: a group registered with `subscriptionMode=new` skips what was stored
    before it registered, but a partition created after the registration is delivered from its
    first message."""
    push(http, broker.url, "late", "old", ["old-1", "old-2"])

    async def register(client: Queen):
        return await client.queue("late").group("fresh").subscription_mode("new").batch(10).wait(False).pop()

    assert queen_api.with_client(broker.url, register) == []
    push(http, broker.url, "late", "old", ["old-3"])
    push(http, broker.url, "late", "young", ["young-1", "young-2"])
    got = queen_api.drain(http, broker.url, "late", "fresh", mode="new")
    assert sorted(m["transactionId"] for m in got) == ["old-3", "young-1", "young-2"], got
