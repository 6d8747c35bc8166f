"""Acknowledged data is never silently dropped at start-up (issues 8 and 16).

200 messages of ~64 KiB are pushed and acknowledged with 1 MiB segments, so the
log spans a dozen segment files, and the broker is stopped. Then the data
directory is damaged the way a disk or an operator could, and the broker is
started again:

- a byte flipped in the middle of a sealed (not the last) segment, in each
  field of a record (length, CRC, index, term, payload): the broker must exit
  non-zero naming the file and the record's byte offset; with
  QUEEN_ACCEPT_DATA_LOSS=true it starts and logs at ERROR what it dropped, and
  serves exactly the messages before the damaged record;
- a byte flipped in the checkpoint inside state.redb: rebuilt from the log
  with a WARN when the log still starts at its first index (every message served),
  refused when it does not (first segment gone);
- state.redb that redb cannot open: moved aside and rebuilt when the log is
  whole, refused when its start is gone;
- log/ deleted, or the newest segments deleted, while state.redb remembers a
  committed index and a checkpoint: refused, naming what is missing;
- the first segment deleted under a checkpoint: refused; accepted, the messages of
  the lost records are forgotten (named at ERROR), the survivors are popped by every
  group, and a later start needs no option.

Every test here fails on the binary built from main before this change: it
started `healthy` with messages missing on the damaged segments, the missing
log and the checkpoint ahead of the log, and exited without a rebuild (or
without naming the option) on a damaged checkpoint or state.redb.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path

import httpx
import pytest

import queen_api
from queen_broker import broker_env, free_port
from segments import read_segment, segment_files

QUEUE = "corrupt-start"
COUNT = 200
PAD = "p" * (64 * 1024 - 200)
ENV = {"QUEEN_SEGMENT_BYTES": "1048576"}
ACCEPT = {**ENV, "QUEEN_ACCEPT_DATA_LOSS": "true"}


def mark(i: int) -> str:
    return f"cs-mark-{i:04d}"


def txn(i: int) -> str:
    return f"cs-txn-{i:04d}"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory, queen_bin) -> Path:
    """A stopped broker's data dir holding COUNT acknowledged messages; copied per test."""
    from queen_broker import Broker

    root = tmp_path_factory.mktemp("pristine")
    broker = Broker(root / "data", root / "logs", name="pristine", env=ENV).start()
    try:
        with httpx.Client(timeout=30.0) as http:
            for i in range(COUNT):
                payload = {"mark": mark(i), "pad": PAD}
                [result] = queen_api.push(
                    http, broker.url, [queen_api.item(QUEUE, "Default", txn(i), payload)]
                )
                assert result["status"] == "queued", result
    finally:
        code = broker.stop()
    assert code == 0, broker.log_tail()
    assert len(segment_files(broker.data_dir)) >= 6, "expected a dozen segments"
    return broker.data_dir


@pytest.fixture
def data(pristine, broker_factory):
    """(a fresh copy of the pristine data dir, a Broker on it)."""
    broker = broker_factory("damaged", env=ENV)
    shutil.copytree(pristine, broker.data_dir)
    (broker.data_dir / "LOCK").unlink(missing_ok=True)
    return broker.data_dir, broker


def run_refused(broker, env=ENV) -> str:
    """Starts the binary on the broker's data dir; it must exit non-zero without ever
    answering /health. Its output."""
    port = free_port()
    proc = subprocess.Popen(
        broker.command(port),
        env=broker_env(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    started = False
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    started = True
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
    finally:
        if proc.poll() is None:
            proc.kill()
        output = proc.communicate(timeout=30)[0].decode(errors="replace")
    assert not started, f"the broker started on damaged data:\n{output[-3000:]}"
    assert proc.returncode not in (0, None, -9), f"no refusal within 60 s:\n{output[-3000:]}"
    assert "refusing to start" in output, output[-3000:]
    assert "accept_data_loss" in output, output[-3000:]
    return output


def served(broker, group: str) -> list[str]:
    with httpx.Client(timeout=30.0) as http:
        return [m["transactionId"] for m in queen_api.drain(http, broker.url, QUEUE, group)]


def flip(path: Path, at: int) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0x5A]))


def messages_in(records) -> list[str]:
    found = []
    for record in records:
        found += [txn(int(n)) for n in re.findall(rb"cs-mark-(\d{4})", record.payload)]
    return found


def test_flipped_byte_in_a_sealed_segment_refuses_then_drops_only_with_the_option(data):
    data_dir, broker = data
    segs = segment_files(data_dir)
    seg = segs[len(segs) // 2]
    _, records = read_segment(seg)
    middle = len(records) // 2
    target = records[middle]
    flip(seg, target.payload_offset + len(target.payload) // 2)

    output = run_refused(broker)
    assert seg.name in output and f"offset {target.offset}" in output, output[-3000:]
    assert f"records {target.index}..=" in output, output[-3000:]

    kept = messages_in(
        [r for s in segs[: segs.index(seg)] for r in read_segment(s)[1]] + records[:middle]
    )
    assert 0 < len(kept) < COUNT

    broker.env = ACCEPT
    broker.start()
    errors = [
        line for line in broker.log_text().splitlines()
        if "ERROR" in line and "accept_data_loss" in line and seg.name in line
    ]
    assert errors, broker.log_tail()
    assert f"offset {target.offset}" in errors[0], errors[0]
    assert served(broker, "after-accept") == kept


@pytest.mark.parametrize(
    "field,delta",
    [("length", 0), ("length-high", 3), ("crc", 5), ("index", 9), ("term", 17), ("payload", 30)],
)
def test_a_flipped_byte_in_each_record_field_refuses(data, field, delta):
    data_dir, broker = data
    segs = segment_files(data_dir)
    seg = segs[1]
    _, records = read_segment(seg)
    target = records[len(records) // 2]
    flip(seg, target.offset + delta)
    output = run_refused(broker)
    assert seg.name in output and f"offset {target.offset}" in output, (field, output[-3000:])


def redb_flip_checkpoint(state: Path) -> int:
    """Flips a byte of every copy of the queue's name in state.redb: the checkpoint
    state holds it and nothing else in the file does."""
    data = bytearray(state.read_bytes())
    needle = b"corrupt-start"
    hits = 0
    at = data.find(needle)
    while at >= 0:
        data[at + 3] ^= 0x01
        hits += 1
        at = data.find(needle, at + 1)
    state.write_bytes(bytes(data))
    return hits


def test_flipped_checkpoint_is_rebuilt_from_a_whole_log(data):
    data_dir, broker = data
    assert redb_flip_checkpoint(data_dir / "state.redb") > 0, "queue name not found in state.redb"
    broker.start()
    # Caught by redb's integrity check (the file is moved aside) or by the checkpoint's CRC32C.
    warns = [
        line for line in broker.log_text().splitlines()
        if "WARN" in line and "rebuilding the state from the log" in line
        and "nothing is lost" in line
    ]
    assert warns, broker.log_tail()
    assert served(broker, "after-rebuild") == [txn(i) for i in range(COUNT)]


def test_flipped_checkpoint_without_the_start_of_the_log_refuses(data):
    data_dir, broker = data
    first = segment_files(data_dir)[0]
    assert first.name == "seg-00000000000000000000.qlog", "openraft's first entry is index 0"
    first.unlink()
    assert redb_flip_checkpoint(data_dir / "state.redb") > 0
    output = run_refused(broker)
    # redb's integrity check at open usually catches the flipped value first (page checksums);
    # otherwise the checkpoint's own CRC32C does.
    assert ("checkpoint" in output and "unreadable" in output) or (
        "state.redb cannot be opened" in output
    ), output[-3000:]
    assert "no longer starts" in output or "cannot be rebuilt" in output, output[-3000:]


def test_checkpoint_and_committed_index_without_log_dir_refuse(data):
    data_dir, broker = data
    shutil.rmtree(data_dir / "log")
    output = run_refused(broker)
    assert "log directory" in output and "missing" in output, output[-3000:]
    assert str(data_dir / "log") in output, output[-3000:]


def test_newest_segments_missing_refuses_naming_the_missing_records(data):
    data_dir, broker = data
    segs = segment_files(data_dir)
    last_index = read_segment(segs[-1])[1][-1].index
    for seg in segs[-2:]:
        seg.unlink()
    kept_last = read_segment(segs[-3])[1][-1].index
    output = run_refused(broker)
    assert "missing" in output, output[-3000:]
    assert f"records {kept_last + 1}..={last_index}" in output, output[-3000:]


def test_state_redb_that_cannot_be_opened_is_moved_aside_and_rebuilt(data):
    data_dir, broker = data
    state = data_dir / "state.redb"
    damaged = bytearray(state.read_bytes())
    damaged[0:64] = b"\xaa" * 64  # redb's magic and header
    state.write_bytes(bytes(damaged))
    broker.start()
    assert "nothing is lost" in broker.log_text(), broker.log_tail()
    assert list(data_dir.glob("state.redb.corrupt-*")), "the damaged file is kept aside"
    assert served(broker, "after-redb") == [txn(i) for i in range(COUNT)]
    # The rebuilt store carries on across a restart (vote and committed index saved anew).
    assert broker.stop() == 0
    broker.start()
    assert served(broker, "after-redb-restart") == [txn(i) for i in range(COUNT)]


def test_state_redb_that_cannot_be_opened_without_the_start_of_the_log_refuses(data):
    data_dir, broker = data
    segment_files(data_dir)[0].unlink()
    state = data_dir / "state.redb"
    damaged = bytearray(state.read_bytes())
    damaged[0:64] = b"\xaa" * 64
    state.write_bytes(bytes(damaged))
    output = run_refused(broker)
    assert "state.redb cannot be opened" in output, output[-3000:]
    assert state.exists() and not list(data_dir.glob("state.redb.corrupt-*"))


def test_first_segment_missing_under_a_checkpoint_refuses_naming_it(data):
    """The checkpoint's runs point into the first segment: with it gone the log still opens
    (contiguous, reaching the committed index), and the binary before this check went on to
    fail inside openraft without a word about what was missing.

    Accepted, the messages of the lost records are forgotten: the survivors are delivered
    (the binary before this fix answered every pop 500 "log entry N is missing" for ever, the
    partition head stuck in the lost records), cursors standing in the lost range move past
    it, and the repaired state is checkpointed so a later start needs no option."""
    data_dir, broker = data
    # Before the loss, group "before" acked the first 3 messages and holds a long lease on
    # the next 2: both its cursor and its lease point into what will be lost.
    broker.start()
    with httpx.Client(timeout=30.0) as http:
        acked = queen_api.pop(http, broker.url, QUEUE, group="before", mode="all", batch=3,
                              wait=False)
        assert [m["transactionId"] for m in acked] == [txn(i) for i in range(3)], acked
        results = queen_api.ack_batch(http, broker.url, acked, "before")
        assert all(r.get("success") for r in results), results
        leased = queen_api.pop(http, broker.url, QUEUE, group="before", mode="all", batch=2,
                               wait=False, lease_seconds=3600)
        assert [m["transactionId"] for m in leased] == [txn(3), txn(4)], leased
    assert broker.stop() == 0

    segs = segment_files(data_dir)
    segs[0].unlink()
    first_kept = read_segment(segs[1])[1][0].index
    survivors = messages_in([r for s in segs[1:] for r in read_segment(s)[1]])
    lost = COUNT - len(survivors)
    assert survivors == [txn(i) for i in range(lost, COUNT)], survivors[:3]
    assert lost > 5, "the lost records hold the acked and the leased messages"
    output = run_refused(broker)
    assert "checkpoint" in output and "is still needed" in output, output[-3000:]
    assert f"starts at index {first_kept} ({segs[1].name})" in output, output[-3000:]
    assert f"..={first_kept - 1} are missing" in output, output[-3000:]
    assert str(data_dir / "log") in output, output[-3000:]

    # Accepted: the checkpoint is kept, Raft reads the log from where it now starts, the
    # messages of the lost records are forgotten (named at ERROR), and the survivors of the
    # partition are delivered to every group: queue mode, the group whose cursor and lease
    # stood in the lost range, and a new one.
    broker.env = ACCEPT
    broker.start()
    lines = broker.log_text().splitlines()
    errors = [
        line for line in lines
        if "ERROR" in line and "accept_data_loss" in line and "is still needed" in line
    ]
    assert errors, broker.log_tail()
    forgot = [line for line in lines if "ERROR" in line and "accept_data_loss: forgot" in line]
    assert forgot, broker.log_tail()
    assert f"forgot {lost} messages, offsets 0..={lost - 1}, of partition 'Default' of queue "\
        f"'{QUEUE}'" in forgot[0], forgot
    assert "groups before moved to offset" in forgot[0], forgot
    # The repaired state is checkpointed before serving: even killed at once (no final
    # checkpoint), the next start finds nothing missing and needs no option.
    broker.kill()
    broker.env = ENV
    broker.start()
    with httpx.Client(timeout=30.0) as http:
        queue_mode = [m["transactionId"] for m in queen_api.drain(http, broker.url, QUEUE, None)]
    assert queue_mode == survivors
    assert served(broker, "before") == survivors
    assert served(broker, "after-accept") == survivors
    with httpx.Client(timeout=30.0) as http:
        [result] = queen_api.push(
            http, broker.url, [queen_api.item(QUEUE, "Default", "al-1", {"n": 1})]
        )
        assert result["status"] == "queued", result
        [result] = queen_api.push(
            http, broker.url, [queen_api.item("after-loss", "Default", "al-1", {"n": 1})]
        )
        assert result["status"] == "queued", result
    assert served(broker, "before") == ["al-1"]

    # A later start without the option, after a clean stop.
    assert broker.stop() == 0
    broker.start()
    assert not [
        line for line in broker.log_text().splitlines()
        if "ERROR" in line and "accept_data_loss" in line
    ], broker.log_tail()
    assert served(broker, "before") == []
    assert served(broker, "after-restart") == survivors + ["al-1"]
    with httpx.Client(timeout=30.0) as http:
        got = queen_api.drain(http, broker.url, "after-loss", "g", deadline_s=20)
    assert [m["transactionId"] for m in got] == ["al-1"], got


def test_log_start_and_state_gone_refuses_even_when_loss_is_accepted(data):
    """Without a checkpoint the state cannot be rebuilt from a log that starts past its
    beginning: the option that accepts a loss cannot help, and the broker says so instead of
    logging "starting anyway" and then dying inside openraft."""
    data_dir, broker = data
    segment_files(data_dir)[0].unlink()
    (data_dir / "state.redb").unlink()
    output = run_refused(broker, env=ACCEPT)
    assert "no usable checkpoint" in output, output[-3000:]
    assert "even with accept_data_loss" in output, output[-3000:]
    assert "violates" not in output, output[-3000:]
