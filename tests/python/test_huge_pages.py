"""Transparent huge pages (issue 12, session 34): left as the kernel decides by default,
off for the broker's process with QUEEN_TRANSPARENT_HUGE_PAGES=false (review s34 p M1 kept
the default as before until a quiet machine measures the throughput cost of off).

mimalloc madvises its arenas for huge pages; a 2 MiB page then stays resident while one small
block lives in it, which cost about 30 B per idle partition at a million partitions
(docs/benchmarks.md "Session 34"). The broker sets PR_SET_THP_DISABLE at start-up when the
key is false; Linux reports the flag as `THP_enabled` in /proc/<pid>/status.
"""

from __future__ import annotations

import os

import pytest


def thp_enabled(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("THP_enabled:"):
                return int(line.split()[1])
    pytest.skip("this kernel does not report THP_enabled")


def test_huge_pages_are_left_by_default_and_off_when_asked(broker_factory):
    if thp_enabled(os.getpid()) != 1:
        pytest.skip("the test runner itself has huge pages off: the broker inherits that")
    default = broker_factory("default").start()
    assert thp_enabled(default.proc.pid) == 1, "left as the kernel decides by default"
    off = broker_factory("off", env={"QUEEN_TRANSPARENT_HUGE_PAGES": "false"}).start()
    assert thp_enabled(off.proc.pid) == 0, "off when asked"
    assert "transparent huge pages" in off.log_text()
