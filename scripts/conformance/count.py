"""Counts passed and failed test cases in JUnit XML reports (pytest's and node --test's).

Usage: count.py REPORT.xml... ; prints "PASSED FAILED SKIPPED". A missing or unreadable report
counts as one failure (the suite crashed before it could report)."""

import sys
import xml.etree.ElementTree as ET


def count(path: str) -> tuple[int, int, int]:
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        print(f"count.py: cannot read {path}: {e}", file=sys.stderr)
        return 0, 1, 0
    passed = failed = skipped = 0
    for case in root.iter("testcase"):
        tags = {child.tag for child in case}
        if tags & {"failure", "error"}:
            failed += 1
        elif "skipped" in tags:
            skipped += 1
        else:
            passed += 1
    return passed, failed, skipped


if __name__ == "__main__":
    totals = [0, 0, 0]
    for p in sys.argv[1:]:
        for i, n in enumerate(count(p)):
            totals[i] += n
    print(*totals)
