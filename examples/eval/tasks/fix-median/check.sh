#!/bin/sh
# The check of `fix-median`, run in the final workspace: test_stats.py is as it was given,
# every test passes, and median and mean give the right answers on more cases.
export PYTHONDONTWRITEBYTECODE=1
given="$(dirname "$0")/files/test_stats.py"
if ! cmp -s "$given" test_stats.py; then
    echo "FAIL: test_stats.py was changed (or removed): fix stats.py instead" >&2
    exit 1
fi
exec python3 - <<'PY'
import io, sys, unittest

def fail(why):
    print(f"FAIL: {why}", file=sys.stderr)
    sys.exit(1)

tests = unittest.defaultTestLoader.discover(".")
result = unittest.TextTestRunner(stream=io.StringIO()).run(tests)
if not result.wasSuccessful() or result.testsRun < 5:
    fail(f"python3 -m unittest fails ({result.testsRun} ran, {len(result.failures)} failures, {len(result.errors)} errors)")

from stats import mean, median
cases = [([5], 5), ([2, 1], 1.5), ([7, 1, 3], 3), ([10, 2, 8, 4], 6), ([1, 1, 2, 9, 9, 9], 5.5), ([-3, -1], -2)]
for values, expected in cases:
    got = median(list(values))
    if got != expected:
        fail(f"median({values}) is {got!r}, not {expected!r}")
try:
    median([])
    fail("median([]) raises no ValueError")
except ValueError:
    pass
if mean([1, 2, 3, 4]) != 2.5:
    fail("mean changed")
PY
