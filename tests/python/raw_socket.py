"""Raw TCP connections to a broker, for tests of what the door does below HTTP."""

import socket
import struct


def connect(b) -> socket.socket:
    return socket.create_connection(("127.0.0.1", b.port), timeout=10)


def closed_by_server(s: socket.socket, within: float) -> bool:
    """True when the server closes `s` (EOF or reset) within `within` seconds."""
    s.settimeout(within)
    try:
        while True:
            if not s.recv(4096):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def kafka_connect(b) -> socket.socket:
    return socket.create_connection(("127.0.0.1", b.kafka_port), timeout=10)


def kafka_frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def kafka_request(
    api_key: int, version: int, corr: int, body: bytes = b"", client=b"t", tags=False
) -> bytes:
    """A Kafka request frame; `tags` adds the empty tag section of a v2 (flexible) header."""
    head = struct.pack(">hhih", api_key, version, corr, len(client)) + client
    return kafka_frame(head + (b"\x00" if tags else b"") + body)


def read_kafka_frame(s: socket.socket) -> bytes:
    """One length-prefixed Kafka response frame, without its length."""

    def exact(n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = s.recv(n - len(out))
            assert chunk, "connection closed"
            out += chunk
        return out

    (n,) = struct.unpack(">i", exact(4))
    return exact(n)
