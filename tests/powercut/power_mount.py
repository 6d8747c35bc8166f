"""Runs powerfs.py as a child process and drives its power cuts.

One PowerMount is one mount point whose durable content outlives the process:
`cut()` freezes the filesystem and saves what was durable, `stop()` unmounts,
and the next `start()` mounts that image again, so the kernel keeps no page,
entry or attribute cache of the content that was dropped.
"""

from __future__ import annotations

import importlib
import json
import os
import pickle
import select
import shutil
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

from queen_broker import _die_with_parent

POWERFS = Path(__file__).resolve().parent / "powerfs.py"
READY_TIMEOUT_S = 30.0
ROOT_INODE = 1


class MountError(RuntimeError):
    """powerfs did not come up; `reason` says why."""


def fuse_unavailable() -> str | None:
    """Why FUSE cannot work on this machine, or None when it may."""
    if not sys.platform.startswith("linux"):
        return f"FUSE test needs Linux, this is {sys.platform}"
    try:
        device = os.stat("/dev/fuse")
    except OSError:
        return "no /dev/fuse on this machine (container without the fuse device?)"
    if not stat.S_ISCHR(device.st_mode):
        return "/dev/fuse is not a character device here"
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return "/dev/fuse is not readable and writable for this user"
    try:
        importlib.import_module("pyfuse3")  # loads libfuse3 too, not just finds the module
    except ImportError as error:
        return f"pyfuse3 is not installed in {sys.executable} ({error}); run scripts/powercut-test.sh"
    return None


class PowerMount:
    def __init__(self, workdir: Path, names_with_any_fsync: bool = False) -> None:
        self.workdir = Path(workdir)
        self.names_with_any_fsync = names_with_any_fsync
        self.mnt = self.workdir / "mnt"
        self.image = self.workdir / "durable.pickle"
        self.proc: subprocess.Popen | None = None
        self.control: socket.socket | None = None
        self.reader = None
        self.mounts = 0

    def reset(self, dirs: tuple[str, ...] = ()) -> None:
        """Next start is a new disk: an empty root, plus the directory paths `dirs`
        (e.g. "var/queen") made durable there."""
        nodes = {ROOT_INODE: ("d", {})}
        for path in dirs:
            at = ROOT_INODE
            for part in path.strip("/").split("/"):
                entries = nodes[at][1]
                name = os.fsencode(part)
                if name not in entries:
                    entries[name] = max(nodes) + 1
                    nodes[entries[name]] = ("d", {})
                at = entries[name]
        with open(self.image, "wb") as out:
            pickle.dump({"nodes": nodes}, out)

    # ---- a disk that lost more than POSIX allows (edits while unmounted) ----

    def _resolve(self, nodes: dict, path: str) -> tuple[int, bytes, int]:
        """(parent inode, name, inode) of an absolute path inside the mount."""
        parent, ino, name = ROOT_INODE, ROOT_INODE, b""
        for part in path.strip("/").split("/"):
            name = os.fsencode(part)
            parent, ino = ino, nodes[ino][1][name]
        return parent, name, ino

    def _edit(self, edit) -> None:
        assert self.proc is None, "edit the durable image only while unmounted"
        with open(self.image, "rb") as src:
            image = pickle.load(src)
        edit(image["nodes"])
        with open(self.image, "wb") as out:
            pickle.dump(image, out, protocol=pickle.HIGHEST_PROTOCOL)

    def list_durable(self, path: str) -> list[str]:
        with open(self.image, "rb") as src:
            nodes = pickle.load(src)["nodes"]
        try:
            ino = self._resolve(nodes, path)[2] if path.strip("/") else ROOT_INODE
        except KeyError:
            return []
        return sorted(os.fsdecode(name) for name in nodes[ino][1])

    def drop_name(self, path: str) -> None:
        def edit(nodes: dict) -> None:
            parent, name, _ = self._resolve(nodes, path)
            del nodes[parent][1][name]
        self._edit(edit)

    def truncate_file(self, path: str, size: int) -> None:
        def edit(nodes: dict) -> None:
            ino = self._resolve(nodes, path)[2]
            nodes[ino] = ("f", nodes[ino][1][:size])
        self._edit(edit)

    def start(self) -> "PowerMount":
        self.mnt.mkdir(parents=True, exist_ok=True)
        if not self.image.exists():
            self.reset()
        self.mounts += 1
        extra = ["--names-with-any-fsync"] if self.names_with_any_fsync else []
        log = open(self.workdir / f"powerfs-{self.mounts}.log", "wb")
        with log:
            self.proc = subprocess.Popen(
                [sys.executable, str(POWERFS), "--mount", str(self.mnt), "--image", str(self.image), *extra],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
                preexec_fn=_die_with_parent,
            )
        port = self._wait_ready()
        self.control = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.reader = self.control.makefile("rb")
        return self

    def _wait_ready(self) -> int:
        deadline = time.monotonic() + READY_TIMEOUT_S
        line = b""
        while time.monotonic() < deadline and not line.endswith(b"\n"):
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.2)
            if ready:
                chunk = os.read(self.proc.stdout.fileno(), 256)
                if not chunk:
                    break
                line += chunk
        if line.startswith(b"ready "):
            return int(line.split()[1])
        self.proc.kill()
        self.proc.wait(timeout=10)
        lines = self.log_tail().splitlines()
        why = [line for line in lines if line.startswith("fuse")] or lines[-1:]
        raise MountError(f"powerfs did not mount {self.mnt}: {'; '.join(why)}")

    def log_tail(self) -> str:
        path = self.workdir / f"powerfs-{self.mounts}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-20:]) or "(no output)"

    def call(self, **request) -> dict:
        if self.control is None:
            raise MountError("powerfs is not running")
        self.control.sendall(json.dumps(request).encode() + b"\n")
        line = self.reader.readline()
        if not line:
            raise MountError(f"powerfs closed its control socket: {self.log_tail()}")
        answer = json.loads(line)
        if not answer.get("ok"):
            raise MountError(f"powerfs refused {request}: {answer}")
        return answer

    def slow(self, seconds: float) -> None:
        self.call(cmd="slow", seconds=seconds)

    def fail_fsyncs(self, count: int) -> None:
        self.call(cmd="fail_fsyncs", count=count)

    def cut(self, seed: int, torn: bool) -> dict:
        """The power cut: what was durable now is all the next start will see."""
        return self.call(cmd="cut", seed=seed, torn=torn, image=str(self.image))

    def stop(self) -> None:
        """Unmount and end powerfs (after a cut, or to give up the mount)."""
        if self.proc is None:
            return
        try:
            if self.proc.poll() is None and self.control is not None:
                self.call(cmd="exit")
        except (OSError, MountError):
            pass
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=15)
        finally:
            if self.reader is not None:
                self.reader.close()
            if self.control is not None:
                self.control.close()
            self.proc.stdout.close()
            self.reader = self.control = self.proc = None
            self._force_unmount()

    def mounted(self) -> bool:
        # Not os.path.ismount: it answers False for a FUSE mount whose process died.
        try:
            with open("/proc/self/mounts", encoding="utf-8", errors="replace") as mounts:
                points = [line.split()[1] for line in mounts if len(line.split()) > 1]
        except OSError:
            return False
        return str(self.mnt) in points

    def _force_unmount(self) -> None:
        if not self.mounted():
            return
        tool = shutil.which("fusermount3") or shutil.which("fusermount")
        if tool:
            subprocess.run([tool, "-u", "-z", str(self.mnt)], check=False, timeout=30,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        else:
            subprocess.run(["umount", "-l", str(self.mnt)], check=False, timeout=30,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
