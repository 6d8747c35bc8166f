#!/usr/bin/env python3
"""Run the official queen-mq 2.6.0 test suite against the real `queen` binary.

The suite is the `tests/` folder of the queen-mq 2.6.0 sdist, downloaded from
PyPI at run time into .cache/sdk (never committed). Our conftest.py (the
`client` fixture) and pytest.ini are copied next to it. Each file runs against
a fresh broker with its own data dir; test_auth runs twice: once against a
broker without JWT (the no-JWT test) and once against a broker with
QUEEN_JWT_SECRET while the tests get the same secret as JWT_SECRET (the two JWT
tests). A run fails when pytest fails, when any test is skipped, or when it ran
no test.

    python tests/sdk/run.py                    # every file of the list
    python tests/sdk/run.py test_push test_pop # some files
    python tests/sdk/run.py test_push -- -k duplicate -x
    python tests/sdk/run.py --binary           # every file, the client on the binary forms

With --binary the `client` fixture is built with binary_push, push_compression and
framed_pop on (conftest.py reads QUEEN_SDK_WIRE=binary), so every push goes out as the QPB1
frames body, every transaction with a push as QTB1, and every pop asks for the QPF1 answer.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "scripts" / "lib"))

from junit_summary import Counts, read_report  # noqa: E402
from queen_broker import Broker, BrokerError, queen_binary  # noqa: E402

SDIST_REQ = "queen-mq==2.6.0"
SDIST_FILE = "queen_mq-2.6.0.tar.gz"
SDIST_SHA256 = "c6657ad706ef5d9a826d9fb7e576cd8d27e70489f21a0b9230e29a78beccce88"
SDIST_TESTS = "queen_mq-2.6.0/tests/"
JWT_SECRET = "queenmq-sdk-suite-secret-0123456789abcdef"
# The suite's encrypted round trip (test_push_encrypted_payload) needs the broker key: without
# one this broker refuses encryptionEnabled instead of storing plain text.
ENCRYPTION_KEY = "5ae1" * 16


@dataclass(frozen=True)
class Run:
    label: str
    file: str
    select: str | None = None  # pytest -k expression
    jwt: bool = False
    expect: int | None = None  # exact number of tests that must run


PLAIN_FILES = (
    "test_queue",
    "test_push",
    "test_pop",
    "test_consume",
    "test_subscription",
    "test_transaction",
    "test_complete",
    "test_dlq",
    "test_ack_commit",
    "test_ack_window",
    "test_transaction_lease_fencing",
    "test_docs",
    "test_timers",
    "test_kv",
    "test_locks",
    "test_transaction_kv_timers",
    "test_reads",
)
RUNS = [Run(name, name) for name in PLAIN_FILES] + [
    # test_auth skips its no-JWT test when JWT_SECRET is set and its JWT tests
    # when it is not: two brokers, two runs, nothing skipped.
    Run("test_auth-nojwt", "test_auth", select="without_auth", expect=1),
    Run("test_auth-jwt", "test_auth", select="not without_auth", jwt=True, expect=2),
]


def fetch_sdist(cache: Path) -> Path:
    tarball = cache / SDIST_FILE
    if not (tarball.exists() and sha256(tarball) == SDIST_SHA256):
        cache.mkdir(parents=True, exist_ok=True)
        tarball.unlink(missing_ok=True)
        print(f"sdk: downloading the {SDIST_REQ} sdist into {cache}", flush=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
             "--no-binary", ":all:", "--dest", str(cache), SDIST_REQ],
            check=True,
            timeout=600,
        )
    digest = sha256(tarball)
    if digest != SDIST_SHA256:
        raise SystemExit(f"sdk: {tarball} has sha256 {digest}, expected {SDIST_SHA256}")
    return tarball


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def lay_out_suite(tarball: Path, suite: Path) -> None:
    """The sdist's flat tests/ folder plus our conftest.py and pytest.ini."""
    with tarfile.open(tarball) as tar:
        for member in tar.getmembers():
            rest = member.name[len(SDIST_TESTS):]
            if member.isfile() and member.name.startswith(SDIST_TESTS) and "/" not in rest:
                (suite / rest).write_bytes(tar.extractfile(member).read())
    for name in ("conftest.py", "pytest.ini"):
        shutil.copy(HERE / name, suite / name)


def suite_env(run: Run) -> dict[str, str]:
    env = {"QUEEN_ENCRYPTION_KEY": ENCRYPTION_KEY}
    if run.jwt:
        env["QUEEN_JWT_SECRET"] = JWT_SECRET
    return env


def run_one(run: Run, suite: Path, results: Path, timeout: float, extra: list[str],
            binary: bool = False) -> Counts:
    report = results / f"{run.label}.xml"
    report.unlink(missing_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="queen-sdk-") as tmp:
        broker = Broker(
            Path(tmp) / "data",
            results / "logs",
            name=run.label,
            env=suite_env(run),
        )
        try:
            broker.start()
        except BrokerError as error:
            print(f"sdk: {run.label}: broker did not start: {error}", flush=True)
            return Counts(failed=1)
        try:
            code = run_pytest(run, suite, report, broker.url, timeout, extra, binary)
        finally:
            broker.kill()
    counts = read_report(report) if report.exists() else Counts(failed=1)
    problems = []
    if code != 0:
        problems.append("pytest timed out" if code is None else f"pytest exit code {code}")
    if counts.skipped:
        problems.append(f"{counts.skipped} skipped (none may be)")
    if counts.total == 0:
        problems.append("no test ran")
    if run.expect is not None and not extra and counts.total != run.expect:
        problems.append(f"{counts.total} tests ran, expected {run.expect}")
    verdict = "ok" if not problems else "FAILED: " + "; ".join(problems)
    print(f"sdk: {run.label}: {counts.line()} in {time.monotonic() - started:.0f} s, {verdict}",
          flush=True)
    if problems:
        print(f"sdk: broker log {broker.log_path}, last lines:\n{broker.log_tail(30)}", flush=True)
        if not counts.failed:
            counts.failed += 1
    return counts


def run_pytest(run: Run, suite: Path, report: Path, url: str, timeout: float,
               extra: list[str], binary: bool = False) -> int | None:
    env = {k: v for k, v in os.environ.items() if k not in ("JWT_SECRET", "QUEEN_SDK_WIRE")}
    env.update(QUEEN_SERVER_URL=url, QUEEN_URL=url, PYTHONDONTWRITEBYTECODE="1")
    if binary:
        env["QUEEN_SDK_WIRE"] = "binary"
    if run.jwt:
        env["JWT_SECRET"] = JWT_SECRET
    cmd = [sys.executable, "-m", "pytest", f"{run.file}.py", "-p", "no:cacheprovider",
           "-q", "-rfEs", f"--junitxml={report}"]
    if run.select:
        cmd += ["-k", run.select]
    cmd += extra
    proc = subprocess.Popen(cmd, cwd=suite, env=env, start_new_session=True)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return None
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", help="test files to run (default: all of the list)")
    parser.add_argument("--cache", type=Path, default=REPO / ".cache" / "sdk")
    parser.add_argument("--results", type=Path, default=REPO / ".cache" / "test-results" / "sdk")
    parser.add_argument("--budget", type=float, default=1800.0,
                        help="seconds for all runs together; later runs fail when it is spent")
    parser.add_argument("--binary", action="store_true",
                        help="build the client with binary_push, push_compression and framed_pop")
    parser.add_argument("-x", "--exitfirst", action="store_true", help="stop at the first failing run")
    argv, extra = sys.argv[1:], []
    if "--" in argv:
        split = argv.index("--")
        argv, extra = argv[:split], argv[split + 1:]
    args = parser.parse_args(argv)
    if args.binary and args.results == parser.get_default("results"):
        args.results = args.results.with_name("sdk-binary")

    wanted = [name.removesuffix(".py") for name in args.files]
    runs = [run for run in RUNS if not wanted or run.file in wanted or run.label in wanted]
    unknown = set(wanted) - {run.file for run in RUNS} - {run.label for run in RUNS}
    if unknown or not runs:
        parser.error(f"not in the list: {', '.join(sorted(unknown)) or 'nothing selected'}")

    try:
        queen_binary()
    except BrokerError as error:
        print(f"sdk: {error}", flush=True)
        return 1
    tarball = fetch_sdist(args.cache)
    args.results.mkdir(parents=True, exist_ok=True)
    # A suite folder per invocation, so that two runs at once do not collide.
    suite = Path(tempfile.mkdtemp(prefix="suite-", dir=args.cache))
    try:
        lay_out_suite(tarball, suite)
        return run_all(runs, suite, args, extra)
    finally:
        shutil.rmtree(suite, ignore_errors=True)


def run_all(runs: list[Run], suite: Path, args: argparse.Namespace, extra: list[str]) -> int:
    deadline = time.monotonic() + args.budget
    total = Counts()
    failed_runs = []
    for run in runs:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            print(f"sdk: {run.label}: not run, the {args.budget:.0f} s budget is spent", flush=True)
            total += Counts(failed=1)
            failed_runs.append(run.label)
            continue
        print(f"sdk: {run.label}: running", flush=True)
        counts = run_one(run, suite, args.results, min(remaining, 900.0), extra, args.binary)
        total += counts
        if counts.failed or counts.skipped or counts.total == 0:
            failed_runs.append(run.label)
            if args.exitfirst:
                break
    print(f"sdk: {total.line()}", flush=True)
    if failed_runs:
        print(f"sdk: failed runs: {', '.join(failed_runs)}", flush=True)
    return 1 if failed_runs else 0


if __name__ == "__main__":
    sys.exit(main())
