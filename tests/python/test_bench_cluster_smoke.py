"""bench/cluster.py's smoke mode, so the cluster benchmark never rots (docs/benchmarks.md
"Cluster"): a single node and a 3-node cluster each pushed, consumed end to end closed and
open loop for 2 s, and one leader SIGKILL; the script must exit 0 (nothing lost, refused or
failed, a write after the kill) with every figure it reports present. Nothing is timed: the
figures are measured, never asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from queen_broker import REPO, queen_binary

SCRIPT = REPO / "bench" / "cluster.py"

pytestmark = pytest.mark.timeout(300)


def bench_binary() -> Path:
    target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")
    return Path(os.environ.get("BENCH_BIN") or target / "release" / "queen-bench")


def test_the_cluster_benchmark_smoke_run_reports_every_figure(tmp_path):
    if not bench_binary().is_file():
        pytest.skip(f"{bench_binary()} not built (cargo build --release -p queenmq-bench)")
    env = {**os.environ, "QUEEN_BIN": str(queen_binary()), "BENCH_BIN": str(bench_binary()),
           # The test harness's timing: one failover in about 10 s instead of 15-20.
           "HEARTBEAT_MS": "300", "ELECTION_MS": "3000"}
    done = subprocess.run([sys.executable, str(SCRIPT), "--smoke"], capture_output=True,
                          text=True, env=env, timeout=280)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(done.stdout)
    assert doc["smoke"] is True and [r["nodes"] for r in doc["runs"]] == [1, 3]
    for run in doc["runs"]:
        assert run["push"]["produce"]["msg_per_sec"] > 0, run["push"]
        assert run["e2e_closed"]["consume"]["msg_per_sec"] > 0, run["e2e_closed"]
        assert run["e2e_open"]["config"]["rate"] > 0
        assert run["e2e_open"]["latency_us"]["e2e"]["p99"] > 0, run["e2e_open"]
        for phase in ("push_usage", "e2e_closed_usage", "e2e_open_usage"):
            usage = run[phase]
            assert sorted(usage) == [f"node{i}" for i in range(1, run["nodes"] + 1)], usage
            for node in usage.values():
                assert node["cpu_percent_of_core"] is not None and node["VmRSS"] > 0, usage
    kills = doc["runs"][1]["failover"]
    assert len(kills) == 1 and kills[0]["first_write_s"] is not None, kills
    assert kills[0]["new_leader"] != kills[0]["killed"], kills
    assert kills[0]["terms"] >= 1, kills  # a new leader is elected in a later term
