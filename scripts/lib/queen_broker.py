"""Start, probe and kill a real `queen` broker process on loopback.

Shared by tests/python (through its conftest) and the official-suite runner
tests/sdk/run.py. Every broker gets a free ephemeral port on 127.0.0.1 for HTTP and
another for the Kafka port (so that parallel brokers never meet on 9092), its own data
directory and its own log file (stdout and stderr of the process).
"""

from __future__ import annotations

import ctypes
import os
import random
import signal
import socket
import ssl
import subprocess
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 60.0
_PR_SET_PDEATHSIG = 1
try:  # resolved once here: the child after fork() should run as little Python as possible
    _prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl
except (OSError, AttributeError):
    _prctl = None


class BrokerError(RuntimeError):
    """The broker could not be started or did not become healthy."""


def queen_binary() -> Path:
    """$QUEEN_BIN, else target/release/queen of this repository (never built here)."""
    explicit = os.environ.get("QUEEN_BIN")
    if explicit:
        path = Path(explicit)
    else:
        target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")
        if not target.is_absolute():
            target = REPO / target
        path = target / "release" / "queen"
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise BrokerError(
            f"queen binary not found or not executable at {path}: "
            "run `cargo build --release -p queenmq-broker` or set QUEEN_BIN"
        )
    return path


# Reserved ports come from below Linux's ephemeral range (32768-60999 by default): a port the
# kernel hands out for port 0 is one it also hands to outbound connections, so between the
# pick and the broker's bind a client's connection (the suites run side by side, and cluster
# nodes probe each other) could take it, and the broker's bind fails "Address already in use".
_PICK_LOW, _PICK_HIGH = 20000, 32767
_pick = random.SystemRandom()
# Suites run side by side in separate processes, each picking at random: two could check the
# same port free and both use it (CI run after session 29: a cluster node's Kafka bind failed
# "Address already in use"). A pick is reserved across processes by creating a file named
# after it; reservations older than _RESERVED_S are stale (a broker binds within seconds of
# the pick, and a killed test leaves its files behind).
_RESERVED_DIR = Path(os.environ.get("TMPDIR") or "/tmp") / "queen-test-ports"
_RESERVED_S = 600.0


def _reserve(port: int) -> bool:
    """True when this process now holds `port`'s reservation."""
    path = _RESERVED_DIR / str(port)
    for _ in range(2):
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
            return True
        except FileExistsError:
            try:
                if time.time() - path.stat().st_mtime < _RESERVED_S:
                    return False
                path.unlink()
            except FileNotFoundError:
                pass  # another process released or took it meanwhile: try once more
        except OSError:
            return True  # no reservation directory to use: the bind check below still holds
    return False


def free_port() -> int:
    """A port free on 127.0.0.1 now, chosen at random below the ephemeral range (bound once to
    check it) and reserved against the other test processes; the kernel's pick (bind to
    port 0) only when none is found."""
    try:
        _RESERVED_DIR.mkdir(parents=True, exist_ok=True)
    except OSError:
        pass
    for _ in range(256):
        port = _pick.randint(_PICK_LOW, _PICK_HIGH)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        if _reserve(port):
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _die_with_parent() -> None:
    # The broker gets SIGKILL when the thread that started it dies, so a
    # killed test runner never leaves brokers behind. Consequence: start
    # brokers from a thread that outlives them (the main thread).
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))


def broker_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The runner's environment without any QUEEN_* key (the broker reads QUEEN_*
    as configuration and refuses unknown keys), plus `extra`. With
    QUEEN_TEST_SNAPSHOT_CATCH_UP=1 (or 0) in the runner's environment, every clustered
    broker (one given QUEEN_CLUSTER_TOKEN) gets cluster_snapshot_catch_up on (or off) unless
    its test sets that key itself: the cluster suites run either way. QUEEN_TEST_TENANT_GROUPS
    does the same for cluster_tenant_groups."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEEN_")}
    env.update(extra or {})
    for switch, key in (
        ("QUEEN_TEST_SNAPSHOT_CATCH_UP", "QUEEN_CLUSTER_SNAPSHOT_CATCH_UP"),
        ("QUEEN_TEST_TENANT_GROUPS", "QUEEN_CLUSTER_TENANT_GROUPS"),
    ):
        value = os.environ.get(switch)
        if value in ("0", "1") and "QUEEN_CLUSTER_TOKEN" in env:
            env.setdefault(key, "true" if value == "1" else "false")
    return env


class Broker:
    """One `queen serve` process at a time on a fixed data directory.

    `start()` may be called again after `kill()`/`stop()`: the restart uses the
    same data dir and a new free port, so always read `url` afresh.
    """

    def __init__(
        self,
        data_dir: Path,
        log_dir: Path,
        *,
        name: str = "queen",
        env: dict[str, str] | None = None,
        args: list[str] | None = None,
        ca: Path | None = None,
        kafka_port: int | None = None,
        http_port: int | None = None,
    ) -> None:
        self.binary = queen_binary()
        self.data_dir = Path(data_dir)
        self.log_dir = Path(log_dir)
        self.name = name
        self.env = dict(env or {})
        self.args = list(args or [])
        # The CA of the HTTP listener's certificate when it speaks TLS (tls_cert_file).
        self.ca = Path(ca) if ca else None
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None
        self.kafka_port: int | None = None
        # A Kafka port kept across restarts: Kafka clients reconnect only to the addresses
        # they know, so a crash test with one keeps its port (`None`: a new one per start).
        self.fixed_kafka_port = kafka_port
        # An HTTP port kept across restarts: a cluster's members name each other's (peer_http).
        self.fixed_http_port = http_port
        self.starts = 0
        self.log_path: Path | None = None

    @property
    def url(self) -> str:
        scheme = "https" if self.ca else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    def verify(self) -> ssl.SSLContext | bool:
        """What httpx's `verify` needs for this broker's HTTP listener."""
        if self.ca is None:
            return True
        return ssl.create_default_context(cafile=str(self.ca))

    @property
    def kafka_bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    def command(self, port: int) -> list[str]:
        return [
            str(self.binary),
            "serve",
            "--data-dir",
            str(self.data_dir),
            "--http-addr",
            f"127.0.0.1:{port}",
            "--kafka-addr",
            # Port 0 when no start picked one yet (a command built only to be refused).
            f"127.0.0.1:{self.kafka_port or 0}",
            *self.args,
        ]

    def start(self, ready_timeout: float = READY_TIMEOUT_S) -> "Broker":
        if self.proc is not None and self.proc.poll() is None:
            raise BrokerError("broker already running")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._spawn()
        self._wait_healthy(ready_timeout)
        return self

    def _spawn(self) -> None:
        """Starts the process on a fresh port with its own log file; does not wait."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        self.port = self.fixed_http_port or free_port()
        self.kafka_port = self.fixed_kafka_port or free_port()
        self.log_path = self.log_dir / f"{self.name}-{self.starts}.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                self.command(self.port),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=broker_env(self.env),
                preexec_fn=_die_with_parent,
            )

    def _wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last = "no answer yet"
        with httpx.Client(timeout=2.0, verify=self.verify()) as http:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise BrokerError(
                        f"broker exited with code {self.proc.returncode} before it was "
                        f"healthy; log {self.log_path}:\n{self.log_tail()}"
                    )
                try:
                    res = http.get(f"{self.url}/health")
                    if res.status_code == 200 and res.json().get("status") == "healthy":
                        return
                    last = f"HTTP {res.status_code}: {res.text[:200]}"
                except (httpx.HTTPError, ValueError) as error:
                    last = repr(error)
                time.sleep(0.1)
        self.kill()
        raise BrokerError(
            f"broker not healthy within {timeout:.0f} s ({last}); log {self.log_path}:\n"
            f"{self.log_tail()}"
        )

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def stop(self, grace: float = 15.0) -> int | None:
        """SIGTERM, then SIGKILL after `grace` seconds; the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        return self.proc.returncode

    def log_text(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])
