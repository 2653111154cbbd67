#!/usr/bin/env python3
"""Lists the tests that printed a `SKIPPED: ...` line, from nextest's JUnit report.

scripts/test.sh runs this after the suite. nextest hides the output of passing tests, and a
test that cannot run here (no root, no Docker, no pfio, ...) prints `SKIPPED: why` to stderr
and passes; this makes those skips visible at the end of the run instead of counting them as
passes. Lines that start with `SKIPPED: no NVIDIA GPU` are the checks that need a real NVIDIA
GPU; they are only counted.

usage: report-skips.py [--ci] JUNIT_XML...   (or a plain log file, one test's output per line)

With --ci (scripts/test.sh passes it when CI=true) any other skip fails: exit status 1.
"""

import sys
import xml.etree.ElementTree as ET

MARK = "SKIPPED:"
GPU_MARK = "SKIPPED: no NVIDIA GPU"


def skips_in_junit(path):
    """(test name, skip line) for every SKIPPED line in a JUnit file, in report order."""
    found = []
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname', '')} {case.get('name', '')}".strip()
        for tag in ("system-out", "system-err"):
            for node in case.iter(tag):
                for line in (node.text or "").splitlines():
                    line = line.strip()
                    if line.startswith(MARK):
                        found.append((name, line))
    return found


def skips_in_log(path):
    """(\"\", skip line) for every SKIPPED line of a plain log (cargo test --nocapture)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        return [("", line.strip()) for line in f if line.strip().startswith(MARK)]


def tests(n):
    return f"{n} test" if n == 1 else f"{n} tests"


def main(argv):
    ci = "--ci" in argv
    paths = [a for a in argv if a != "--ci"]
    if not paths:
        print(__doc__.strip().splitlines()[-3], file=sys.stderr)
        return 2
    found = []
    for path in paths:
        try:
            found += skips_in_junit(path) if path.endswith(".xml") else skips_in_log(path)
        except (OSError, ET.ParseError) as e:
            print(f"cannot read the test report {path}: {e}", file=sys.stderr)
            return 2
    unique = list(dict.fromkeys(found))
    gpu = [s for s in unique if s[1].startswith(GPU_MARK)]
    other = [s for s in unique if not s[1].startswith(GPU_MARK)]
    if other:
        print(f"{tests(len(other))} skipped (they passed without checking anything):")
        for name, line in other:
            print(f"  {name}: {line}" if name else f"  {line}")
    if gpu:
        print(f"{tests(len(gpu))} skipped: no NVIDIA GPU")
    if not unique:
        print("no test skipped")
    if ci and other:
        print(f"CI=true: {tests(len(other))} skipped for a missing component other than an NVIDIA GPU; "
              "install what they name (scripts/test.sh does on a fresh machine) or fix the test",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
