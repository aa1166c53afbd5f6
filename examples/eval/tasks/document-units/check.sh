#!/bin/sh
# The check of `document-units`, run in the final workspace: units.py has a module docstring
# and each function a docstring with an example, every example passes under doctest, the
# functions compute as before, and README.md has a Usage section naming each function.
export PYTHONDONTWRITEBYTECODE=1
exec python3 - <<'PY'
import ast, doctest, re, sys

def fail(why):
    print(f"FAIL: {why}", file=sys.stderr)
    sys.exit(1)

NAMES = ("celsius_to_fahrenheit", "fahrenheit_to_celsius", "km_to_miles")
try:
    tree = ast.parse(open("units.py").read())
except (OSError, SyntaxError) as e:
    fail(f"units.py cannot be read: {e}")
if not (ast.get_docstring(tree) or "").strip():
    fail("units.py has no module docstring")
functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
for name in NAMES:
    if name not in functions:
        fail(f"units.py has no function {name} any more")
    if not (ast.get_docstring(functions[name]) or "").strip():
        fail(f"{name} has no docstring")

import units
finder = doctest.DocTestFinder()
runner = doctest.DocTestRunner(verbose=False)
for name in NAMES:
    found = [t for t in finder.find(getattr(units, name), name, globs=vars(units).copy()) if t.examples]
    if not found:
        fail(f"the docstring of {name} has no example (a `>>>` line and its result)")
    for test in found:
        runner.run(test, out=lambda _: None)
failed, attempted = runner.summarize(verbose=False)
if failed:
    fail(f"{failed} of the {attempted} docstring examples fail under doctest")
module = doctest.testmod(units, report=False)
if module.failed:
    fail(f"python3 -m doctest units.py: {module.failed} examples fail")

if units.celsius_to_fahrenheit(100) != 212 or units.celsius_to_fahrenheit(-40) != -40:
    fail("celsius_to_fahrenheit changed")
if units.fahrenheit_to_celsius(212) != 100 or units.fahrenheit_to_celsius(50) != 10:
    fail("fahrenheit_to_celsius changed")
if units.km_to_miles(10) != 6.214 or units.km_to_miles(0) != 0:
    fail("km_to_miles changed")

try:
    readme = open("README.md").read()
except OSError as e:
    fail(f"README.md cannot be read: {e}")
usage = re.split(r"(?m)^## Usage[ \t]*$", readme, maxsplit=1)
if len(usage) < 2:
    fail("README.md has no `## Usage` section")
section = re.split(r"(?m)^#{1,2} ", usage[1], maxsplit=1)[0]
for name in NAMES:
    if name not in section:
        fail(f"the Usage section of README.md does not name {name}")
PY
