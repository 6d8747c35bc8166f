#!/usr/bin/env python3
"""Run librdkafka's own integration tests against the real `queen` binary.

librdkafka 2.12.1 and its test suite are built from the rdkafka-sys 4.10.0+2.12.1 crate by
scripts/librdkafka-build.sh (into .cache, never committed). The tests that run are the ones in
allowlist.txt beside this file; docs/kafka-compat.md says why every other one is left out.
Each test gets a fresh broker (its own ports and data dir) and its own test.conf; a test
passes when test-runner exits 0 within its time limit and at least one of its parts ran: a
test whose every part "passed" in 0.000 s skipped all its subtests and never reached the broker,
and fails here. Tests run in quick mode (`-Q`), except those marked `full` in the allowlist:
what they exercise is in non-quick subtests, which quick mode skips.

    python tests/librdkafka/run.py                 # the whole allowlist
    python tests/librdkafka/run.py 0001 0002       # some tests (allowlisted or not)
    python tests/librdkafka/run.py --full 0050     # a test not in the allowlist, in full mode
    python tests/librdkafka/run.py --results DIR   # JUnit XML and logs into DIR
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "scripts" / "lib"))

from queen_broker import Broker, BrokerError  # noqa: E402

TEST_TIMEOUT_S = 300
# The broker version the suite assumes: it decides which features the tests expect.
KAFKA_VERSION = "3.7.0"
# The suite's "default" scenario (tests/scenarios/default.json) runs brokers with
# num.partitions=4: tests produce to partitions 0..3 of topics they auto-create.
BROKER_ENV = {"QUEEN_KAFKA_DEFAULT_PARTITIONS": "4"}
# A row of test-runner's closing summary: `| 0089_max_poll_interval | PASSED | 0.000s |`.
SUMMARY_ROW = re.compile(r"^\|\s*(\S+)\s*\|\s*(\w+)\s*\|\s*([0-9.]+)s\s*\|", re.M)
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def something_ran(log: str) -> bool:
    """Whether a test-runner log shows a part of the test that passed after doing something.

    test-runner prints its times to the millisecond, and a `main_*` whose subtests were all
    skipped (SUB_TEST() returns at once in quick mode for a non-quick subtest) passes in 0.000 s
    without a single request, as does one that skipped itself. At least one part must have
    passed in more than that."""
    rows = SUMMARY_ROW.findall(ANSI.sub("", log))
    return any(name != "<MAIN>" and state == "PASSED" and float(secs) > 0
               for name, state, secs in rows)


def allowlist() -> dict[str, bool]:
    """Every allowlisted test, and whether it runs in full mode (the word `full` after it)."""
    tests = {}
    for line in (HERE / "allowlist.txt").read_text().splitlines():
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) > 2 or (len(words) == 2 and words[1] != "full"):
            raise SystemExit(f"allowlist.txt: cannot read {line!r}")
        tests[words[0]] = len(words) == 2
    return tests


def build() -> Path:
    out = subprocess.run(
        ["bash", str(REPO / "scripts" / "librdkafka-build.sh")],
        check=True, stdout=subprocess.PIPE, text=True,
    )
    return Path(out.stdout.strip().splitlines()[-1])


def run_one(test: str, full: bool, tests_dir: Path, logs: Path) -> tuple[str, bool, float, str]:
    started = time.monotonic()
    log = logs / f"{test}.log"
    data = Path(tempfile.mkdtemp(prefix=f"librdkafka-{test}-"))
    broker = Broker(data / "data", logs, name=f"{test}.broker", env=BROKER_ENV)
    try:
        broker.start()
    except BrokerError as e:
        return test, False, time.monotonic() - started, f"broker did not start: {e}"
    try:
        conf = data / "test.conf"
        conf.write_text(
            f"bootstrap.servers={broker.kafka_bootstrap}\n"
            "broker.address.family=v4\n"
        )
        env = dict(os.environ)
        env.update(
            TESTS=test,
            TEST_KAFKA_VERSION=KAFKA_VERSION,
            RDKAFKA_TEST_CONF=str(conf),
            LD_LIBRARY_PATH=f"{tests_dir.parent / 'src'}:{tests_dir.parent / 'src-cpp'}",
        )
        with open(log, "w") as out:
            try:
                mode = [] if full else ["-Q"]
                proc = subprocess.run(
                    ["./test-runner", "-p1", *mode, "-E", "-K"],
                    cwd=tests_dir, env=env, stdout=out, stderr=subprocess.STDOUT,
                    timeout=TEST_TIMEOUT_S,
                )
                ok, why = proc.returncode == 0, f"exit {proc.returncode}"
                if ok and not something_ran(log.read_text(errors="replace")):
                    ok, why = False, "every part passed in 0.000 s: no subtest ran (try --full)"
            except subprocess.TimeoutExpired:
                ok, why = False, f"timed out after {TEST_TIMEOUT_S} s"
        alive = broker.proc is not None and broker.proc.poll() is None
        if not alive:
            ok, why = False, why + "; the broker died"
        return test, ok, time.monotonic() - started, why
    finally:
        broker.stop()


def junit(results, path: Path, logs: Path) -> None:
    failures = sum(1 for r in results if not r[1])
    cases = []
    for test, ok, secs, why in results:
        body = ""
        if not ok:
            tail = (logs / f"{test}.log").read_text(errors="replace")[-4000:]
            body = f"<failure message={quoteattr(why)}>{escape(tail)}</failure>"
        cases.append(
            f'<testcase classname="librdkafka" name="{test}" time="{secs:.1f}">{body}</testcase>'
        )
    path.write_text(
        f'<?xml version="1.0"?>\n<testsuite name="librdkafka" tests="{len(results)}" '
        f'failures="{failures}" errors="0" skipped="0">{"".join(cases)}</testsuite>\n'
    )


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("tests", nargs="*")
    ap.add_argument("--full", action="store_true",
                    help="run the named tests in full mode (default: as the allowlist says)")
    ap.add_argument("--results", type=Path, default=REPO / ".cache" / "test-results" / "librdkafka")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--tests-dir", type=Path, help="a built librdkafka tests/ folder (default: build one)")
    args = ap.parse_args()
    listed = allowlist()
    names = args.tests or list(listed)
    tests = [(t, args.full or listed.get(t, False)) for t in names]
    if not tests:
        print("librdkafka: no tests to run", file=sys.stderr)
        return 1
    tests_dir = (args.tests_dir or build()).resolve()
    logs = args.results / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    print(f"librdkafka: {len(tests)} tests, {args.jobs} at a time, from {tests_dir}", flush=True)
    results = []
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for test, ok, secs, why in pool.map(lambda t: run_one(*t, tests_dir, logs), tests):
            print(f"{'PASS' if ok else 'FAIL'} {test} ({secs:.0f} s){'' if ok else ': ' + why}", flush=True)
            results.append((test, ok, secs, why))
    junit(results, args.results / "librdkafka.xml", logs)
    failed = [r[0] for r in results if not r[1]]
    print(f"librdkafka: {len(results) - len(failed)} passed, {len(failed)} failed"
          + (f": {' '.join(failed)} (logs in {logs})" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
