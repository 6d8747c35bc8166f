"""Two tenants on a 3-node loopback cluster (issue 13, "Done when" 7: "two tenants whose
leaders sit on different nodes, with each process's CPU share showing where the planning load
went"; docs/benchmarks.md "Two tenants").

    .venv/bin/python bench/cluster_tenants.py > tenants.json       # about 2 minutes
    .venv/bin/python bench/cluster_tenants.py --smoke > smoke.json  # about 30 seconds

Three `queen` processes with `cluster_tenant_groups` on and a JWT secret, on fresh data
directories under .cache/bench. Each tenant's first write declares it through the `default`
group; its group's leader is the one node every node's `/metrics` (asked with that tenant's
token) agrees on. Then, each phase `queen-bench push` (bench/cluster.py's push parameters,
with the tenant's token) against the leader of the tenant it drives, while each process's CPU
(utime + stime, % of one core) is sampled:
  1. tenant A alone;
  2. tenant B alone;
  3. both at once, one `queen-bench` each.
So the share of each node in each phase says which node planned which tenant's writes. Every
process (the tools included) shares this machine's cores and disk; the load average at the
start goes with the figures. Exit status non-zero when a push refused or lost anything, or
when the two tenants' leaders were found on the same node (the spread is what is measured).

Env: QUEEN_BIN, BENCH_BIN, DURATION (20 s a phase; --smoke 2), HEARTBEAT_MS / ELECTION_MS,
KEEP_LOGS (a directory: every node's log is copied there).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import jwt

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cluster import (SETTLE_S, Setup, bench_config, cluster_timing, log,  # noqa: E402
                     measured, report, smoke_flag)

SECRET = "tenants-bench-secret-" + "s" * 32
TENANTS = ("tenant-a", "tenant-b")
PUSH = ["push", "--producers", "4", "--partitions", "100", "--batch", "100",
        "--msg-bytes", "256"]


def token(tenant: str) -> str:
    now = int(time.time())
    # Long enough for any run this script allows (DURATION ≤ 3600 s a phase).
    claims = {"sub": "bench", "iat": now, "exp": now + 6 * 3600, "role": "admin",
              "tenant": tenant}
    return jwt.encode(claims, SECRET, algorithm="HS256")


def request(url: str, tenant: str, body=None, timeout: float = 5.0):
    """(status, parsed body or None) of a GET (body None) or a JSON POST as `tenant`."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="GET" if body is None else "POST",
                                 headers={"content-type": "application/json",
                                          "authorization": f"Bearer {token(tenant)}"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as res:
            return res.status, json.loads(res.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, None
    except (OSError, ValueError, urllib.error.URLError):
        return 0, None


def declare(setup: Setup, tenant: str) -> None:
    """Pushes one message as `tenant` through the nodes in turn until one is queued: the
    first write declares the tenant's group (relayed to the `default` leader)."""
    deadline = time.monotonic() + SETTLE_S
    k = 0
    while time.monotonic() < deadline:
        node = setup.nodes[1 + k % setup.size]
        k += 1
        status, body = request(f"{node.url}/api/v1/push", tenant, {"items": [{
            "queue": "declare", "partition": "p0", "transactionId": f"declare-{k}",
            "payload": {"k": k}}]}, timeout=15.0)
        if status in (200, 201) and isinstance(body, list) and body \
                and body[0].get("status") in ("queued", "duplicate"):
            return
        time.sleep(0.2)
    raise RuntimeError(f"no write of {tenant} accepted within {SETTLE_S} s")


def tenant_leader(setup: Setup, tenant: str) -> int:
    """The node that leads `tenant`'s group once every node's view of it agrees."""
    deadline = time.monotonic() + SETTLE_S
    views: dict = {}
    while time.monotonic() < deadline:
        views = {}
        for i, n in setup.nodes.items():
            status, body = request(f"{n.url}/metrics", tenant)
            views[i] = (body or {}).get("raft") if status == 200 and isinstance(body, dict) \
                else None
        if all(views.values()):
            # The /metrics raft block names role and term, not the leader: one leader, every
            # other node a follower, all in one term.
            leads = [i for i, r in views.items() if r.get("role") == "leader"]
            terms = {r.get("term") for r in views.values()}
            follow = [i for i, r in views.items() if r.get("role") == "follower"]
            if len(leads) == 1 and len(terms) == 1 and len(follow) == len(views) - 1:
                return leads[0]
        time.sleep(0.2)
    raise RuntimeError(f"no agreed leader of {tenant}'s group: {views}")


def pushes(cfg, runs: dict[str, str]) -> dict[str, dict]:
    """Runs one `queen-bench push` per tenant at once, `runs` = tenant -> leader URL."""
    procs = {}
    for tenant, url in runs.items():
        cmd = [str(cfg.bench_bin), *PUSH, "--duration-secs", str(cfg.duration),
               "--queue", f"bench-{tenant}", "--url", url, "--json"]
        log(tenant, " ".join(cmd[1:]))
        env = {**os.environ, "BENCH_AUTHORIZATION": f"Bearer {token(tenant)}"}
        procs[tenant] = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         text=True, env=env)
    out = {}
    for tenant, proc in procs.items():
        try:
            stdout, stderr = proc.communicate(timeout=cfg.duration * 4 + 120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            out[tenant] = {"exit_code": None, "error": "no end in time"}
            continue
        try:
            answer = json.loads(stdout)
        except ValueError:
            answer = {"error": stderr[-2000:]}
        answer["exit_code"] = proc.returncode
        out[tenant] = answer
    return out


def phase(setup: Setup, cfg, runs: dict[str, str]) -> dict:
    load = os.getloadavg()
    result, usage = measured(setup, lambda: pushes(cfg, runs))
    return {"loadavg_at_start": load, "push": result, "usage": usage}


def run(cfg, timing: dict[str, str]) -> dict:
    root = Path(tempfile.mkdtemp(prefix="cluster-tenants-", dir=cfg.data_root))
    setup = Setup(3, root, timing)
    for n in setup.nodes.values():
        n.env.update({"QUEEN_JWT_SECRET": SECRET, "QUEEN_CLUSTER_TENANT_GROUPS": "true",
                      # Refused together with tenant groups, whatever its default.
                      "QUEEN_CLUSTER_SNAPSHOT_CATCH_UP": "false"})
    out: dict = {"nodes": 3}
    try:
        for i in setup.nodes:
            setup.spawn(i)
        out["default_leader"] = setup.wait_leader()
        for t in TENANTS:
            declare(setup, t)
        leaders = {t: tenant_leader(setup, t) for t in TENANTS}
        out["tenant_leaders"] = leaders
        url = {t: setup.nodes[leaders[t]].url for t in TENANTS}
        a, b = TENANTS
        out["phases"] = {
            f"{a} alone": phase(setup, cfg, {a: url[a]}),
            f"{b} alone": phase(setup, cfg, {b: url[b]}),
            "both": phase(setup, cfg, url),
        }
        # A failover during the run would move a leader: the figures then mean something else.
        out["tenant_leaders_after"] = {t: tenant_leader(setup, t) for t in TENANTS}
    finally:
        setup.kill_all()
        if cfg.keep_logs:
            shutil.copytree(root / "logs", cfg.keep_logs / "tenants", dirs_exist_ok=True)
        shutil.rmtree(root, ignore_errors=True)
    return out


def summary(out: dict) -> list[str]:
    lines = [f"default leader node{out['default_leader']}; tenant leaders "
             f"{out['tenant_leaders']} (after: {out['tenant_leaders_after']})"]
    for name, p in out["phases"].items():
        rates = {t: (r.get("produce") or {}).get("msg_per_sec") for t, r in p["push"].items()}
        cpu = {n: u["cpu_percent_of_core"] for n, u in p["usage"].items()}
        lines.append(f"{name}: push msg/s {rates}; CPU % of a core {cpu}; "
                     f"load at start {p['loadavg_at_start']}")
    return lines


def failed(out: dict) -> list[str]:
    bad = []
    leaders = out["tenant_leaders"]
    if len(set(leaders.values())) != len(leaders):
        bad.append(f"the tenants' leaders share a node: {leaders}")
    if out["tenant_leaders_after"] != leaders:
        bad.append(f"a tenant's leader moved during the run: {out['tenant_leaders_after']}")
    for name, p in out["phases"].items():
        for t, r in p["push"].items():
            if r.get("exit_code") != 0:
                bad.append(f"{name} {t}: exit {r.get('exit_code')} "
                           f"{r.get('error_samples') or r.get('error', '')}")
    return bad


def main() -> int:
    smoke = smoke_flag(__doc__)
    cfg = bench_config(smoke)
    if cfg is None:
        return 1
    timing = cluster_timing()
    out = run(cfg, timing)
    return report({"scenario": "cluster-tenants", "smoke": smoke, "cores": os.cpu_count(),
                   "duration_secs": cfg.duration, "timing": timing, **out},
                  summary(out), failed(out))


if __name__ == "__main__":
    sys.exit(main())
