"""Prints a greeting: python3 greet.py [--shout] NAME."""

import argparse
import sys


def greeting(name):
    """The greeting of `name`."""
    return f"Hello, {name}!"


def main(argv=None):
    parser = argparse.ArgumentParser(description="Print a greeting.")
    parser.add_argument("name", help="who to greet")
    parser.add_argument("--shout", action="store_true", help="print the greeting in upper case")
    args = parser.parse_args(argv)
    text = greeting(args.name)
    print(text.upper() if args.shout else text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
