"""Engine limits under load against a real broker (issue 8): parked long polls are capped per
node and woken by index, and metrics scrapes never stall the engine."""

import asyncio
import threading
import time

import httpx

from queen_api import item, push

PROMPT_S = 2.0


async def _park(port: int, path: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    await writer.drain()
    return reader, writer


async def _status(reader: asyncio.StreamReader, timeout: float) -> int:
    line = await asyncio.wait_for(reader.readline(), timeout)
    return int(line.split()[1])


def test_long_polls_past_the_cap_are_refused_at_once(broker_factory):
    b = broker_factory(env={"QUEEN_MAX_LONG_POLLS": "50"}).start()

    async def run():
        conns = [
            await _park(b.port, f"/api/v1/pop/queue/capped-{i}?wait=true&timeout=15000")
            for i in range(50)
        ]
        await asyncio.sleep(1.0)
        reader, writer = await _park(b.port, "/api/v1/pop/queue/one-more?wait=true&timeout=15000")
        started = time.monotonic()
        status = await _status(reader, 10.0)
        elapsed = time.monotonic() - started
        body = await asyncio.wait_for(reader.read(4096), 5.0)
        for _, w in conns + [(reader, writer)]:
            w.close()
        return status, elapsed, body

    status, elapsed, body = asyncio.run(run())
    assert status == 503, body
    assert b"max_long_polls" in body
    assert elapsed < PROMPT_S


def test_ten_thousand_parked_long_polls_leave_pushes_prompt_and_the_right_one_wakes(broker_factory):
    # 10 001 parked connections plus the pushing client: above the door's default
    # connection limit (10 000), past which accepts wait in the backlog. The door derives its
    # caps from the memory budget too (about 5.3 GB for 10 001 polls), so the budget is set
    # rather than taken from whatever RAM the test machine has.
    broker = broker_factory(env={
        "QUEEN_HTTP_MAX_CONNECTIONS": "20000",
        "QUEEN_MEMORY_LIMIT_BYTES": str(12 << 30),
    }).start()
    port = broker.port

    async def run():
        conns = []
        for batch in range(20):
            conns += await asyncio.gather(*[
                _park(port, f"/api/v1/pop/queue/idle-{(batch * 500 + i) % 100}?wait=true&timeout=30000")
                for i in range(500)
            ])
        target_r, target_w = await _park(port, "/api/v1/pop/queue/target?wait=true&timeout=30000")
        await asyncio.sleep(1.5)
        async with httpx.AsyncClient(base_url=broker.url, timeout=30.0) as http:
            worst = 0.0
            for i in range(20):
                t = time.monotonic()
                res = await http.post("/api/v1/push", json={"items": [item("busy", "p", f"b{i}", i)]})
                assert res.status_code in (200, 201), res.text
                worst = max(worst, time.monotonic() - t)
            t = time.monotonic()
            res = await http.post("/api/v1/push", json={"items": [item("target", "p", "wake", 1)]})
            assert res.status_code in (200, 201)
            status = await _status(target_r, 10.0)
            woke = time.monotonic() - t
            # The idle waiters are still parked (nothing woke them).
            idle_r, _ = conns[0]
            assert not idle_r.at_eof()
        for _, w in conns + [(target_r, target_w)]:
            w.close()
        return worst, status, woke

    worst, status, woke = asyncio.run(run())
    print(f"10k parked: worst push {worst:.3f} s, target woke in {woke:.3f} s")
    assert status == 200
    assert worst < PROMPT_S, f"a push took {worst:.1f} s with 10 000 parked polls"
    assert woke < PROMPT_S, f"the waiter woke after {woke:.1f} s"


def test_scrapes_in_a_tight_loop_do_not_stall_pushes(broker_factory):
    b = broker_factory(env={"QUEEN_MAX_NEW_PARTITIONS_PER_REQUEST": "200000",
                            "QUEEN_MAX_PUSH_ITEMS": "200000"}).start()
    with httpx.Client(base_url=b.url, timeout=120.0) as http:
        wide = [item("wide", f"p{i}", f"t{i}", 1) for i in range(200_000)]
        push(http, b.url, wide, timeout=120.0)
        for g in ("g1", "g2", "g3"):
            res = http.get("/api/v1/pop/queue/wide", params={
                "consumerGroup": g, "subscriptionMode": "all", "wait": "false", "batch": 1,
            })
            assert res.status_code in (200, 204)
    stop = threading.Event()
    scrapes = [0]

    def scrape(path):
        with httpx.Client(base_url=b.url, timeout=30.0) as h:
            while not stop.is_set():
                h.get(path).raise_for_status()
                scrapes[0] += 1

    threads = [threading.Thread(target=scrape, args=(p,)) for p in
               ("/metrics/prometheus", "/metrics", "/metrics/prometheus")]
    for t in threads:
        t.start()
    latencies = []
    try:
        with httpx.Client(base_url=b.url, timeout=30.0) as http:
            end = time.monotonic() + 4.0
            i = 0
            while time.monotonic() < end:
                t = time.monotonic()
                push(http, b.url, [item("hot", "p", f"h{i}", i)])
                latencies.append(time.monotonic() - t)
                i += 1
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
    latencies.sort()
    p50 = latencies[len(latencies) // 2]
    print(f"scrapes {scrapes[0]}, pushes {len(latencies)}, p50 {p50 * 1000:.1f} ms, max {latencies[-1]:.3f} s")
    assert scrapes[0] > 0
    assert p50 < 0.025, f"median push {p50 * 1000:.0f} ms while scraping"
