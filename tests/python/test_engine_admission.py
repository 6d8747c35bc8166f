"""Memory admission in the engine (issue 15): while the broker refuses writes for memory, a pop
that would register a NEW named consumer group (by queue, or by labels in the queues they
match) and a configure that would create a queue get the same retriable 503 as a push; pops of
existing groups and configures of existing queues go on, and once the pressure is gone new
groups are admitted again. The queue-mode group (one per queue) is still registered, so every
queue stays drainable. The old broker registered every new group under pressure."""

import time

import httpx

from queen_api import item, pop, push

MIB = 1 << 20


def _pop_labels(http: httpx.Client, group: str) -> httpx.Response:
    return http.get("/api/v1/pop", params={
        "namespace": "adm-ns", "consumerGroup": group, "wait": "false", "batch": 1,
        "subscriptionMode": "all"})


def _pop_queue(http: httpx.Client, group: str) -> httpx.Response:
    return http.get("/api/v1/pop/queue/adm", params={
        "consumerGroup": group, "wait": "false", "batch": 1, "subscriptionMode": "all"})


def _refused_for_memory(res: httpx.Response) -> bool:
    return (res.status_code == 503 and res.headers.get("retry-after") is not None
            and "memory budget" in res.json().get("error", ""))


def test_new_groups_and_queues_are_refused_at_the_memory_budget(broker_factory):
    # The hot id table is bounded so that the pressure comes from the queues' state, which the
    # delete below gives back: the ids stay remembered for the dedup window (an hour), and with
    # the hot table unbounded they alone could hold the 30 % held share of a 32 MiB budget.
    b = broker_factory("adm", env={"QUEEN_MEMORY_LIMIT_BYTES": str(32 * MIB),
                                   "QUEEN_DEDUP_HOT_IDS": "16384"}).start()
    with httpx.Client(base_url=b.url, timeout=30.0) as http:
        res = http.post("/api/v1/configure", json={"queue": "adm", "namespace": "adm-ns"})
        assert res.status_code in (200, 201), res.text
        push(http, b.url, [item("adm", "p", f"m{i}", i) for i in range(20)])
        # Group "old" exists before the pressure, in both the queue and label forms.
        assert _pop_queue(http, "old").status_code == 200
        assert _pop_labels(http, "old-l").status_code == 200
        # Group "lg" exists in the first and last of three labelled queues, not in the middle
        # one; only the last holds messages.
        for q in ("adm-a", "adm-b", "adm-c"):
            res = http.post("/api/v1/configure", json={"queue": q, "namespace": "adm-ns2"})
            assert res.status_code in (200, 201), res.text
        for q in ("adm-a", "adm-c"):
            res = http.get(f"/api/v1/pop/queue/{q}", params={
                "consumerGroup": "lg", "wait": "false", "subscriptionMode": "all"})
            assert res.status_code in (200, 204), res.text
        push(http, b.url, [item("adm-c", "p", f"c{i}", i) for i in range(5)])

        refused = None
        for round_ in range(400):
            items = [{"queue": "wide", "partition": f"r{round_}-{i}", "payload": i}
                     for i in range(500)]
            res = http.post("/api/v1/push", json={"items": items})
            if res.status_code == 503:
                refused = res
                break
            assert res.status_code in (200, 201), res.status_code
        assert refused is not None and _refused_for_memory(refused), "never at the budget"

        # Under pressure: new groups are refused in both forms, existing ones pop on.
        res = _pop_queue(http, "brand-new")
        assert _refused_for_memory(res), (res.status_code, res.text)
        res = _pop_labels(http, "brand-new-l")
        assert _refused_for_memory(res), (res.status_code, res.text)
        assert _pop_queue(http, "old").status_code in (200, 204)
        assert _pop_labels(http, "old-l").status_code in (200, 204)
        # A label pop passes over the queue where its group would be new and drains the rest.
        res = http.get("/api/v1/pop", params={
            "namespace": "adm-ns2", "consumerGroup": "lg", "wait": "false", "batch": 5})
        assert res.status_code == 200, (res.status_code, res.text)
        assert [m["transactionId"] for m in res.json()["messages"]] == [
            f"c{i}" for i in range(5)], res.text
        # The queue-mode group (one per queue) is still registered: a queue must stay drainable.
        assert pop(http, b.url, "wide", batch=1, wait=False), "queue-mode pops drain"
        # A new queue by configure is refused; reconfiguring an existing one is not.
        res = http.post("/api/v1/configure", json={"queue": "adm-new"})
        assert _refused_for_memory(res), (res.status_code, res.text)
        res = http.post("/api/v1/configure", json={"queue": "adm", "namespace": "adm-ns",
                                                   "options": {"leaseTime": 30}})
        assert res.status_code in (200, 201), res.text
        assert http.get("/health").status_code == 200
        groups = http.get("/api/v1/consumer-groups").text
        assert "brand-new" not in groups, groups

        # The pressure goes: new groups are admitted again.
        assert http.delete("/api/v1/resources/queues/wide").status_code in (200, 204)
        for _ in range(75):
            res = _pop_queue(http, "brand-new")
            if res.status_code != 503:
                break
            time.sleep(0.2)
        assert res.status_code == 200, res.text
        assert len(pop(http, b.url, "adm", group="brand-new-2", mode="all", wait=False)) > 0
