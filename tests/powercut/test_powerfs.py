"""powerfs keeps exactly what POSIX makes durable: if it kept more, the power-cut
test of the broker could not find a missing fsync."""

from __future__ import annotations

import errno
import os
import threading
import time

import pytest


def fsync_path(path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file(path, data: bytes, sync: bool) -> None:
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def power_cycle(mount, torn: bool = False, seed: int = 1) -> dict:
    report = mount.cut(seed=seed, torn=torn)
    mount.stop()
    mount.start()
    return report


def test_a_file_fsynced_without_its_directory_is_lost(power_mount):
    mnt = power_mount.mnt
    (mnt / "d").mkdir()
    write_file(mnt / "d" / "f", b"acknowledged", sync=True)
    report = power_cycle(power_mount)
    assert not (mnt / "d").exists()
    assert "/d/f" in report["names_not_durable"]


def test_names_durable_after_directory_fsyncs_and_data_after_file_fsync(power_mount):
    mnt = power_mount.mnt
    (mnt / "d").mkdir()
    fsync_path(mnt)
    fd = os.open(mnt / "d" / "f", os.O_CREAT | os.O_WRONLY, 0o644)
    os.write(fd, b"synced")
    os.fdatasync(fd)
    os.write(fd, b" and not")
    os.close(fd)
    fsync_path(mnt / "d")
    (mnt / "d" / "late").write_bytes(b"never synced")
    power_cycle(power_mount)
    assert (mnt / "d" / "f").read_bytes() == b"synced"
    assert sorted(os.listdir(mnt / "d")) == ["f"]


def test_a_rename_needs_its_directory_fsync(power_mount):
    mnt = power_mount.mnt
    write_file(mnt / "state", b"old", sync=True)
    fsync_path(mnt)
    write_file(mnt / "state.tmp", b"new", sync=True)
    os.rename(mnt / "state.tmp", mnt / "state")
    power_cycle(power_mount)
    assert (mnt / "state").read_bytes() == b"old"
    assert not (mnt / "state.tmp").exists()

    write_file(mnt / "state.tmp", b"new", sync=True)
    os.rename(mnt / "state.tmp", mnt / "state")
    fsync_path(mnt)
    power_cycle(power_mount)
    assert (mnt / "state").read_bytes() == b"new"
    assert os.listdir(mnt) == ["state"]


def test_an_unlink_needs_its_directory_fsync(power_mount):
    mnt = power_mount.mnt
    write_file(mnt / "seg", b"data", sync=True)
    fsync_path(mnt)
    os.unlink(mnt / "seg")
    power_cycle(power_mount)
    assert (mnt / "seg").read_bytes() == b"data"


@pytest.mark.parametrize("seed", range(6))
def test_a_torn_cut_keeps_a_prefix_of_the_unsynced_writes(power_mount, seed):
    mnt = power_mount.mnt
    write_file(mnt / "log", b"", sync=True)
    fsync_path(mnt)
    written = b"".join(bytes([65 + i]) * 1000 for i in range(20))
    fd = os.open(mnt / "log", os.O_WRONLY)
    for off in range(0, len(written), 1000):
        os.pwrite(fd, written[off : off + 1000], off)
    os.close(fd)
    power_cycle(power_mount, torn=True, seed=seed)
    kept = (mnt / "log").read_bytes()
    assert written.startswith(kept), f"seed {seed}: kept {len(kept)} bytes that are not a prefix"


def test_a_cut_during_a_slow_fsync_fails_it_and_keeps_nothing_of_it(power_mount):
    mnt = power_mount.mnt
    write_file(mnt / "f", b"", sync=True)
    fsync_path(mnt)
    power_mount.slow(1.0)
    fd = os.open(mnt / "f", os.O_WRONLY)
    os.write(fd, b"in flight")
    outcome: list = []

    def sync() -> None:
        try:
            os.fsync(fd)
            outcome.append("ok")
        except OSError as error:
            outcome.append(error.errno)

    thread = threading.Thread(target=sync)
    thread.start()
    time.sleep(0.3)
    power_mount.cut(seed=1, torn=False)
    thread.join(timeout=10)
    os.close(fd)
    assert outcome == [errno.EIO]
    power_mount.stop()
    power_mount.start()
    assert (mnt / "f").read_bytes() == b""
