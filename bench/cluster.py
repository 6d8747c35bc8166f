"""One run that measures a single node and a 3-node loopback cluster side by side (issue 13,
"Done when" 7; docs/benchmarks.md "Cluster").

    .venv/bin/python bench/cluster.py > cluster.json       # about 7 minutes
    .venv/bin/python bench/cluster.py --smoke > smoke.json  # about 30 seconds

For each setup, on fresh data directories under .cache/bench (a real disk: every commit is
fsynced) and free loopback ports:
  1. push: `queen-bench push`, batch 100, 256-byte messages, 4 producers, 100 partitions
     (scripts/bench/push.sh's parameters), closed loop;
  2. e2e closed loop (`queen-bench e2e`, 2 producers, 4 consumers: scripts/bench/e2e.sh's),
     then open loop at half its consume rate: latency from each batch's scheduled send time;
  3. cluster only: KILLS times, SIGKILL the leader (from /health) while a writer pushes one
     message at a time to the surviving nodes; the first-write time is from the kill to the
     answer of the first push sent after it and acknowledged. The killed node is restarted
     on its directory and caught up (it follows the leader and has applied what the leader
     had committed) before the next kill.
queen-bench talks to the leader (a follower would relay: one hop more). During every
measured run each `queen` process's CPU (utime + stime of /proc/<pid>/stat, as % of one
core) is sampled, and its VmRSS and VmHWM read after it. Every process shares this
machine's cores and disk, the tool included. The JSON document goes to stdout, a summary to
stderr; the exit status is non-zero when a run lost or refused anything.

Env: QUEEN_BIN, BENCH_BIN (default target/release/{queen,queen-bench}), DURATION (20 s a
run; --smoke 2), KILLS (5; --smoke 1), HEARTBEAT_MS / ELECTION_MS (the cluster's timing;
default the broker's defaults, 500 / 5000), KEEP_LOGS (a directory: every node's log is
copied there, one folder per setup, before the data directories are removed).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts" / "lib"))

from queen_broker import Broker, free_port  # noqa: E402

TOKEN = "cluster-bench-token-" + "x" * 32
SETTLE_S = 90.0  # the bound on every wait for a leader or a rejoin
FIRST_WRITE_S = 120.0  # the bound on one failover
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def log(*args) -> None:
    print("cluster-bench:", *args, file=sys.stderr, flush=True)


def get_json(url: str, timeout: float = 2.0):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as res:
            return json.loads(res.read())
    except (OSError, ValueError, urllib.error.URLError):
        return None


def post_json(url: str, body, timeout: float = 2.0) -> tuple[int, object]:
    """(status, parsed body); status 0 when there was no answer."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as res:
            return res.status, json.loads(res.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, None
    except (OSError, ValueError, urllib.error.URLError):
        return 0, None


class Setup:
    """A single node or a cluster of `size` nodes, on fresh directories."""

    def __init__(self, size: int, root: Path, timing: dict[str, str]):
        self.size = size
        self.root = root
        ids = list(range(1, size + 1))
        http = {i: free_port() for i in ids}
        env: dict[int, dict[str, str]] = {i: {"QUEEN_KAFKA_ADDR": "127.0.0.1:0"} for i in ids}
        if size > 1:
            raft = {i: free_port() for i in ids}
            for i in ids:
                env[i].update({
                    "QUEEN_CLUSTER_TOKEN": TOKEN,
                    "QUEEN_CLUSTER_ADDR": f"127.0.0.1:{raft[i]}",
                    "QUEEN_NODE_ID": str(i),
                    "QUEEN_PEERS": ",".join(f"{k}=127.0.0.1:{raft[k]}" for k in ids),
                    "QUEEN_PEER_HTTP": ",".join(f"{k}=http://127.0.0.1:{http[k]}" for k in ids),
                    **timing,
                })
        self.nodes = {i: Broker(root / f"node{i}", root / "logs", name=f"node{i}",
                                http_port=http[i], env=env[i]) for i in ids}

    def spawn(self, i: int) -> None:
        self.nodes[i].data_dir.mkdir(parents=True, exist_ok=True)
        self.nodes[i]._spawn()

    def kill_all(self) -> None:
        for n in self.nodes.values():
            n.kill()

    def live(self) -> list[int]:
        return [i for i, n in self.nodes.items() if n.proc and n.proc.poll() is None]

    def leader(self, ids=None) -> int | None:
        """The one leader every node of `ids` (default all) agrees on, else None."""
        ids = list(ids or self.nodes)
        views = {i: get_json(f"{self.nodes[i].url}/health") for i in ids}
        if any(not v for v in views.values()):
            return None
        if self.size == 1:
            return 1 if views[1].get("status") == "healthy" else None
        rafts = {i: v.get("raft") or {} for i, v in views.items()}
        leads = [i for i, r in rafts.items() if r.get("role") == "leader"]
        if len(leads) != 1 or any(r.get("leader") != leads[0] for r in rafts.values()):
            return None
        if any(v.get("status") != "healthy" for v in views.values()):
            return None
        return leads[0]

    def term(self, i: int) -> int | None:
        view = get_json(f"{self.nodes[i].url}/health") or {}
        return (view.get("raft") or {}).get("term")

    def wait_caught_up(self, i: int) -> None:
        """Until node `i` follows the one leader and has applied what that leader had
        committed when it was asked: the leader then replicates to it (review s23 five M3;
        before, the next kill could come before the leader ever reached a restarted node)."""
        deadline = time.monotonic() + SETTLE_S
        lead = self.wait_leader()
        target = ((get_json(f"{self.nodes[lead].url}/health") or {}).get("raft") or {}) \
            .get("committed") or 0
        while time.monotonic() < deadline:
            raft = (get_json(f"{self.nodes[i].url}/health") or {}).get("raft") or {}
            if raft.get("leader") == lead and (raft.get("applied") or 0) >= target:
                return
            time.sleep(0.1)
        raise RuntimeError(f"node {i} did not catch up with leader {lead} within {SETTLE_S} s")

    def wait_leader(self, ids=None) -> int:
        deadline = time.monotonic() + SETTLE_S
        while time.monotonic() < deadline:
            for i in ids or self.nodes:
                if self.nodes[i].proc.poll() is not None:
                    raise RuntimeError(f"node {i} exited:\n{self.nodes[i].log_tail()}")
            lead = self.leader(ids)
            if lead is not None:
                return lead
            time.sleep(0.1)
        raise RuntimeError(f"no leader among {ids or list(self.nodes)} within {SETTLE_S} s")


def cpu_ticks(pid: int) -> int | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)


def memory_kb(pid: int) -> dict[str, int]:
    out = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0])
    except (OSError, ValueError, IndexError):
        pass
    return out


def measured(setup: Setup, run):
    """run() under measure: (its result, {node: cpu % of one core, rss and hwm in kB})."""
    pids = {i: setup.nodes[i].proc.pid for i in setup.live()}
    before = {i: cpu_ticks(p) for i, p in pids.items()}
    start = time.monotonic()
    result = run()
    wall = time.monotonic() - start
    usage = {}
    for i, pid in pids.items():
        after = cpu_ticks(pid)
        cpu = None
        if after is not None and before[i] is not None and wall > 0:
            cpu = round((after - before[i]) / CLK_TCK / wall * 100, 1)
        usage[f"node{i}"] = {"cpu_percent_of_core": cpu, **memory_kb(pid)}
    return result, usage


def bench(bench_bin: Path, url: str, args: list[str], timeout: float) -> dict:
    cmd = [str(bench_bin), *args, "--url", url, "--json"]
    log(" ".join(cmd[1:]))
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"exit_code": None, "error": f"no end within {timeout:.0f} s"}
    try:
        report = json.loads(done.stdout)
    except ValueError:
        return {"exit_code": done.returncode, "error": done.stderr[-2000:]}
    report["exit_code"] = done.returncode
    return report


def first_write_after_kill(setup: Setup, round_no: int) -> dict:
    """SIGKILL the leader, then push one message at a time to the others until one is
    acknowledged; the seconds from the kill to that answer."""
    lead = setup.wait_leader()
    rest = [i for i in setup.nodes if i != lead]
    term_before = setup.term(lead)
    killed = time.monotonic()
    setup.nodes[lead].kill()
    attempts, k = 0, 0
    first = None
    while time.monotonic() - killed < FIRST_WRITE_S:
        node = setup.nodes[rest[k % len(rest)]]
        k += 1
        attempts += 1
        status, body = post_json(f"{node.url}/api/v1/push", {"items": [{
            "queue": "failover", "partition": "p0", "transactionId": f"r{round_no}-{k}",
            "payload": {"k": k}}]}, timeout=2.0)
        if status in (200, 201) and isinstance(body, list) and body \
                and body[0].get("status") == "queued":
            first = time.monotonic() - killed
            break
        if status != 0:
            time.sleep(0.02)  # answered (503 while there is no leader): do not spin
    new_lead = setup.wait_leader(rest)
    # The terms the election took: more than one is a split vote (or a refused one) retried.
    terms = None if term_before is None else (setup.term(new_lead) or 0) - term_before
    setup.spawn(lead)
    setup.wait_caught_up(lead)
    return {"killed": lead, "new_leader": new_lead, "attempts": attempts, "terms": terms,
            "first_write_s": round(first, 3) if first is not None else None}


def run_setup(size: int, cfg, timing: dict[str, str]) -> dict:
    root = Path(tempfile.mkdtemp(prefix=f"cluster-{size}-", dir=cfg.data_root))
    setup = Setup(size, root, timing)
    # The machine may be shared: its load when the setup starts goes with its figures.
    out: dict = {"nodes": size, "loadavg_at_start": os.getloadavg()}
    try:
        for i in setup.nodes:
            setup.spawn(i)
        lead = setup.wait_leader()
        url = setup.nodes[lead].url
        bound = cfg.duration * 4 + 120
        push_args = ["push", "--producers", "4", "--partitions", "100", "--batch", "100",
                     "--msg-bytes", "256", "--duration-secs", str(cfg.duration),
                     "--consumers", "2"]
        out["push"], out["push_usage"] = measured(
            setup, lambda: bench(cfg.bench_bin, url, push_args, bound))
        e2e = ["e2e", "--producers", "2", "--consumers", "4", "--partitions", "100",
               "--batch", "100", "--msg-bytes", "256", "--duration-secs", str(cfg.duration)]
        out["e2e_closed"], out["e2e_closed_usage"] = measured(
            setup, lambda: bench(cfg.bench_bin, url, e2e, bound))
        rate = max(1, int(((out["e2e_closed"].get("consume") or {}).get("msg_per_sec") or 0)
                          / 2))
        out["e2e_open"], out["e2e_open_usage"] = measured(
            setup, lambda: bench(cfg.bench_bin, url, [*e2e, "--rate", str(rate)], bound))
        if size > 1:
            out["failover"] = [first_write_after_kill(setup, r) for r in range(cfg.kills)]
    finally:
        setup.kill_all()
        if cfg.keep_logs:
            shutil.copytree(root / "logs", cfg.keep_logs / f"{size}-node", dirs_exist_ok=True)
        shutil.rmtree(root, ignore_errors=True)
    return out


def summary(runs: list[dict]) -> list[str]:
    lines = []
    for r in runs:
        name = "single node" if r["nodes"] == 1 else f"{r['nodes']}-node cluster"
        push = (r["push"].get("produce") or {}).get("msg_per_sec")
        closed = (r["e2e_closed"].get("consume") or {}).get("msg_per_sec")
        lat = (r["e2e_open"].get("latency_us") or {}).get("e2e") or {}
        rate = (r["e2e_open"].get("config") or {}).get("rate")
        lines.append(f"{name}: push {push} msg/s; e2e closed {closed} msg/s; open at {rate} "
                     f"msg/s: p50 {lat.get('p50')} us, p99 {lat.get('p99')} us")
        lines.append(f"  load average at start: {r['loadavg_at_start']}")
        for phase in ("push", "e2e_closed", "e2e_open"):
            tool = (r[phase].get("tool") or {}).get("cpu_percent_of_core")
            lines.append(f"  {phase}: {json.dumps(r[phase + '_usage'])}, tool {tool} %")
        if "failover" in r:
            times = [f["first_write_s"] for f in r["failover"]]
            done = [t for t in times if t is not None]
            median = statistics.median(done) if done else None
            terms = [f["terms"] for f in r["failover"]]
            lines.append(f"  first write after a leader SIGKILL: {times} s, median {median}; "
                         f"terms each election took: {terms}")
    return lines


def failed(runs: list[dict]) -> list[str]:
    bad = []
    for r in runs:
        for key in ("push", "e2e_closed", "e2e_open"):
            if r[key].get("exit_code") != 0:
                bad.append(f"{r['nodes']} node(s) {key}: exit {r[key].get('exit_code')} "
                           f"{r[key].get('error_samples') or r[key].get('error', '')}")
        bad += [f"{r['nodes']} nodes: kill {k} got no write" for k, f
                in enumerate(r.get("failover", [])) if f["first_write_s"] is None]
    return bad


def bench_config(smoke: bool) -> argparse.Namespace | None:
    """What every cluster bench reads from the environment (QUEEN_BIN is read by the broker
    helper), or None after saying what is wrong."""
    target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")
    cfg = argparse.Namespace(
        bench_bin=Path(os.environ.get("BENCH_BIN") or target / "release" / "queen-bench"),
        duration=int(os.environ.get("DURATION") or (2 if smoke else 20)),
        data_root=REPO / ".cache" / "bench",
        keep_logs=Path(os.environ["KEEP_LOGS"]) if os.environ.get("KEEP_LOGS") else None)
    if not cfg.bench_bin.is_file():
        log(f"{cfg.bench_bin} not found: cargo build --release -p queenmq-bench")
        return None
    if not 1 <= cfg.duration <= 3600:
        log("DURATION is 1..3600 s")
        return None
    cfg.data_root.mkdir(parents=True, exist_ok=True)
    return cfg


def cluster_timing() -> dict[str, str]:
    """The cluster's heartbeat and election timeout from HEARTBEAT_MS / ELECTION_MS."""
    return {k: os.environ[v] for k, v in (("QUEEN_CLUSTER_HEARTBEAT_MS", "HEARTBEAT_MS"),
                                          ("QUEEN_CLUSTER_ELECTION_TIMEOUT_MS", "ELECTION_MS"))
            if os.environ.get(v)}


def smoke_flag(doc: str) -> bool:
    """The one flag every cluster bench takes: --smoke (seconds, not minutes)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="seconds, not minutes")
    return parser.parse_args().smoke


def report(document: dict, lines: list[str], bad: list[str]) -> int:
    """The JSON document to stdout, the summary and failures to stderr; the exit status."""
    print(json.dumps(document, indent=1))
    for line in lines:
        log(line)
    for line in bad:
        log("FAIL:", line)
    return 3 if bad else 0


def main() -> int:
    smoke = smoke_flag(__doc__)
    cfg = bench_config(smoke)
    if cfg is None:
        return 1
    cfg.kills = int(os.environ.get("KILLS") or (1 if smoke else 5))
    if not 0 <= cfg.kills <= 100:
        log("KILLS is 0..100")
        return 1
    timing = cluster_timing()
    runs = [run_setup(1, cfg, timing), run_setup(3, cfg, timing)]
    return report({"scenario": "cluster", "smoke": smoke, "cores": os.cpu_count(),
                   "duration_secs": cfg.duration, "kills": cfg.kills, "timing": timing,
                   "runs": runs}, summary(runs), failed(runs))


if __name__ == "__main__":
    sys.exit(main())
