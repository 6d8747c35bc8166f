"""Fixtures of our own tests: every test starts its own `queen` broker(s).

Nothing is built here: the binary is $QUEEN_BIN or target/release/queen.
Each broker gets a data dir and a log under the test's tmp_path and is killed
when the test ends; on failure the tail of every broker log is printed.
"""

import sys
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts" / "lib"))

from queen_broker import Broker, queen_binary  # noqa: E402


@pytest.fixture(scope="session")
def queen_bin() -> Path:
    return queen_binary()


@pytest.fixture
def broker_factory(queen_bin, tmp_path, request):
    """make(name, env=..., args=...) -> an unstarted Broker with its own data dir."""
    brokers: list[Broker] = []

    def make(name: str = "queen", **kwargs) -> Broker:
        broker = Broker(tmp_path / f"{name}-data", tmp_path / "logs", name=name, **kwargs)
        brokers.append(broker)
        return broker

    yield make
    for broker in brokers:
        broker.kill()
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        for broker in brokers:
            print(f"\n--- {broker.name} log ({broker.log_path}), last lines ---\n{broker.log_tail()}")


@pytest.fixture
def broker(broker_factory) -> Broker:
    return broker_factory().start()


@pytest.fixture
def http(broker):
    with httpx.Client(base_url=broker.url, timeout=10.0) as client:
        yield client


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report
