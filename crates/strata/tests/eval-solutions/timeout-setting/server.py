"""Says how the server a configuration file sets up listens: python3 server.py FILE."""

import sys

from config import load


def describe(settings):
    """One line about the server `settings` set up."""
    return (
        f"listening on {settings['host']}:{settings['port']}, timeout {settings['timeout']}s"
    )


if __name__ == "__main__":
    with open(sys.argv[1]) as file:
        print(describe(load(file.read())))
