"""Count passed/failed/skipped tests in pytest JUnit XML reports.

As a script: `python junit_summary.py DIR_OR_FILE...` prints one line
`N passed, N failed, N skipped` over every *.xml found (errors count as failed).
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Counts:
    passed: int = 0
    failed: int = 0
    skipped: int = 0

    @property
    def total(self) -> int:
        return self.passed + self.failed + self.skipped

    def __add__(self, other: "Counts") -> "Counts":
        return Counts(
            self.passed + other.passed,
            self.failed + other.failed,
            self.skipped + other.skipped,
        )

    def line(self) -> str:
        return f"{self.passed} passed, {self.failed} failed, {self.skipped} skipped"


def read_report(path: Path) -> Counts:
    """Counts of one report; an unreadable report counts as one failure."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return Counts(failed=1)
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    total = Counts()
    for suite in suites:
        tests = int(suite.get("tests", 0))
        failed = int(suite.get("failures", 0)) + int(suite.get("errors", 0))
        skipped = int(suite.get("skipped", 0))
        total += Counts(max(tests - failed - skipped, 0), failed, skipped)
    return total


def summarize(paths: list[Path]) -> Counts:
    total = Counts()
    for path in paths:
        reports = sorted(path.rglob("*.xml")) if path.is_dir() else [path]
        for report in reports:
            total += read_report(report)
    return total


if __name__ == "__main__":
    print(summarize([Path(arg) for arg in sys.argv[1:]]).line())
