"""Power cuts at random moments under load lose nothing that was acknowledged.

The real `queen` runs with its data dir on powerfs (see powerfs.py), which keeps
only what POSIX makes durable. Producers push, a consumer group pops and acks;
at a random moment the power is cut: the broker is SIGKILLed and everything not
made durable is dropped (before or after the kill; sometimes with torn writes,
sometimes in the middle of a slow fsync, sometimes after an fsync failed and
dropped its writes as Linux does). The broker restarts on what remains.
After every restart:
- every push answered "queued"/"duplicate" is present exactly once (read with a
  fresh consumer group, subscriptionMode=all), and nothing else is there;
- no message is delivered to the acking group by a pop sent after an ack of it
  was answered with success;
- or the broker refused to start: non-zero exit with an error in its log. It
  must never start silently on less than it acknowledged.
The first start is on an empty disk: the data dir var/queen does not exist yet
(the broker creates both levels); a later lineage starts on an existing, empty data dir.
"""

from __future__ import annotations

import os
import random
import time

import pytest

from traffic import (
    BROKER_ENV,
    REFUSAL,
    Ledger,
    PowerBroker,
    check_restart,
    redelivery_problems,
    start_clients,
    stop_clients,
)

CUTS = 12
DATA_DIR = "var/queen"
MIN_ACKED_BEFORE_CUT = 3  # a cut before anything was acknowledged proves nothing
PROGRESS_TIMEOUT_S = 30.0


def load_and_cut(cut_no: int, rng: random.Random, broker: PowerBroker, mount, ledger: Ledger) -> dict:
    """Pushes, pops and acks until some pushes are acknowledged, then a random
    moment later the power cut; the mount is back up (on what was durable) on return."""
    slow = rng.choice([0.0, 0.0, 0.05, 0.2])
    # The first cut on a disk keeps strictly what was synced: a torn cut may keep
    # a name by chance and hide a missing directory fsync for the rest of the disk.
    torn = ledger.cuts > 0 and rng.random() < 0.5
    ledger.cuts += 1
    kill_first = rng.random() < 0.5
    fail_fsync = rng.random() < 0.25
    how = (f"cut {cut_no} ({'kill, then power' if kill_first else 'power, then kill'}"
           f"{', torn writes' if torn else ''}{f', fsync {slow} s' if slow else ''}"
           f"{', after a failed fsync' if fail_fsync else ''})")
    mount.slow(slow)
    with ledger.lock:
        ledger.round_acked = 0
    stop, threads = start_clients(broker.url, ledger, cut_no)
    try:
        deadline = time.monotonic() + PROGRESS_TIMEOUT_S
        while ledger.round_acked < MIN_ACKED_BEFORE_CUT:
            assert broker.proc.poll() is None, f"{how}: broker died before the cut:\n{broker.log_tail()}"
            assert time.monotonic() < deadline, (
                f"{how}: no push acknowledged within {PROGRESS_TIMEOUT_S} s; "
                f"client errors {ledger.errors[:3]}; log:\n{broker.log_tail()}")
            time.sleep(0.02)
        time.sleep(rng.uniform(0.0, 2.5))
        if fail_fsync:
            # The broker must not acknowledge what that fsync held, nor trust a later one.
            mount.fail_fsyncs(1)
            time.sleep(rng.uniform(0.2, 1.0))
        if kill_first:
            broker.kill()
        report = mount.cut(seed=rng.randrange(1 << 30), torn=torn)
        broker.kill()
    finally:
        stop_clients(stop, threads, how)
    assert not ledger.errors, f"{how}: clients were refused: {ledger.errors[:5]}"
    mount.stop()
    mount.start()
    return {"how": how, **report}


def cut_summary(report: dict) -> str:
    return (f"names not durable ({report['names_not_durable_count']}): "
            f"{report['names_not_durable']}; files short of what was written: "
            f"{report['files_short']}; durable after the cut: {report['durable_paths']}")


@pytest.mark.timeout(270)
def test_power_cut_at_random_moments_loses_nothing_acknowledged(power_mount, tmp_path):
    seed = int(os.environ.get("POWERCUT_SEED", "20261203"))
    print(f"POWERCUT_SEED={seed}")
    rng = random.Random(seed)
    # Two levels the broker creates on the first disk: each needs its parent fsynced.
    data_dir = power_mount.mnt / DATA_DIR
    broker = PowerBroker(data_dir, tmp_path / "logs", name="powercut", env=BROKER_ENV)
    findings: list[str] = []
    outcomes: list[str] = []
    ledger = Ledger()
    lineage = 0
    last_cut: dict | None = None

    def new_disk(existing_dir: bool) -> None:
        nonlocal ledger, lineage, last_cut
        broker.kill()
        power_mount.stop()
        power_mount.reset(dirs=(DATA_DIR,) if existing_dir else ())
        power_mount.start()
        ledger, last_cut = Ledger(), None
        lineage += 1

    def fresh_start(existing_dir: bool) -> None:
        new_disk(existing_dir)
        if not broker.start_or_refuse():
            raise AssertionError(f"broker refused an empty disk:\n{broker.log_tail()}")

    try:
        # Disk 0 is the fixture's: empty, no data dir at all (the broker makes it).
        for cut_no in range(CUTS + 1):
            label = f"start {cut_no} (disk {lineage})"
            if not broker.start_or_refuse():
                assert last_cut is not None, f"{label}: refused an empty disk:\n{broker.log_tail()}"
                log = broker.log_text()
                message = [line for line in log.splitlines() if REFUSAL.search(line)]
                outcomes.append(f"{label}: refused, exit {broker.proc.returncode}: "
                                f"{message[-1][-300:] if message else '(no message)'}"
                                + (f"\n    after {last_cut['how']}: {cut_summary(last_cut)}"
                                   if last_cut else ""))
                # Nothing here damages what was fsynced: a cut keeps every synced byte and name,
                # so a refusal means recovery mistook an ordinary cut for lost data, and the
                # broker would stay down until an operator accepted a loss that never happened.
                findings.append(f"{label}: refused to start after an ordinary power cut")
                if broker.proc.returncode == 0 or not message:
                    findings.append(f"{label}: exited {broker.proc.returncode} without a clear "
                                    f"error; log tail:\n{broker.log_tail()}")
                if cut_no == CUTS:
                    break
                fresh_start(existing_dir=lineage % 2 == 0)
            elif last_cut is not None:
                problems = check_restart(broker.url, ledger, f"verify-{cut_no}")
                problems += redelivery_problems(broker.url, ledger)
                ops = last_cut["name_ops"]
                outcomes.append(f"{label}: started after {last_cut['how']}, "
                                f"{len(ledger.acked_pushes)} acked pushes and "
                                f"{len(ledger.acked)} acked messages checked (that mount: "
                                f"{last_cut['fsyncs']} fsyncs, {last_cut['failed_fsyncs']} failed, "
                                f"{ops['set']} names made, "
                                f"{ops['mv']} renamed, {ops['del']} removed)")
                if problems:
                    findings.append(f"{label}, after {last_cut['how']}: " + "; ".join(problems)
                                    + f"\n    at that cut: {cut_summary(last_cut)}")
                    if cut_no < CUTS:
                        fresh_start(existing_dir=lineage % 2 == 0)
                elif cut_no == CUTS // 2 and lineage == 0:
                    # The second half starts on a data dir that exists and is empty.
                    fresh_start(existing_dir=True)
            else:
                outcomes.append(f"{label}: started on an empty disk")
            if cut_no == CUTS:
                break
            last_cut = load_and_cut(cut_no, rng, broker, power_mount, ledger)
    finally:
        broker.kill()

    print("\n".join(["power cuts:"] + outcomes))
    verified = sum(1 for o in outcomes if "started after" in o)
    if findings:
        pytest.fail(f"{len(findings)} power cuts lost acknowledged work:\n" + "\n".join(findings),
                    pytrace=False)
    if verified < CUTS // 2:
        pytest.fail(f"only {verified} restarts could be checked:\n" + "\n".join(outcomes), pytrace=False)
