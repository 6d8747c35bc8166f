"""Raw TCP connections to a broker, for tests of what the door does below HTTP."""

import socket


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
