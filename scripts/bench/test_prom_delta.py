"""Checks of prom_delta.py on made-up scrapes. Run by scripts/bench-smoke.sh:

    python3 scripts/bench/test_prom_delta.py
"""

import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import prom_delta  # noqa: E402

BEFORE = """
queen_checkpoint_encode_seconds_bucket{tenant="t",le="0.0005"} 5
queen_checkpoint_encode_seconds_bucket{tenant="t",le="+Inf"} 5
queen_checkpoint_encode_seconds_sum{tenant="t"} 0.001
queen_checkpoint_encode_seconds_count{tenant="t"} 5
queen_checkpoint_cow_copy_seconds_bucket{tenant="t",le="0.001"} 90
queen_checkpoint_cow_copy_seconds_bucket{tenant="t",le="0.005"} 99
queen_checkpoint_cow_copy_seconds_bucket{tenant="t",le="0.01"} 100
queen_checkpoint_cow_copy_seconds_bucket{tenant="t",le="+Inf"} 100
queen_checkpoint_cow_copy_seconds_sum{tenant="t"} 0.2
queen_checkpoint_cow_copy_seconds_count{tenant="t"} 100
queen_other_total 7
"""

END = """
queen_checkpoint_encode_seconds_bucket{tenant="t",le="0.0005"} 9
queen_checkpoint_encode_seconds_bucket{tenant="t",le="+Inf"} 9
queen_checkpoint_encode_seconds_sum{tenant="t"} 0.002
queen_checkpoint_encode_seconds_count{tenant="t"} 9
queen_checkpoint_cow_copy_seconds_bucket{tenant="t",le="0.001"} 170
queen_checkpoint_cow_copy_seconds_bucket{tenant="t",le="0.005"} 190
queen_checkpoint_cow_copy_seconds_bucket{tenant="t",le="0.01"} 200
queen_checkpoint_cow_copy_seconds_bucket{tenant="t",le="+Inf"} 200
queen_checkpoint_cow_copy_seconds_sum{tenant="t"} 0.5
queen_checkpoint_cow_copy_seconds_count{tenant="t"} 200
queen_checkpoint_cow_block_seconds_count{tenant="t",block="cursors"} 3
queen_checkpoint_cow_stretch_copies_bucket{tenant="t",block="cursors",le="64"} 1
queen_checkpoint_cow_stretch_copies_bucket{tenant="t",block="cursors",le="128"} 2
queen_checkpoint_cow_stretch_copies_bucket{tenant="t",block="cursors",le="+Inf"} 2
queen_checkpoint_cow_stretch_copies_sum{tenant="t",block="cursors"} 150
queen_checkpoint_cow_stretch_copies_count{tenant="t",block="cursors"} 2
"""


class PromDelta(unittest.TestCase):
    def test_only_the_phase_is_counted(self):
        d = prom_delta.delta(prom_delta.parse(BEFORE), prom_delta.parse(END))
        hs = prom_delta.histograms(d)
        copy = hs[("queen_checkpoint_cow_copy_seconds", '{tenant="t"}')]
        self.assertEqual(copy["count"], 100)
        self.assertAlmostEqual(copy["sum"], 0.3)
        # 80 of the phase's 100 at most 1 ms, 100 at most 10 ms: its p99 is in (5, 10] ms.
        self.assertEqual(prom_delta.p99_bucket(copy["buckets"], copy["count"]), "5-10 ms")
        self.assertEqual(prom_delta.over(copy["buckets"], copy["count"], 0.005), 9)
        self.assertNotIn(("queen_other_total", ""), d, "only checkpoint series")

    def test_a_series_new_in_the_phase_counts_whole(self):
        d = prom_delta.delta(prom_delta.parse(BEFORE), prom_delta.parse(END))
        self.assertEqual(d[("queen_checkpoint_cow_block_seconds_count", '{tenant="t",block="cursors"}')], 3)

    def test_slow_stretches_are_per_checkpoint_of_the_phase(self):
        d = prom_delta.delta(prom_delta.parse(BEFORE), prom_delta.parse(END))
        lines = prom_delta.summary(d)
        self.assertEqual(lines[0], "# checkpoints in the phase: 4")
        copy = [l for l in lines if "cow_copy_seconds" in l][0]
        self.assertIn("over 5 ms 9 (2.25 per checkpoint)", copy)

    def test_a_count_histogram_has_no_unit_and_no_threshold(self):
        d = prom_delta.delta(prom_delta.parse(BEFORE), prom_delta.parse(END))
        line = [l for l in prom_delta.summary(d) if "stretch_copies" in l][0]
        self.assertEqual(line, '# queen_checkpoint_cow_stretch_copies{tenant="t",block="cursors"}: '
                               "n 2, mean 75.0, sum 150, p99 64-128")

    def test_an_empty_before_scrape_is_refused(self):
        # Review s30 L4a: a failed scrape must not pass the whole run off as the phase.
        with tempfile.TemporaryDirectory() as d:
            before, end = Path(d, "before.prom"), Path(d, "end.prom")
            before.write_text("")
            end.write_text(END)
            self.assertEqual(prom_delta.main(["prom_delta", str(before), str(end)]), 1)
            before.write_text(BEFORE)
            self.assertEqual(prom_delta.main(["prom_delta", str(before), str(end)]), 0)

    def test_no_samples_has_no_p99(self):
        self.assertEqual(prom_delta.p99_bucket([(0.001, 0.0)], 0), "-")


if __name__ == "__main__":
    unittest.main()
