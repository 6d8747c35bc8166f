"""Label pops (by namespace and/or task, no queue) find their queues through the engine's label
index (issue 8): with 2000 queues and parked label pops the broker stays responsive, a push to
a labelled queue wakes the label pop that matches it (and not one that does not), a relabelled
queue moves between filters, and a deleted one leaves them.
"""

import threading
import time

import httpx

from queen_api import item, push

QUEUES = 2000
PARKED = 50
# Generous: the machine is shared (2 cores).
PROMPT_S = 5.0


def _configure(http: httpx.Client, queue: str, namespace: str, task: str) -> None:
    res = http.post("/api/v1/configure",
                    json={"queue": queue, "namespace": namespace, "task": task})
    assert res.status_code in (200, 201), res.text


def _pop_labels(url: str, out: list, timeout_ms: int, **labels) -> None:
    params = {"wait": "true", "timeout": timeout_ms, "batch": 10, **labels}
    with httpx.Client(base_url=url, timeout=timeout_ms / 1000 + 10) as h:
        res = h.get("/api/v1/pop", params=params)
        msgs = res.json().get("messages", []) if res.status_code == 200 else []
        out.append((res.status_code, [m["queue"] if "queue" in m else m.get("queueName")
                                      for m in msgs], [m["transactionId"] for m in msgs]))


def test_label_pops_among_many_queues_are_woken_by_the_matching_push(broker):
    with httpx.Client(base_url=broker.url, timeout=30.0) as http:
        for i in range(QUEUES):
            _configure(http, f"lq{i}", f"ns{i % 10}", f"t{i % 7}")
        # Parked label pops that nothing will match, across the filters.
        idle: list = []
        idlers = [threading.Thread(target=_pop_labels, args=(broker.url, idle, 6000),
                                   kwargs={"namespace": f"ns{i % 10}", "task": "none"},
                                   daemon=True) for i in range(PARKED)]
        for t in idlers:
            t.start()
        # The pop under test: namespace ns3 and task t5 match lq{i} with i%10==3 and i%7==5.
        woken: list = []
        waiter = threading.Thread(target=_pop_labels, args=(broker.url, woken, 20000),
                                  kwargs={"namespace": "ns3", "task": "t5"}, daemon=True)
        waiter.start()
        time.sleep(1.0)
        # A push to a queue of another filter does not reach it.
        push(http, broker.url, [item("lq4", "p", "other", 1)])
        t = time.monotonic()
        assert http.get("/health").status_code == 200
        assert time.monotonic() - t < PROMPT_S
        time.sleep(0.5)
        assert woken == [], woken
        # 33 % 10 == 3 and 33 % 7 == 5.
        push(http, broker.url, [item("lq33", "p", "hit", 1)])
        waiter.join(timeout=PROMPT_S + 10)
        assert not waiter.is_alive(), "the matching push did not wake the label pop"
        assert woken and woken[0][0] == 200 and woken[0][2] == ["hit"], woken

        # Relabelled, lq4 now matches ns3/t5; deleted, lq33 matches nothing.
        _configure(http, "lq4", "ns3", "t5")
        assert http.delete("/api/v1/resources/queues/lq33").status_code in (200, 204)
        again: list = []
        _pop_labels(broker.url, again, 2000, namespace="ns3", task="t5")
        assert again[0][0] == 200 and again[0][2] == ["other"], again
        for t in idlers:
            t.join(timeout=15)
        assert all(code in (200, 204) and not ids for code, _, ids in idle), idle


def test_a_lease_running_out_wakes_the_parked_label_pop_of_its_group(broker):
    """The tick finds label waiters through the time index of group timers (not by walking
    groups x queues): a lease that runs out under 300 queues and idle parked groups still
    hands the message to the label pop of the same group waiting for it."""
    with httpx.Client(base_url=broker.url, timeout=30.0) as http:
        for i in range(300):
            _configure(http, f"tq{i}", "tns", f"t{i % 3}")
        push(http, broker.url, [item("tq42", "p", "leased", 1)])
        # Groups subscribed after the push, parked over every queue: they never get it.
        idle: list = []
        idlers = [threading.Thread(target=_pop_labels, args=(broker.url, idle, 8000),
                                   kwargs={"namespace": "tns", "consumerGroup": f"idle{i}",
                                           "subscriptionMode": "new"},
                                   daemon=True) for i in range(20)]
        for t in idlers:
            t.start()
        first: list = []
        _pop_labels(broker.url, first, 2000, namespace="tns", consumerGroup="g",
                    subscriptionMode="all", leaseSeconds=1)
        assert first[0][0] == 200 and first[0][2] == ["leased"], first
        # Not acked: the lease runs out after a second and the parked pop gets the message.
        again: list = []
        start = time.monotonic()
        _pop_labels(broker.url, again, 15000, namespace="tns", consumerGroup="g")
        assert again[0][0] == 200 and again[0][2] == ["leased"], again
        assert time.monotonic() - start < 1 + PROMPT_S, "woken by the lease, not the timeout"
        for t in idlers:
            t.join(timeout=15)
        assert all(code in (200, 204) and not ids for code, _, ids in idle), idle
