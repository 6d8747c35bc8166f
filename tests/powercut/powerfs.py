"""powerfs: an in-memory FUSE filesystem that keeps only what POSIX makes durable.

Run as its own process (the broker under test does its I/O through the kernel
to this process, so it must never be the test runner itself):

    python powerfs.py --mount DIR --image FILE

It mounts DIR, loads the durable image FILE (a pickle written by an earlier cut;
missing = an empty root directory) and prints `ready <port>` once mounted: the
port is a JSON-lines control socket on 127.0.0.1.

What is durable, exactly as POSIX promises and nothing more:
- file data and size: the writes and truncations of a file before an fsync or
  fdatasync of that file;
- names: a create, mkdir, link, rename, unlink or rmdir in a directory, before
  an fsync of that directory.

Control commands (one JSON object a line, one answer a line):
- {"cmd": "slow", "seconds": S}  every later fsync waits S s before it takes
  effect, so a cut can land in the middle of one;
- {"cmd": "fail_fsyncs", "count": N}  the next N fsyncs of files fail with EIO
  and their unsynced writes are never made durable (Linux after a writeback
  error), though reads still see them;
- {"cmd": "cut", "seed": N, "torn": bool, "image": PATH}  the power cut: from
  now on every operation fails with EIO, the durable image is written to PATH
  and a summary of what was dropped comes back. With torn=true each file also
  keeps a random prefix of its unsynced writes (the last one possibly cut
  inside) and each directory a random prefix of its unsynced name changes, as
  a disk that wrote some of them back before the cut would;
- {"cmd": "exit"}  unmount and end the process.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import pickle
import random
import stat
import sys
import time

import pyfuse3
import trio

ROOT = pyfuse3.ROOT_INODE
# Names a test cares about in a loss report: the first few are enough.
REPORT_LIMIT = 40


def apply_file_op(buf: bytearray, op: tuple) -> None:
    if op[0] == "w":
        _, off, data = op
        end = off + len(data)
        if end > len(buf):
            buf.extend(bytes(end - len(buf)))
        buf[off:end] = data
    else:  # ("t", size)
        size = op[1]
        if size < len(buf):
            del buf[size:]
        else:
            buf.extend(bytes(size - len(buf)))


def apply_dir_op(entries: dict, op: tuple) -> None:
    kind = op[0]
    if kind == "set":
        entries[op[1]] = op[2]
    elif kind == "del":
        entries.pop(op[1], None)
    else:  # ("mv", old, new, ino): a rename inside one directory is one step
        entries.pop(op[1], None)
        entries[op[2]] = op[3]


class Node:
    __slots__ = ("ino", "mode", "data", "durable", "pending", "entries", "dentries", "mtime_ns")

    def __init__(self, ino: int, mode: int) -> None:
        self.ino = ino
        self.mode = mode
        self.mtime_ns = time.time_ns()
        # Files: `data` is what reads see, `durable` what survives a cut, and
        # `pending` the (seq, op) steps between them, oldest first.
        # Directories: `entries` and `dentries` (durable) map name -> inode.
        self.data = bytearray()
        self.durable = bytearray()
        self.pending: list[tuple[int, tuple]] = []
        self.entries: dict[bytes, int] = {}
        self.dentries: dict[bytes, int] = {}

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.mode)


class PowerFs(pyfuse3.Operations):
    supports_dot_lookup = False
    enable_writeback_cache = False

    def __init__(self, image: dict | None, names_with_any_fsync: bool = False) -> None:
        super().__init__()
        # Off: strict POSIX. On: like a journaling filesystem that commits every
        # pending name change with any fsync (ext4 data=ordered does, in practice);
        # a diagnostic that shows what a broker gets away with on such a disk.
        self.names_with_any_fsync = names_with_any_fsync
        self.nodes: dict[int, Node] = {}
        self.seq = 0
        self.frozen = False
        self.slow_s = 0.0
        self.fsyncs = 0
        self.name_ops = {"set": 0, "del": 0, "mv": 0}
        self.failing_fsyncs = 0
        self.failed_fsyncs = 0
        if image is None:
            image = {"nodes": {ROOT: ("d", {})}}
        for ino, (kind, content) in image["nodes"].items():
            node = Node(ino, (stat.S_IFDIR | 0o755) if kind == "d" else (stat.S_IFREG | 0o644))
            if kind == "d":
                node.entries = dict(content)
                node.dentries = dict(content)
            else:
                node.data = bytearray(content)
                node.durable = bytearray(content)
            self.nodes[ino] = node
        self.next_ino = max(self.nodes) + 1

    # ---- helpers -------------------------------------------------------

    def live(self) -> None:
        if self.frozen:
            raise pyfuse3.FUSEError(errno.EIO)

    def node(self, ino: int) -> Node:
        node = self.nodes.get(ino)
        if node is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return node

    def dir_node(self, ino: int) -> Node:
        node = self.node(ino)
        if not node.is_dir:
            raise pyfuse3.FUSEError(errno.ENOTDIR)
        return node

    def step(self, node: Node, op: tuple) -> None:
        self.seq += 1
        node.pending.append((self.seq, op))
        if node.is_dir:
            self.name_ops[op[0]] += 1
            apply_dir_op(node.entries, op)
        else:
            apply_file_op(node.data, op)
        node.mtime_ns = time.time_ns()

    def make_durable(self, node: Node, upto: int) -> None:
        done = 0
        for seq, op in node.pending:
            if seq > upto:
                break
            if node.is_dir:
                apply_dir_op(node.dentries, op)
            else:
                apply_file_op(node.durable, op)
            done += 1
        del node.pending[:done]

    def attrs(self, node: Node) -> pyfuse3.EntryAttributes:
        a = pyfuse3.EntryAttributes()
        a.st_ino = node.ino
        a.generation = 0
        a.entry_timeout = 0
        a.attr_timeout = 0
        a.st_mode = node.mode
        a.st_nlink = 2 if node.is_dir else 1
        a.st_uid = os.getuid()
        a.st_gid = os.getgid()
        a.st_rdev = 0
        a.st_size = 4096 if node.is_dir else len(node.data)
        a.st_blksize = 4096
        a.st_blocks = (a.st_size + 511) // 512
        a.st_atime_ns = a.st_mtime_ns = a.st_ctime_ns = node.mtime_ns
        return a

    def new_node(self, parent: Node, name: bytes, mode: int) -> Node:
        if name in parent.entries:
            raise pyfuse3.FUSEError(errno.EEXIST)
        node = Node(self.next_ino, mode)
        self.next_ino += 1
        self.nodes[node.ino] = node
        self.step(parent, ("set", name, node.ino))
        return node

    # ---- namespace ------------------------------------------------------

    async def lookup(self, parent_inode, name, ctx):
        self.live()
        parent = self.dir_node(parent_inode)
        ino = parent.entries.get(name)
        if ino is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return self.attrs(self.node(ino))

    async def forget(self, inode_list):
        # Inodes are never freed: an unlinked file may still be open, and a
        # cut may bring back a name that points to it.
        return None

    async def getattr(self, inode, ctx):
        self.live()
        return self.attrs(self.node(inode))

    async def setattr(self, inode, attr, fields, fh, ctx):
        self.live()
        node = self.node(inode)
        if fields.update_size:
            if node.is_dir:
                raise pyfuse3.FUSEError(errno.EISDIR)
            self.step(node, ("t", attr.st_size))
        if fields.update_mode:
            node.mode = stat.S_IFMT(node.mode) | stat.S_IMODE(attr.st_mode)
        return self.attrs(node)

    async def mkdir(self, parent_inode, name, mode, ctx):
        self.live()
        parent = self.dir_node(parent_inode)
        return self.attrs(self.new_node(parent, name, stat.S_IFDIR | stat.S_IMODE(mode)))

    async def create(self, parent_inode, name, mode, flags, ctx):
        self.live()
        parent = self.dir_node(parent_inode)
        node = self.new_node(parent, name, stat.S_IFREG | stat.S_IMODE(mode))
        return pyfuse3.FileInfo(fh=node.ino), self.attrs(node)

    async def link(self, inode, new_parent_inode, new_name, ctx):
        self.live()
        node = self.node(inode)
        if node.is_dir:
            raise pyfuse3.FUSEError(errno.EPERM)
        parent = self.dir_node(new_parent_inode)
        if new_name in parent.entries:
            raise pyfuse3.FUSEError(errno.EEXIST)
        self.step(parent, ("set", new_name, node.ino))
        return self.attrs(node)

    async def unlink(self, parent_inode, name, ctx):
        self.live()
        parent = self.dir_node(parent_inode)
        ino = parent.entries.get(name)
        if ino is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        if self.node(ino).is_dir:
            raise pyfuse3.FUSEError(errno.EISDIR)
        self.step(parent, ("del", name))

    async def rmdir(self, parent_inode, name, ctx):
        self.live()
        parent = self.dir_node(parent_inode)
        ino = parent.entries.get(name)
        if ino is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        node = self.dir_node(ino)
        if node.entries:
            raise pyfuse3.FUSEError(errno.ENOTEMPTY)
        self.step(parent, ("del", name))

    async def rename(self, parent_inode_old, name_old, parent_inode_new, name_new, flags, ctx):
        self.live()
        if flags & pyfuse3.RENAME_EXCHANGE:
            raise pyfuse3.FUSEError(errno.EINVAL)
        old_parent = self.dir_node(parent_inode_old)
        new_parent = self.dir_node(parent_inode_new)
        ino = old_parent.entries.get(name_old)
        if ino is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        target = new_parent.entries.get(name_new)
        if target is not None:
            if flags & pyfuse3.RENAME_NOREPLACE:
                raise pyfuse3.FUSEError(errno.EEXIST)
            moved, replaced = self.node(ino), self.node(target)
            if replaced.is_dir and not moved.is_dir:
                raise pyfuse3.FUSEError(errno.EISDIR)
            if moved.is_dir and not replaced.is_dir:
                raise pyfuse3.FUSEError(errno.ENOTDIR)
            if replaced.is_dir and replaced.entries:
                raise pyfuse3.FUSEError(errno.ENOTEMPTY)
        if old_parent is new_parent:
            self.step(old_parent, ("mv", name_old, name_new, ino))
        else:
            self.step(old_parent, ("del", name_old))
            self.step(new_parent, ("set", name_new, ino))

    # ---- files -----------------------------------------------------------

    async def open(self, inode, flags, ctx):
        self.live()
        node = self.node(inode)
        if node.is_dir:
            raise pyfuse3.FUSEError(errno.EISDIR)
        if flags & os.O_TRUNC and node.data:
            self.step(node, ("t", 0))
        return pyfuse3.FileInfo(fh=inode)

    async def read(self, fh, off, size):
        self.live()
        node = self.node(fh)
        return bytes(node.data[off : off + size])

    async def write(self, fh, off, buf):
        self.live()
        self.step(self.node(fh), ("w", off, bytes(buf)))
        return len(buf)

    async def flush(self, fh):
        return None

    async def release(self, fh):
        return None

    async def fsync(self, fh, datasync):
        await self.sync(self.node(fh))

    async def opendir(self, inode, ctx):
        self.live()
        self.dir_node(inode)
        return inode

    async def readdir(self, fh, start_id, token):
        self.live()
        node = self.dir_node(fh)
        names = sorted(node.entries)
        for index in range(start_id, len(names)):
            child = self.nodes.get(node.entries.get(names[index], -1))
            if child is None:
                continue
            if not pyfuse3.readdir_reply(token, names[index], self.attrs(child), index + 1):
                break

    async def releasedir(self, fh):
        return None

    async def fsyncdir(self, fh, datasync):
        await self.sync(self.dir_node(fh))

    async def sync(self, node: Node) -> None:
        self.live()
        upto = self.seq
        if self.slow_s > 0:
            await trio.sleep(self.slow_s)
            # A cut while the disk was still writing: this fsync never finished.
            self.live()
        if self.failing_fsyncs > 0 and not node.is_dir:
            # As Linux does after a writeback error: the unsynced writes stay readable
            # but are never written, and a later fsync does not retry them.
            self.failing_fsyncs -= 1
            self.failed_fsyncs += 1
            node.pending = [(seq, op) for seq, op in node.pending if seq > upto]
            raise pyfuse3.FUSEError(errno.EIO)
        self.make_durable(node, upto)
        if self.names_with_any_fsync:
            for other in self.nodes.values():
                if other.is_dir and other.pending:
                    self.make_durable(other, upto)
        self.fsyncs += 1

    async def access(self, inode, mode, ctx):
        return True

    async def statfs(self, ctx):
        s = pyfuse3.StatvfsData()
        s.f_bsize = s.f_frsize = 4096
        s.f_blocks = s.f_bfree = s.f_bavail = 1 << 24
        s.f_files = s.f_ffree = s.f_favail = 1 << 20
        s.f_namemax = 255
        return s

    # ---- the power cut -----------------------------------------------------

    def paths(self, durable: bool) -> dict[str, int]:
        """path -> inode of every name reachable from the root, as now or as durable."""
        found: dict[str, int] = {}
        stack = [("", ROOT)]
        seen = {ROOT}
        while stack:
            prefix, ino = stack.pop()
            node = self.nodes[ino]
            for name, child in (node.dentries if durable else node.entries).items():
                path = f"{prefix}/{os.fsdecode(name)}"
                found[path] = child
                if self.nodes[child].is_dir and child not in seen:
                    seen.add(child)
                    stack.append((path, child))
        return found

    def cut(self, seed: int, torn: bool, image_path: str) -> dict:
        self.frozen = True
        rng = random.Random(seed)
        before = self.paths(durable=False)
        if torn:
            for ino in sorted(self.nodes):
                self.tear(self.nodes[ino], rng)
        after = self.paths(durable=True)
        nodes: dict[int, tuple] = {ROOT: ("d", dict(self.nodes[ROOT].dentries))}
        for ino in set(after.values()):
            node = self.nodes[ino]
            nodes[ino] = ("d", dict(node.dentries)) if node.is_dir else ("f", bytes(node.durable))
        tmp = image_path + ".tmp"
        with open(tmp, "wb") as out:
            pickle.dump({"nodes": nodes}, out, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, image_path)
        lost_names = sorted(p for p in before if p not in after)
        short_files = sorted(
            f"{p} ({len(self.nodes[i].durable)} of {len(self.nodes[i].data)} bytes)"
            for p, i in before.items()
            if p in after and after[p] == i and not self.nodes[i].is_dir
            and len(self.nodes[i].durable) < len(self.nodes[i].data)
        )
        return {
            "names_before": len(before),
            "names_after": len(after),
            "names_not_durable": lost_names[:REPORT_LIMIT],
            "names_not_durable_count": len(lost_names),
            "files_short": short_files[:REPORT_LIMIT],
            "durable_paths": sorted(after)[:REPORT_LIMIT],
            "fsyncs": self.fsyncs,
            "failed_fsyncs": self.failed_fsyncs,
            "name_ops": dict(self.name_ops),
        }

    @staticmethod
    def tear(node: Node, rng: random.Random) -> None:
        """The disk wrote back a random prefix of what was not synced yet."""
        if not node.pending:
            return
        keep = rng.randint(0, len(node.pending))
        for _, op in node.pending[:keep]:
            if node.is_dir:
                apply_dir_op(node.dentries, op)
            else:
                apply_file_op(node.durable, op)
        if keep < len(node.pending) and not node.is_dir and rng.random() < 0.5:
            op = node.pending[keep][1]
            if op[0] == "w" and len(op[2]) > 1:
                # A torn write: the sectors before some point made it, the rest did not.
                cut = rng.randrange(1, len(op[2]))
                apply_file_op(node.durable, ("w", op[1], op[2][:cut]))
        node.pending.clear()


async def control(fs: PowerFs, stream: trio.SocketStream) -> None:
    buf = b""
    async with stream:
        while True:
            chunk = await stream.receive_some(65536)
            if not chunk:
                return
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                try:
                    request = json.loads(line)
                    answer = handle(fs, request)
                except Exception as error:  # noqa: BLE001 - sent back to the test
                    answer = {"ok": False, "error": repr(error)}
                await stream.send_all(json.dumps(answer).encode() + b"\n")
                if answer.get("exit"):
                    pyfuse3.terminate()
                    return


def handle(fs: PowerFs, request: dict) -> dict:
    cmd = request.get("cmd")
    if cmd == "slow":
        fs.slow_s = max(0.0, min(5.0, float(request["seconds"])))
        return {"ok": True}
    if cmd == "fail_fsyncs":
        fs.failing_fsyncs = max(0, min(1000, int(request["count"])))
        return {"ok": True}
    if cmd == "cut":
        report = fs.cut(int(request["seed"]), bool(request["torn"]), str(request["image"]))
        return {"ok": True, **report}
    if cmd == "exit":
        return {"ok": True, "exit": True}
    return {"ok": False, "error": f"unknown command {cmd!r}"}


async def serve(fs: PowerFs) -> None:
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            lambda task_status: trio.serve_tcp(
                lambda s: control(fs, s), 0, host="127.0.0.1", task_status=task_status
            )
        )
        port = listeners[0].socket.getsockname()[1]
        print(f"ready {port}", flush=True)
        await pyfuse3.main()
        nursery.cancel_scope.cancel()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mount", required=True)
    parser.add_argument("--image", required=True)
    parser.add_argument("--names-with-any-fsync", action="store_true",
                        help="not POSIX: any fsync also makes every pending name change durable")
    args = parser.parse_args()
    image = None
    if os.path.exists(args.image):
        with open(args.image, "rb") as src:
            image = pickle.load(src)
    fs = PowerFs(image, names_with_any_fsync=args.names_with_any_fsync)
    options = set(pyfuse3.default_options)
    options.add("fsname=powerfs")
    pyfuse3.init(fs, args.mount, options)
    try:
        trio.run(serve, fs)
    finally:
        pyfuse3.close(unmount=True)


if __name__ == "__main__":
    sys.exit(main())
