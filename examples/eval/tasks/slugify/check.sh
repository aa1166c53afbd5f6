#!/bin/sh
# The check of `slugify`, run in the final workspace: the project's tests pass, at least one
# of them calls slugify, and slugify (and truncate, which was there) give the right answers.
export PYTHONDONTWRITEBYTECODE=1
exec python3 - <<'PY'
import ast, io, sys, unittest

def fail(why):
    print(f"FAIL: {why}", file=sys.stderr)
    sys.exit(1)

tests = unittest.defaultTestLoader.discover(".")
result = unittest.TextTestRunner(stream=io.StringIO()).run(tests)
if not result.wasSuccessful():
    fail(f"python3 -m unittest fails ({len(result.failures)} failures, {len(result.errors)} errors)")
if result.testsRun < 3:
    fail(f"only {result.testsRun} tests ran: add tests of slugify")

try:
    tree = ast.parse(open("test_textutils.py").read())
except (OSError, SyntaxError) as e:
    fail(f"test_textutils.py cannot be read: {e}")
called = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
called |= {n.func.attr for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)}
if "slugify" not in called:
    fail("no test in test_textutils.py calls slugify")

try:
    from textutils import slugify, truncate
except ImportError as e:
    fail(f"textutils has no slugify: {e}")
cases = {
    "Hello, World!": "hello-world",
    "  Rust & Python 3  ": "rust-python-3",
    "already-a-slug": "already-a-slug",
    "--Multiple---hyphens--": "multiple-hyphens",
    "C'est la vie": "c-est-la-vie",
    "MiXeD CaSe 42": "mixed-case-42",
    "snake_case_name": "snake-case-name",
    "": "",
    "!!!": "",
}
for text, slug in cases.items():
    got = slugify(text)
    if got != slug:
        fail(f"slugify({text!r}) is {got!r}, not {slug!r}")
if truncate("abcdefgh", 6) != "abc..." or truncate("abc", 5) != "abc":
    fail("truncate changed")
PY
