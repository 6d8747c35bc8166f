"""Checks of binary_table.py on made-up run files: an unverified run is never "ok", a failed
run is left out of the summary. Run by scripts/bench-smoke.sh:

    python3 scripts/bench/test_binary_table.py
"""

import json
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import binary_table  # noqa: E402


def run(rate: float, **overrides) -> dict:
    base = {"exit_code": 0, "lost": 0, "malformed": 0, "payload_mismatches": 0, "errors": 0,
            "push_items_refused": 0, "ack_items_refused": 0,
            "produce": {"msg_per_sec": rate}}
    base.update(overrides)
    return base


def write(directory: Path, name: str, one: dict) -> None:
    (directory / f"{name}.json").write_text(json.dumps({"runs": [one]}))


class BinaryTable(unittest.TestCase):
    def test_an_unverified_run_is_not_ok(self):
        self.assertEqual(binary_table.checks(run(1.0, lost=None)), "not verified")
        self.assertEqual(binary_table.checks(run(1.0)), "ok")
        self.assertIn("ack_items_refused 5", binary_table.checks(run(1.0, ack_items_refused=5)))

    def test_failed_runs_are_left_out_of_the_summary(self):
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(tmp)
            write(d, "push-json-1", run(100.0))
            write(d, "push-json-2", run(300.0))
            write(d, "push-json-3", run(200.0))
            write(d, "push-qpb1-1", run(9_999.0, exit_code=2, lost=7))
            write(d, "push-qpb1-2", run(150.0))
            write(d, "push-qpb1-3", run(9_999.0, lost=None))
            write(d, "push-qpb1-frames-1", run(9_999.0, errors=1))
            got = {key: rest for key, *rest in binary_table.summary(binary_table.runs_of(d))}
        self.assertEqual(got[("push", "json")], [200.0, 100.0, 300.0, 3, 3, 1.0])
        self.assertEqual(got[("push", "qpb1")], [150.0, 150.0, 150.0, 1, 3, 0.75])
        self.assertEqual(got[("push", "qpb1-frames")], [None, None, None, 0, 1, None])


if __name__ == "__main__":
    unittest.main()
