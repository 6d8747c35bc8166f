#!/usr/bin/env python3
"""Run librdkafka's own integration tests against the real `queen` binary.

librdkafka 2.12.1 and its test suite are built from the rdkafka-sys 4.10.0+2.12.1 crate by
scripts/librdkafka-build.sh (into .cache, never committed). The tests that run are the ones in
allowlist.txt beside this file; docs/kafka-compat.md says why every other one is left out.
Each test gets a fresh broker (its own ports and data dir) and its own test.conf; a test
passes when test-runner exits 0 within its time limit and at least one of its parts ran: a
test whose every part "passed" in 0.000 s skipped all its subtests and never reached the broker,
and fails here. Tests run in quick mode (`-Q`), except those marked `full` in the allowlist:
what they exercise is in non-quick subtests, which quick mode skips. Socket-emulation tests
are left out (`-E`) except for those marked `sockem`: librdkafka's sockem is built into
test-runner and proxies each connection inside the test process (delays, throughput limits,
refused and closed connections), so they need nothing beside the broker.

    python tests/librdkafka/run.py                 # the whole allowlist
    python tests/librdkafka/run.py 0001 0002       # some tests (allowlisted or not)
    python tests/librdkafka/run.py --full 0050     # a test not in the allowlist, in full mode
    python tests/librdkafka/run.py --sockem 0049   # ... with socket emulation
    python tests/librdkafka/run.py --full --broker 0045  # ... without its mock-cluster parts
    python tests/librdkafka/run.py --results DIR   # JUnit XML and logs into DIR
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
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


# The words that may follow a test in the allowlist: how it runs.
MARKERS = {"full", "sockem", "broker", "sasl"}
# A test marked `sasl` runs against a broker that requires SASL on its Kafka port, with
# this user (the HTTP port is acknowledged open: no JWT secret in a throwaway broker), and
# logs in with SASL PLAIN (librdkafka's SCRAM needs OpenSSL, which this build leaves out).
SASL_USER, SASL_PASSWORD = "librdkafka", "librdkafka-test-password"
SASL_USERS_FILE = f"""[[user]]
name = "{SASL_USER}"
password = "{SASL_PASSWORD}"
role = "admin"
"""


def parse_allowlist(text: str) -> dict[str, set[str]]:
    """Every test of an allowlist and its markers: `full` (no quick mode), `sockem` (with
    socket emulation), `broker` (only the parts that reach a broker), `sasl` (SASL PLAIN)."""
    tests = {}
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        marks = set(words[1:])
        if not marks <= MARKERS or len(marks) != len(words) - 1:
            raise SystemExit(f"allowlist.txt: cannot read {line!r}")
        tests[words[0]] = marks
    return tests


def allowlist() -> dict[str, set[str]]:
    return parse_allowlist((HERE / "allowlist.txt").read_text())


def runner_flags(marks: set[str]) -> list[str]:
    """test-runner's flags for a test with these markers: one test at a time, no known-issue
    tests, quick mode unless `full`, no socket emulation unless `sockem`, and with `broker`
    none of the parts flagged local (`-L`): those run against librdkafka's mock cluster,
    never against queen, and some take minutes."""
    return (["-p1"] + ([] if "full" in marks else ["-Q"])
            + ([] if "sockem" in marks else ["-E"]) + ["-K"]
            + (["-L"] if "broker" in marks else []))


def build() -> Path:
    out = subprocess.run(
        ["bash", str(REPO / "scripts" / "librdkafka-build.sh")],
        check=True, stdout=subprocess.PIPE, text=True,
    )
    return Path(out.stdout.strip().splitlines()[-1])


def run_one(test: str, marks: set[str], tests_dir: Path, logs: Path) -> tuple[str, bool, float, str]:
    started = time.monotonic()
    log = logs / f"{test}.log"
    data = Path(tempfile.mkdtemp(prefix=f"librdkafka-{test}-"))
    env = dict(BROKER_ENV)
    client_conf = ""
    if "sasl" in marks:
        users = data / "sasl-users.toml"
        users.write_text(SASL_USERS_FILE)
        env.update(QUEEN_KAFKA_SASL_USERS_FILE=str(users), QUEEN_HTTP_AUTH_DISABLED="true")
        client_conf = ("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                       f"sasl.username={SASL_USER}\nsasl.password={SASL_PASSWORD}\n")
    broker = Broker(data / "data", logs, name=f"{test}.broker", env=env)
    try:
        broker.start()
    except BrokerError as e:
        shutil.rmtree(data, ignore_errors=True)
        return test, False, time.monotonic() - started, f"broker did not start: {e}"
    try:
        conf = data / "test.conf"
        conf.write_text(
            f"bootstrap.servers={broker.kafka_bootstrap}\n"
            "broker.address.family=v4\n"
            + client_conf
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
                proc = subprocess.run(
                    ["./test-runner", *runner_flags(marks)],
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
        # Each run leaves a broker's data dir (up to 650 MB for 0041); kept, 70 tests a run
        # filled the CI machine's disk. The broker's log stays in `logs`.
        shutil.rmtree(data, ignore_errors=True)


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
    ap.add_argument("--sockem", action="store_true",
                    help="run the named tests with socket emulation (default: as the allowlist says)")
    ap.add_argument("--broker", action="store_true",
                    help="run only the named tests' parts that reach a broker (`-L`)")
    ap.add_argument("--sasl", action="store_true",
                    help="run the named tests against a broker requiring SASL PLAIN")
    ap.add_argument("--results", type=Path, default=REPO / ".cache" / "test-results" / "librdkafka")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--tests-dir", type=Path, help="a built librdkafka tests/ folder (default: build one)")
    args = ap.parse_args()
    listed = allowlist()
    names = args.tests or list(listed)
    forced = {m for m in ("full", "sockem", "broker", "sasl") if getattr(args, m)}
    tests = [(t, listed.get(t, set()) | forced) for t in names]
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
