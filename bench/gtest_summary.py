#!/usr/bin/env python3
"""One line for a GoogleTest binary's run from its XML report (--gtest_output=xml:FILE):
NAME: P passed, F failed, S skipped in T s (exit RC); slowest: TEST S s. Exit 1 when the run failed
(a failure, a non-zero exit, or no report: a crash or a timeout before the end)."""
import sys
import xml.etree.ElementTree as ET


def main() -> int:
    if len(sys.argv) != 5:
        print("usage: gtest_summary.py NAME XML EXIT_CODE SECONDS", file=sys.stderr)
        return 2
    name, path, rc, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        why = "timed out" if rc in (124, 137) else f"exit {rc}"
        print(f"{name}: no report ({why} after {seconds} s: {e.__class__.__name__})")
        return 1
    passed = failed = skipped = 0
    slowest = ("", 0.0)
    for case in root.iter("testcase"):
        t = float(case.get("time", "0") or 0)
        if t > slowest[1]:
            slowest = (f"{case.get('classname')}.{case.get('name')}", t)
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
        elif case.get("result") == "skipped" or case.find("skipped") is not None or case.get("status") == "notrun":
            skipped += 1
        else:
            passed += 1
    ok = failed == 0 and rc == 0
    print(f"{name}: {passed} passed, {failed} failed, {skipped} skipped in {seconds} s (exit {rc}); "
          f"slowest: {slowest[0]} {slowest[1]:.1f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
