"""Prints a greeting: python3 greet.py NAME."""

import argparse
import sys


def greeting(name):
    """The greeting of `name`."""
    return f"Hello, {name}!"


def main(argv=None):
    parser = argparse.ArgumentParser(description="Print a greeting.")
    parser.add_argument("name", help="who to greet")
    args = parser.parse_args(argv)
    print(greeting(args.name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
