"""Dedup past the hot table (issue 12): with `dedup_hot_ids` at its least, most ids of the
window live only in the id files (`<data_dir>/ids`). A repeated transactionId is still
refused as a duplicate, before and after kill -9, and a damaged id file does not stop the
start (its ids are no longer deduplicated; every other id still is)."""

import re
import time
from pathlib import Path

import httpx

from queen_api import item, pop, push

QUEUE = "dedup-window"
N = 300
ENV = {"QUEEN_DEDUP_HOT_IDS": "16", "QUEEN_DEDUP_FILTER_BYTES": str(64 << 10)}


def id_files(data_dir: Path) -> list[Path]:
    return sorted((data_dir / "ids").glob("*.qidx"))


def push_all(http: httpx.Client, url: str, txns: list[str]) -> list[dict]:
    out = []
    for i in range(0, len(txns), 50):
        out += push(http, url, [item(QUEUE, "p", t, {"n": t}) for t in txns[i : i + 50]])
    return out


def test_duplicates_past_the_hot_table_are_refused_across_kill_and_damage(broker_factory):
    broker = broker_factory(env=ENV).start()
    txns = [f"t{i}" for i in range(N)]
    with httpx.Client(base_url=broker.url, timeout=30.0) as http:
        res = http.post(
            "/api/v1/configure", json={"queue": QUEUE, "options": {"dedupWindowSeconds": 3600}}
        )
        assert res.status_code == 200, res.text
        first = push_all(http, broker.url, txns)
        assert {r["status"] for r in first} == {"queued"}, first[:3]
        ids = {r["transactionId"]: r["message_id"] for r in first}
        assert id_files(broker.data_dir), "the oldest ids were spilled to id files"
        # The first ids left the hot table long ago: found in the files, same message.
        again = push_all(http, broker.url, txns[:40])
        assert [r["status"] for r in again] == ["duplicate"] * 40, again[:3]
        assert [r["message_id"] for r in again] == [ids[t] for t in txns[:40]]
        pid = pop(http, broker.url, QUEUE, group="g", mode="all", wait=False)[0]["partitionId"]
        doc = http.get(f"/api/v1/messages/{pid}/t1")
        assert doc.status_code == 200, doc.text
        assert doc.json()["transactionId"] == "t1", doc.json()

    broker.kill()
    broker.start()
    with httpx.Client(base_url=broker.url, timeout=30.0) as http:
        again = push_all(http, broker.url, txns[:40] + txns[-5:])
        assert [r["status"] for r in again] == ["duplicate"] * 45, again[:3]
        fresh = push_all(http, broker.url, ["new-after-kill"])
        assert fresh[0]["status"] == "queued"

    broker.kill()
    files = id_files(broker.data_dir)
    assert files
    victim = files[0]
    data = bytearray(victim.read_bytes())
    data[4096 + 5] ^= 0x10
    victim.write_bytes(bytes(data))
    broker.start()
    assert "damaged id file" in broker.log_text()
    # Dropped (a later merge of the bucket may reuse its name for a whole file).
    assert not victim.exists() or victim.read_bytes() != bytes(data)
    with httpx.Client(base_url=broker.url, timeout=30.0) as http:
        assert http.get("/health").json()["status"] == "healthy"
        # Ids of the other files, and of the hot table, are still duplicates.
        late = push_all(http, broker.url, txns[-20:])
        assert [r["status"] for r in late] == ["duplicate"] * 20, late[:3]
        metrics = http.get("/metrics/prometheus").text
        assert "queen_dedup_id_files_damaged_total" in metrics


def spilled_total(http: httpx.Client) -> float:
    for line in http.get("/metrics/prometheus").text.splitlines():
        if line.startswith("queen_dedup_spilled_ids_total"):
            return float(line.split()[-1])
    return 0.0


def settled_spilled_total(http: httpx.Client) -> float:
    """The spilled count once three reads 0.2 s apart agree (at most 10 s)."""
    seen = [spilled_total(http)]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        time.sleep(0.2)
        seen.append(spilled_total(http))
        if len(seen) >= 3 and seen[-1] == seen[-2] == seen[-3]:
            break
    return seen[-1]


def test_a_window_past_the_hour_keeps_ids_in_memory_and_spilled_ids_stay_found(broker_factory):
    """Session 35 (review s34 d H1): a group holding a queue whose window passes the hour spills
    nothing (its new ids would each need a search of every minute's files past the hour); the
    ids it spilled before that queue came stay found, before and after kill -9."""
    broker = broker_factory(env=ENV).start()
    short = [f"t{i}" for i in range(N)]
    long = [f"l{i}" for i in range(N)]
    with httpx.Client(base_url=broker.url, timeout=30.0) as http:
        res = http.post(
            "/api/v1/configure", json={"queue": QUEUE, "options": {"dedupWindowSeconds": 3600}}
        )
        assert res.status_code == 200, res.text
        assert {r["status"] for r in push_all(http, broker.url, short)} == {"queued"}
        assert id_files(broker.data_dir), "the 1 h group spilled"
        res = http.post(
            "/api/v1/configure", json={"queue": "dedup-long", "options": {"dedupWindowSeconds": 7200}}
        )
        assert res.status_code == 200, res.text
        # A spill started before the 2 h window came finishes after it (its file is written
        # off the lock) and is counted when the next cycle collects it: one push first.
        out = push(http, broker.url, [item("dedup-long", "p", t, {"n": t}) for t in long[:50]])
        spilled = settled_spilled_total(http)
        assert spilled > 0
        for i in range(50, N, 50):
            out += push(http, broker.url, [item("dedup-long", "p", t, {"n": t}) for t in long[i : i + 50]])
        assert {r["status"] for r in out} == {"queued"}, out[:3]
        assert spilled_total(http) == spilled, "nothing spilled beside a 2 h window"
        again = push_all(http, broker.url, short[:40])
        assert [r["status"] for r in again] == ["duplicate"] * 40, again[:3]
        again = push(http, broker.url, [item("dedup-long", "p", t, {"n": t}) for t in long[:40]])
        assert [r["status"] for r in again] == ["duplicate"] * 40, again[:3]

    broker.kill()
    broker.start()
    with httpx.Client(base_url=broker.url, timeout=30.0) as http:
        again = push_all(http, broker.url, short[:40])
        assert [r["status"] for r in again] == ["duplicate"] * 40, again[:3]
        again = push(http, broker.url, [item("dedup-long", "p", t, {"n": t}) for t in long[:40]])
        assert [r["status"] for r in again] == ["duplicate"] * 40, again[:3]


def test_the_default_bound_is_derived_from_the_memory_budget(broker_factory):
    """Session 35: `dedup_hot_ids` = 0 (the default) is the budget / 16 / 57 B rows, clamped
    to 2^16..=2^22, logged at start."""
    broker = broker_factory(env={"QUEEN_MEMORY_LIMIT_BYTES": str(256 << 20)}).start()
    # The log colours its fields (ANSI escapes between a key, its `=` and its value).
    text = re.sub(r"\x1b\[[0-9;]*m", "", broker.log_text())
    assert "dedup_hot_ids=294337" in text, text[-2000:]
    assert "derived=true" in text
