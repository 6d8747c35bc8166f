"""A second broker on a data dir that a running broker holds must refuse to start."""

import subprocess

import httpx

from queen_broker import broker_env, free_port


def test_second_broker_on_a_locked_data_dir_exits_with_locked(broker):
    second = subprocess.run(
        broker.command(free_port()),
        env=broker_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=30,
    )
    output = (second.stdout + second.stderr).decode(errors="replace")
    assert second.returncode != 0, f"second broker exited 0:\n{output}"
    assert "locked" in output.lower(), f"no 'locked' in its output:\n{output}"
    assert broker.proc.poll() is None, "the first broker died"
    assert httpx.get(f"{broker.url}/health", timeout=5).status_code == 200
