"""Checks of smoke_check.py on made-up reports: a Kafka run with a duplicate or an unexpected
id fails, and so does a report from another driver than the one asked. Run by
scripts/bench-smoke.sh:

    python3 scripts/bench/test_smoke_check.py
"""

import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import smoke_check  # noqa: E402

KAFKA = ["e2e", "--groups", "2", "--driver", "kafka", "--kafka-addr", "127.0.0.1:9092"]


def report(**overrides) -> dict:
    base = {"scenario": "e2e", "driver": "kafka", "exit_code": 0, "lost": 0, "accepted": 100,
            "malformed": 0, "payload_mismatches": 0, "errors": 0, "push_items_refused": 0,
            "ack_items_refused": 0, "duplicates": 0, "unexpected": 0, "error_samples": [],
            "produce": {"messages": 100, "msg_per_sec": 50.0}}
    base.update(overrides)
    return base


class SmokeCheck(unittest.TestCase):
    def test_a_clean_kafka_run_passes(self):
        self.assertTrue(smoke_check.verdict(report(), KAFKA).startswith("ok"))

    def test_kafka_duplicates_and_unexpected_fail(self):
        for key in ("duplicates", "unexpected"):
            got = smoke_check.verdict(report(**{key: 1}), KAFKA)
            self.assertTrue(got.startswith("FAIL"), got)
            self.assertIn(f"{key} 1", got)

    def test_the_report_must_come_from_the_driver_asked(self):
        got = smoke_check.verdict(report(driver="queen-http"), KAFKA)
        self.assertTrue(got.startswith("FAIL"), got)
        got = smoke_check.verdict(report(driver="kafka"), ["e2e", "--groups", "2"])
        self.assertTrue(got.startswith("FAIL"), got)
        http = report(driver="queen-http", duplicates=3)
        self.assertTrue(smoke_check.verdict(http, ["e2e"]).startswith("ok"))


if __name__ == "__main__":
    unittest.main(verbosity=0)
