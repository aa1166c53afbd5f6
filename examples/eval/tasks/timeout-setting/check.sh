#!/bin/sh
# The check of `timeout-setting`, run in the final workspace: config.py reads `timeout` (30
# by default, an integer), server.py's describe() ends with it, and the project's tests pass
# with a new one of the setting.
export PYTHONDONTWRITEBYTECODE=1
exec python3 - <<'PY'
import io, sys, unittest

def fail(why):
    print(f"FAIL: {why}", file=sys.stderr)
    sys.exit(1)

tests = unittest.defaultTestLoader.discover(".")
result = unittest.TextTestRunner(stream=io.StringIO()).run(tests)
if not result.wasSuccessful():
    fail(f"python3 -m unittest fails ({len(result.failures)} failures, {len(result.errors)} errors)")
if result.testsRun < 5:
    fail(f"only {result.testsRun} tests ran: add a test of the timeout setting")

from config import load
from server import describe
if load("").get("timeout") != 30:
    fail(f"the default timeout is {load('').get('timeout')!r}, not 30")
for text, timeout in [("timeout=5", 5), ("port=1\ntimeout = 120\n", 120)]:
    got = load(text).get("timeout")
    if got != timeout or not isinstance(got, int):
        fail(f"load({text!r}) gives the timeout {got!r}, not the integer {timeout}")
if load("port=9000")["port"] != 9000 or load("host=a")["host"] != "a":
    fail("host and port are no longer read as before")
try:
    load("colour=blue")
    fail("an unknown key is no longer refused")
except ValueError:
    pass
for text, line in [("port=9000", "listening on 127.0.0.1:9000, timeout 30s"),
                   ("host=example.org\ntimeout=5", "listening on example.org:8080, timeout 5s")]:
    got = describe(load(text))
    if got != line:
        fail(f"describe(load({text!r})) is {got!r}, not {line!r}")
PY
