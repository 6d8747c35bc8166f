"""SIGTERM: the broker stops accepting, finishes in-flight requests, checkpoints and exits 0
within its grace period; everything acknowledged before is there after a restart."""

import signal
import threading

import httpx

from queen_api import push


def test_sigterm_drains_checkpoints_and_exits_zero(broker_factory):
    b = broker_factory("sigterm", env={"QUEEN_SHUTDOWN_GRACE_SECS": "10"}).start()
    with httpx.Client() as http:
        for i in range(20):
            items = [{"queue": "sigterm-q", "partition": "p", "payload": {"seq": i}}]
            push(http, b.url, items)

    # A long poll in flight when the signal arrives must still be answered (empty, 204).
    answered = {}

    def long_poll():
        r = httpx.get(
            f"{b.url}/api/v1/pop/queue/sigterm-empty?wait=true&timeout=3000",
            timeout=15,
        )
        answered["status"] = r.status_code

    t = threading.Thread(target=long_poll)
    t.start()
    threading.Event().wait(0.5)
    b.proc.send_signal(signal.SIGTERM)
    code = b.proc.wait(timeout=15)
    t.join(timeout=15)
    assert code == 0, f"exit code {code}\n{b.log_tail()}"
    assert answered.get("status") in (200, 204), answered
    assert "stopped cleanly" in b.log_text()

    b.start()
    r = httpx.get(
        f"{b.url}/api/v1/pop/queue/sigterm-q?batch=100&wait=false&subscriptionMode=all&consumerGroup=after",
        timeout=10,
    )
    assert r.status_code == 200, r.text
    seqs = [m["data"]["seq"] for m in r.json()["messages"]]
    assert seqs == list(range(20))
