"""A full disk (issue 12) against the real binary, its data dir on a 64 MiB tmpfs.

A push that would leave less than `min_free_disk_bytes` is answered 507 `storage_full`
(retriable) without making the node full; once another process takes the disk under the
reserve, every push is answered 507 while reads, pops and acks of what is stored still answer;
the gauge `queen_storage_full` shows it and the log says it, and both clear by themselves once
space is freed. Once space is freed (a filler file in the
same tmpfs is deleted) pushes are accepted again without a restart, and after a SIGKILL and a
restart every push that was answered queued is there.

Mounting needs root: run as another user, the test fails saying so (it does not skip).
"""

import os
import subprocess
import time

import httpx
import pytest

import queen_api

QUEUE = "disk-full"
PARTITION = "p0"
RESERVE = 16 << 20
# Free space left above the reserve when the pushes start: a few dozen pushes fill it.
HEADROOM = 8 << 20
ITEMS_PER_PUSH = 16
PAYLOAD_CHARS = 16 << 10
MAX_PUSHES = 400


def mounted_tmpfs(where) -> None:
    if os.geteuid() != 0:
        pytest.fail("test_disk_full mounts a tmpfs and must run as root (it does not skip)")
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(where)], check=True)


def fill_until(disk, filler, free_left: int) -> None:
    """Writes `filler` until the file system has about `free_left` bytes available."""
    st = os.statvfs(disk)
    available = st.f_bavail * st.f_frsize
    size = available - free_left
    assert size > 0, f"only {available} bytes free on the tmpfs"
    with open(filler, "wb") as f:
        chunk = b"\0" * (1 << 20)
        while size > 0:
            n = min(size, len(chunk))
            f.write(chunk[:n])
            size -= n
        f.flush()
        os.fsync(f.fileno())


def gauge(http: httpx.Client, name: str) -> float:
    text = http.get("/metrics/prometheus").text
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not exported")


def wait_for_gauge(http: httpx.Client, value: float) -> None:
    """The free space is read every 100 ms: waits until `queen_storage_full` shows `value`."""
    for _ in range(300):
        if gauge(http, "queen_storage_full") == value:
            return
        time.sleep(0.05)
    pytest.fail(f"queen_storage_full never became {value}")


def push_one(http: httpx.Client, n: int) -> httpx.Response:
    items = [
        queen_api.item(QUEUE, PARTITION, f"t-{n}-{i}", {"n": n, "pad": "x" * PAYLOAD_CHARS})
        for i in range(ITEMS_PER_PUSH)
    ]
    return http.post("/api/v1/push", json={"items": items}, timeout=30.0)


def accepted_txns(res: httpx.Response) -> set[str]:
    assert res.status_code in (200, 201), f"HTTP {res.status_code}: {res.text[:300]}"
    results = res.json()
    assert all(queen_api.accepted(r) for r in results), results[:3]
    return {r["transactionId"] for r in results}


@pytest.fixture
def disk(tmp_path):
    where = tmp_path / "disk"
    mounted_tmpfs(where)
    yield where
    # The broker fixture's teardown runs first (it is created after this one).
    subprocess.run(["umount", str(where)], check=False)
    if os.path.ismount(where):
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_full_disk_refuses_pushes_serves_reads_and_resumes(disk, broker_factory):
    broker = broker_factory(
        "full",
        env={
            "QUEEN_MIN_FREE_DISK_BYTES": str(RESERVE),
            "QUEEN_SEGMENT_BYTES": str(4 << 20),
        },
    )
    broker.data_dir = disk / "data"
    broker.start()
    filler = disk / "filler"
    fill_until(disk, filler, RESERVE + HEADROOM)

    acked: set[str] = set()
    refused = None
    with httpx.Client(base_url=broker.url, timeout=30.0) as http:
        for n in range(MAX_PUSHES):
            res = push_one(http, n)
            if res.status_code == 507:
                refused = res
                break
            acked |= accepted_txns(res)
        assert refused is not None, f"{MAX_PUSHES} pushes accepted on a full disk"
        assert refused.json()["code"] == "storage_full", refused.text
        assert refused.headers.get("retry-after"), "a retriable refusal says when to retry"
        assert acked, "the headroom took no push at all"
        # The gate kept the reserve whole: the refused pushes did not make the node full.
        assert gauge(http, "queen_storage_full") == 0.0

        # Another process takes what is left: the disk itself is under the reserve now.
        fill_until(disk, disk / "filler2", RESERVE // 2)
        wait_for_gauge(http, 1.0)
        assert "free-space reserve" in broker.log_text()
        res = push_one(http, MAX_PUSHES + 1000)
        assert res.status_code == 507, f"HTTP {res.status_code}: {res.text[:300]}"
        assert "disk is full" in res.json()["error"], res.text

        # Reads and consumption of what is stored go on.
        res = http.get("/api/v1/resources/queues")
        assert res.status_code == 200, res.text[:300]
        popped = queen_api.pop(
            http, broker.url, QUEUE, group="reader", batch=5, wait=False, mode="all"
        )
        assert popped, "a pop of stored messages answers on a full disk"
        results = queen_api.ack_batch(http, broker.url, popped, "reader")
        assert all(r.get("success") for r in results), results
        # Still full: the next push is refused too.
        res = push_one(http, MAX_PUSHES)
        assert res.status_code == 507, f"HTTP {res.status_code}: {res.text[:300]}"

        filler.unlink()
        (disk / "filler2").unlink()
        # Full clears by itself once a reading shows space: no write has to come first.
        wait_for_gauge(http, 0.0)
        assert "disk has space again" in broker.log_text()
        for attempt in range(200):
            res = push_one(http, MAX_PUSHES + 1 + attempt)
            if res.status_code != 507:
                acked |= accepted_txns(res)
                break
        else:
            pytest.fail("pushes still refused after the disk was freed")
        assert gauge(http, "queen_storage_full") == 0.0

    broker.kill()
    broker.start()
    with httpx.Client(base_url=broker.url, timeout=30.0) as http:
        found = {m["transactionId"] for m in queen_api.drain(http, broker.url, QUEUE, "audit")}
    missing = acked - found
    assert not missing, f"{len(missing)} acknowledged pushes lost, e.g. {sorted(missing)[:5]}"


def test_a_full_disk_gets_its_space_back_once_retention_removed_the_messages(disk, broker_factory):
    """The node is full (the disk under the reserve, a checkpoint does not fit the reserve),
    then retention removes every message: the checkpoint whose reclamation repays it is
    written into the reserve, the segments go, and pushes are taken again without anyone
    freeing the disk (docs/storage-format.md "A full disk and reclamation")."""
    broker = broker_factory(
        "reclaim",
        env={
            "QUEEN_MIN_FREE_DISK_BYTES": str(RESERVE),
            "QUEEN_SEGMENT_BYTES": str(1 << 20),
            "QUEEN_CHECKPOINT_INTERVAL_SECS": "1",
            "QUEEN_RETENTION_INTERVAL_MS": "50",
        },
    )
    broker.data_dir = disk / "data"
    broker.start()
    fill_until(disk, disk / "filler", RESERVE + HEADROOM)
    with httpx.Client(base_url=broker.url, timeout=30.0) as http:
        res = http.post(
            "/api/v1/configure",
            json={"queue": QUEUE, "options": {"retentionEnabled": True, "retentionSeconds": 2}},
        )
        assert res.status_code == 200, res.text
        for n in range(MAX_PUSHES):
            res = push_one(http, n)
            if res.status_code == 507:
                break
            accepted_txns(res)
        else:
            pytest.fail(f"{MAX_PUSHES} pushes accepted on a full disk")
        # Another process takes the disk under the reserve: the node is full.
        fill_until(disk, disk / "filler2", RESERVE - (2 << 20))
        wait_for_gauge(http, 1.0)
        # Nobody frees the disk: only the deleted segments can make room.
        for attempt in range(300):
            res = push_one(http, MAX_PUSHES + attempt)
            if res.status_code != 507:
                accepted_txns(res)
                break
            time.sleep(0.1)
        else:
            pytest.fail("the node stayed full: the segments retention emptied were not deleted")
        text = http.get("/metrics/prometheus").text
        deleted = sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("queen_log_segments_deleted_total{")
        )
        assert deleted >= 4, text[-2000:]


def test_one_push_that_does_not_fit_is_refused_without_making_the_node_full(
    disk, broker_factory
):
    broker = broker_factory(
        "big",
        env={
            "QUEEN_MIN_FREE_DISK_BYTES": str(RESERVE),
            "QUEEN_SEGMENT_BYTES": str(4 << 20),
        },
    )
    broker.data_dir = disk / "data"
    broker.start()
    fill_until(disk, disk / "filler", RESERVE + HEADROOM)
    # One push of more than the headroom.
    big = [
        queen_api.item(QUEUE, PARTITION, f"big-{i}", {"pad": "x" * (1 << 20)})
        for i in range((HEADROOM >> 20) + 2)
    ]
    with httpx.Client(base_url=broker.url, timeout=30.0) as http:
        # The free space is read every 100 ms: wait until the gate has seen the filler.
        time.sleep(1.0)
        res = http.post("/api/v1/push", json={"items": big})
        assert res.status_code == 507, f"HTTP {res.status_code}: {res.text[:300]}"
        assert res.json()["code"] == "storage_full", res.text
        assert "does not fit" in res.json()["error"], res.text
        assert gauge(http, "queen_storage_full") == 0.0, "one request is not a full disk"
        # A push that fits is taken at once.
        accepted_txns(push_one(http, 0))


def test_the_reserve_is_bounded(broker_factory, tmp_path):
    broker = broker_factory("bad", env={"QUEEN_MIN_FREE_DISK_BYTES": str((1 << 40) + 1)})
    broker.data_dir.mkdir(parents=True, exist_ok=True)
    broker._spawn()
    assert broker.proc.wait(timeout=30) != 0
    assert "min_free_disk_bytes" in broker.log_text()


def test_due_timers_wait_on_a_full_disk_and_fire_once_it_has_space(disk, broker_factory):
    broker = broker_factory("timers", env={"QUEEN_MIN_FREE_DISK_BYTES": str(RESERVE)})
    broker.data_dir = disk / "data"
    broker.start()
    with httpx.Client(base_url=broker.url, timeout=30.0) as http:
        body = {
            "op": "schedule",
            "queue": "disk-timers",
            "timerKey": "k",
            "payload": "eyJ2IjoxfQ==",
            "delayMs": 1500,
            "txn": "disk-timer-txn",
        }
        res = http.post("/api/v1/timers", json={"operations": [body]})
        assert res.status_code == 200, res.text
        filler = disk / "filler"
        fill_until(disk, filler, RESERVE // 2)
        wait_for_gauge(http, 1.0)
        # Past the timer's due time: on a full disk it stays due instead of writing.
        time.sleep(3.0)
        peek = http.get("/api/v1/timers/disk-timers/k").json()
        assert peek["found"], "a due timer fired into the reserve of a full disk"
        filler.unlink()
        wait_for_gauge(http, 0.0)
        for _ in range(300):
            if not http.get("/api/v1/timers/disk-timers/k").json()["found"]:
                break
            time.sleep(0.1)
        else:
            pytest.fail("the timer never fired once the disk had space")
        (msg,) = queen_api.drain(http, broker.url, "disk-timers", "audit")
        assert msg["transactionId"] == "disk-timer-txn"
