"""A disk that lost more than POSIX allows: the broker refuses to start with an
error, or starts with everything it acknowledged; never starts on less.

Pushes, pops and acks run on powerfs (in its journaled mode, so this test does
not depend on the directory fsyncs test_powercut.py checks); then the broker idles past a checkpoint,
the power is cut cleanly and the durable image is damaged as a bad disk, a bad
restore or an operator might: the log directory gone, the newest segment back
to its bare header, or the state store gone.
"""

from __future__ import annotations

import time

import pytest

from traffic import BROKER_ENV, REFUSAL, Ledger, PowerBroker, check_restart, start_clients, stop_clients

CHECKPOINT_WAIT_S = 2.5  # BROKER_ENV checkpoints every second
SEGMENT_HEADER_BYTES = 16


def newest_segment(mount) -> str:
    segments = [n for n in mount.list_durable("/data/log") if n.startswith("seg-")]
    assert segments, f"no durable segment in /data/log: {mount.list_durable('/data/log')}"
    return f"/data/log/{max(segments)}"


DAMAGE = {
    "log directory gone": lambda mount: mount.drop_name("/data/log"),
    "newest segment back to its header": lambda mount: mount.truncate_file(
        newest_segment(mount), SEGMENT_HEADER_BYTES),
    "state store gone": lambda mount: mount.drop_name("/data/state.redb"),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_disk_is_refused_or_served_whole(journaled_mount, tmp_path, damage):
    power_mount = journaled_mount
    broker = PowerBroker(power_mount.mnt / "data", tmp_path / "logs", name="refusal", env=BROKER_ENV)
    ledger = Ledger()
    try:
        assert broker.start_or_refuse(), f"refused an empty disk:\n{broker.log_tail()}"
        stop, threads = start_clients(broker.url, ledger, 0)
        try:
            deadline = time.monotonic() + 30
            while len(ledger.acked_pushes) < 50 or not ledger.acked:
                assert time.monotonic() < deadline, f"no progress: {ledger.errors[:3]}\n{broker.log_tail()}"
                time.sleep(0.05)
        finally:
            stop_clients(stop, threads, "load")
        assert not ledger.errors, ledger.errors[:5]
        time.sleep(CHECKPOINT_WAIT_S)
        broker.kill()
        power_mount.cut(seed=0, torn=False)
        power_mount.stop()
        assert "log" in power_mount.list_durable("/data"), "the broker did not make its log durable"
        DAMAGE[damage](power_mount)
        power_mount.start()

        if broker.start_or_refuse():
            problems = check_restart(broker.url, ledger, "verify")
            if problems:
                pytest.fail(f"{damage}: started on less than it acknowledged: {problems}", pytrace=False)
            print(f"{damage}: started and serves all {len(ledger.acked_pushes)} acknowledged pushes")
        else:
            lines = [line for line in broker.log_text().splitlines() if REFUSAL.search(line)]
            assert broker.proc.returncode != 0 and lines, (
                f"{damage}: exited {broker.proc.returncode} without an error:\n{broker.log_tail()}")
            print(f"{damage}: refused, exit {broker.proc.returncode}: {lines[-1][-400:]}")
    finally:
        broker.kill()
