#!/usr/bin/env python3
"""Measures the figures of docs/memory.md against a real broker, one fresh broker each:
RAM per idle partition, per transaction id inside the dedup window, per parked long poll,
per idle connection, and per MiB of entry cache. Prints one line per figure: the RSS
delta per item and what the matching `queen_memory_bytes` pool says per item.

    python3 bench/memory_sizing.py [--queen target/release/queen] [--scale 1.0]

Loopback only; each step takes a few seconds (scale 1: ~1 minute in all).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

MIB = 1 << 20


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Broker:
    def __init__(self, binary: str, env: dict[str, str]):
        self.dir = tempfile.TemporaryDirectory(prefix="queen-sizing-")
        self.port = free_port()
        full = {k: v for k, v in os.environ.items() if not k.startswith("QUEEN_")}
        full.update(env)
        self.proc = subprocess.Popen(
            [binary, "serve", "--data-dir", self.dir.name, "--http-addr", f"127.0.0.1:{self.port}", "--kafka-addr", "127.0.0.1:0"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=full,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                self.get("/health")
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("broker did not start")

    def get(self, path: str) -> bytes:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=30) as r:
            return r.read()

    def post(self, path: str, body) -> bytes:
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}", data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.read()

    def rss(self) -> int:
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")

    def pool(self, name: str) -> float:
        text = self.get("/metrics/prometheus").decode()
        m = re.search(r'^queen_memory_bytes\{pool="%s"\} (\S+)$' % name, text, re.M)
        return float(m.group(1)) if m else float("nan")

    def settle(self) -> None:
        time.sleep(1.5)  # one accounting pass and one state walk

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.dir.cleanup()


def report(what: str, n: int, rss: int, pool: float, pool_name: str) -> None:
    print(f"{what:<34} n={n:<8} RSS {rss / n:8.0f} B each   pool {pool_name} {pool / n:8.0f} B each")


def idle_partitions(binary: str, n: int) -> None:
    b = Broker(binary, {"QUEEN_ENTRY_CACHE_BYTES": str(MIB)})
    try:
        b.post("/api/v1/configure", {"queue": "parts", "options": {"dedupWindowSeconds": 600}})
        b.settle()
        rss0, pool0 = b.rss(), b.pool("state")
        for start in range(0, n, 1000):
            items = [{"queue": "parts", "partition": f"p{i}", "payload": {"i": i}}
                     for i in range(start, min(n, start + 1000))]
            b.post("/api/v1/push", {"items": items})
        b.settle()
        report("idle partition (1 msg each)", n, b.rss() - rss0, b.pool("state") - pool0, "state")
    finally:
        b.close()


def dedup_ids(binary: str, n: int) -> None:
    b = Broker(binary, {"QUEEN_ENTRY_CACHE_BYTES": str(MIB)})
    try:
        b.settle()
        b.post("/api/v1/push", {"items": [{"queue": "ids", "partition": "p", "payload": 0}]})
        b.settle()
        rss0, pool0 = b.rss(), b.pool("dedup")
        for start in range(0, n, 2000):
            items = [{"queue": "ids", "partition": "p", "payload": i}
                     for i in range(start, min(n, start + 2000))]
            b.post("/api/v1/push", {"items": items})
        b.settle()
        report("message in the dedup window", n, b.rss() - rss0, b.pool("dedup") - pool0, "dedup")
    finally:
        b.close()


async def _park(port: int, n: int, hold: float, path: str) -> None:
    conns = []
    for _ in range(n):
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(f"GET {path} HTTP/1.1\r\nHost: q\r\n\r\n".encode())
        conns.append((r, w))
    await asyncio.sleep(hold)
    for _, w in conns:
        w.close()


def parked_polls(binary: str, n: int) -> None:
    b = Broker(binary, {})
    try:
        b.post("/api/v1/configure", {"queue": "idle"})
        b.settle()
        rss0 = b.rss()
        measured = {}

        async def run() -> None:
            task = asyncio.create_task(
                _park(b.port, n, 6.0, "/api/v1/pop/queue/idle?wait=true&timeout=20000"))
            await asyncio.sleep(4.0)
            measured["rss"], measured["pool"] = b.rss(), b.pool("waiters")
            await task

        asyncio.run(run())
        report("parked long poll (own connection)", n, measured["rss"] - rss0, measured["pool"], "waiters")
    finally:
        b.close()


def idle_connections(binary: str, n: int) -> None:
    b = Broker(binary, {})
    try:
        b.settle()
        rss0 = b.rss()
        measured = {}

        async def run() -> None:
            conns = []
            for _ in range(n):
                r, w = await asyncio.open_connection("127.0.0.1", b.port)
                w.write(b"GET /health HTTP/1.1\r\nHost: q\r\n\r\n")
                await r.readuntil(b"\r\n\r\n")
                conns.append(w)
            await asyncio.sleep(1.0)
            measured["rss"] = b.rss()
            for w in conns:
                w.close()

        asyncio.run(run())
        report("idle keep-alive connection", n, measured["rss"] - rss0, 0.0, "-")
    finally:
        b.close()


def cache(binary: str, mib: int) -> None:
    """The same pushes with a 1 MiB and a `mib` MiB cache: RSS difference per cache MiB."""
    rss = {}
    for size in (1, mib):
        b = Broker(binary, {"QUEEN_ENTRY_CACHE_BYTES": str(size * MIB)})
        try:
            b.settle()
            payload = "x" * 1000
            total = 0
            while total < (mib + 16) * MIB:
                items = [{"queue": "c", "partition": f"p{i % 8}", "payload": payload} for i in range(500)]
                b.post("/api/v1/push", {"items": items})
                total += 500 * 1000
            b.settle()
            rss[size] = (b.rss(), b.pool("entry_cache"))
        finally:
            b.close()
    delta = rss[mib][0] - rss[1][0]
    print(f"{'entry cache':<34} {mib - 1} MiB more: RSS +{delta / MIB:.1f} MiB "
          f"({delta / (mib - 1) / MIB:.2f} MiB per cache MiB); pool says {rss[mib][1] / MIB:.1f} MiB")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queen", default="target/release/queen")
    ap.add_argument("--scale", type=float, default=1.0)
    a = ap.parse_args()
    s = a.scale
    idle_partitions(a.queen, int(100_000 * s))
    dedup_ids(a.queen, int(400_000 * s))
    parked_polls(a.queen, int(2_000 * s))
    idle_connections(a.queen, int(2_000 * s))
    cache(a.queen, 64)
    return 0


if __name__ == "__main__":
    sys.exit(main())
