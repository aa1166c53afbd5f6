#!/bin/sh
# The check of `refactor-discount`, run in the final workspace: test_inventory.py is as it
# was given and passes; inventory.py has a function unit_price that gives an item's price
# after its discount; total_value, most_valuable and value_report call it and no longer
# read the discount themselves; and they answer as before on more cases.
export PYTHONDONTWRITEBYTECODE=1
given="$(dirname "$0")/files/test_inventory.py"
if ! cmp -s "$given" test_inventory.py; then
    echo "FAIL: test_inventory.py was changed (or removed)" >&2
    exit 1
fi
exec python3 - <<'PY'
import ast, io, sys, unittest

def fail(why):
    print(f"FAIL: {why}", file=sys.stderr)
    sys.exit(1)

tests = unittest.defaultTestLoader.discover(".")
result = unittest.TextTestRunner(stream=io.StringIO()).run(tests)
if not result.wasSuccessful() or result.testsRun < 4:
    fail(f"python3 -m unittest fails ({result.testsRun} ran, {len(result.failures)} failures, {len(result.errors)} errors)")

try:
    tree = ast.parse(open("inventory.py").read())
except (OSError, SyntaxError) as e:
    fail(f"inventory.py cannot be read: {e}")
functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
if "unit_price" not in functions:
    fail("inventory.py has no top-level function unit_price")
for name in ("total_value", "most_valuable", "value_report"):
    function = functions.get(name)
    if function is None:
        fail(f"inventory.py has no function {name} any more")
    calls = {n.func.id for n in ast.walk(function) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    if "unit_price" not in calls:
        fail(f"{name} does not call unit_price")
    if any(isinstance(n, ast.Constant) and n.value == "discount" for n in ast.walk(function)):
        fail(f"{name} still reads the discount itself")

from inventory import most_valuable, total_value, unit_price, value_report
if unit_price({"name": "a", "price": 10.0, "quantity": 3}) != 10.0:
    fail("unit_price of an item without a discount is not its price")
if unit_price({"name": "a", "price": 80.0, "quantity": 1, "discount": 25}) != 60.0:
    fail("unit_price of 80 at 25 % off is not 60")
stock = [
    {"name": "cup", "price": 4.0, "quantity": 5, "discount": 50},
    {"name": "pot", "price": 12.0, "quantity": 1},
    {"name": "jug", "price": 9.0, "quantity": 2, "discount": 0},
]
if total_value(stock) != 40.0:
    fail(f"total_value is {total_value(stock)!r}, not 40.0")
if most_valuable(stock) != "jug":
    fail(f"most_valuable is {most_valuable(stock)!r}, not 'jug'")
if value_report(stock) != "cup: 10.00\npot: 12.00\njug: 18.00":
    fail(f"value_report is {value_report(stock)!r}")
PY
