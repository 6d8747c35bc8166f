"""Every program of examples/ (the book's chapter 3 patterns, docs/examples.md) runs against
its own fresh broker and must pass its own check: exit 0 and print `<file>: ok`.

An example is an ordinary program of the official client; it reads the broker URL from
$QUEEN_URL and ends within its own 20 s budget, so the timeout here only catches a hang.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"
EXAMPLES = sorted(EXAMPLES_DIR.glob("[0-9][0-9]_*.py"))
TIMEOUT_S = 60


def test_every_pattern_of_the_chapter_has_an_example():
    # A renamed or deleted example would otherwise just stop being run.
    assert len(EXAMPLES) == 11, [p.name for p in EXAMPLES]


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example(broker, example):
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEEN_")}
    env["QUEEN_URL"] = broker.url
    done = subprocess.run(
        [sys.executable, str(example)],
        cwd=EXAMPLES_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    said = f"--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    assert done.returncode == 0, said
    assert f"{example.name}: ok" in done.stdout.splitlines(), said
