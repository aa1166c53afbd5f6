"""Reads the server's settings from `key=value` lines; `#` starts a comment line."""

DEFAULTS = {"host": "127.0.0.1", "port": 8080, "timeout": 30}
INTEGERS = ("port", "timeout")


def load(text):
    """The settings in `text`, over the defaults (a ValueError for an unknown key)."""
    settings = dict(DEFAULTS)
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if key not in DEFAULTS:
            raise ValueError(f"unknown setting {key!r}")
        settings[key] = int(value) if key in INTEGERS else value
    return settings
