"""The power-cut test runs the real `queen` ($QUEEN_BIN or target/release/queen)
with its data dir on powerfs, a FUSE filesystem that keeps only what POSIX makes
durable. Where FUSE cannot mount, the test is skipped with the reason."""

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "scripts" / "lib"))
sys.path.insert(0, str(HERE.parent / "python"))  # queen_api
sys.path.insert(0, str(HERE))

from power_mount import MountError, PowerMount, fuse_unavailable  # noqa: E402


def mounted(tmp_path, names_with_any_fsync: bool):
    reason = fuse_unavailable()
    if reason:
        pytest.skip(reason)
    mount = PowerMount(tmp_path, names_with_any_fsync=names_with_any_fsync)
    try:
        mount.start()
    except MountError as error:
        mount.stop()
        pytest.skip(f"FUSE cannot mount on this machine: {error}")
    return mount


@pytest.fixture
def power_mount(tmp_path):
    """powerfs, strictly POSIX."""
    # Diagnostic only (never set by scripts/powercut-test.sh): names become durable
    # with any fsync, as on ext4, to tell a missing directory fsync from other losses.
    mount = mounted(tmp_path, os.environ.get("POWERCUT_NAMES_WITH_ANY_FSYNC") == "1")
    yield mount
    mount.stop()


@pytest.fixture
def journaled_mount(tmp_path):
    """powerfs where any fsync also makes pending names durable, as ext4's journal
    does: for tests about damage beyond POSIX, not about the broker's fsyncs."""
    mount = mounted(tmp_path, True)
    yield mount
    mount.stop()
