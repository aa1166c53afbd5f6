"""Small helpers for text."""

import re


def truncate(text, width):
    """Return `text` cut to at most `width` characters, ending in "..." when it was cut."""
    if len(text) <= width:
        return text
    return text[: max(width - 3, 0)] + "..."


def slugify(text):
    """`text` as a URL slug: lower case, each run of other characters than ASCII letters and
    digits one hyphen, no hyphen at either end."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
