#!/bin/sh
# The check of `cli-flag`, run in the final workspace: greet.py greets as before, shouts with
# --shout, says so in --help, and the project's tests pass with a new one that uses --shout.
export PYTHONDONTWRITEBYTECODE=1
exec python3 - <<'PY'
import ast, io, subprocess, sys, unittest

def fail(why):
    print(f"FAIL: {why}", file=sys.stderr)
    sys.exit(1)

def greet(*args):
    run = subprocess.run([sys.executable, "greet.py", *args], capture_output=True, text=True, timeout=20)
    return run.returncode, run.stdout

for args, expected in [(["Ada"], "Hello, Ada!\n"), (["--shout", "Ada"], "HELLO, ADA!\n"),
                       (["Grace", "--shout"], "HELLO, GRACE!\n"), (["Grace"], "Hello, Grace!\n")]:
    code, out = greet(*args)
    if (code, out) != (0, expected):
        fail(f"python3 greet.py {' '.join(args)} printed {out!r} (exit {code}), not {expected!r}")
code, out = greet("--help")
if code != 0 or "--shout" not in out:
    fail("python3 greet.py --help does not describe --shout")

tests = unittest.defaultTestLoader.discover(".")
result = unittest.TextTestRunner(stream=io.StringIO()).run(tests)
if not result.wasSuccessful():
    fail(f"python3 -m unittest fails ({len(result.failures)} failures, {len(result.errors)} errors)")
if result.testsRun < 3:
    fail(f"only {result.testsRun} tests ran: add a test of --shout")
try:
    tree = ast.parse(open("test_greet.py").read())
except (OSError, SyntaxError) as e:
    fail(f"test_greet.py cannot be read: {e}")
if not any(isinstance(n, ast.Constant) and n.value == "--shout" for n in ast.walk(tree)):
    fail("no test in test_greet.py uses --shout")
PY
