"""A process's memory as Linux reports it in /proc/<pid>/status (bytes)."""


def status_bytes(pid: int, field: str) -> int:
    """A `kB` field of /proc/<pid>/status (VmRSS, VmHWM, ...) in bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def rss(pid: int) -> int:
    return status_bytes(pid, "VmRSS")


def peak_rss_since_reset(pid: int) -> int:
    return status_bytes(pid, "VmHWM")


def reset_peak_rss(pid: int) -> None:
    # "5" resets VmHWM to the current RSS (Linux 4.0+), so the peak is of what follows only.
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")
