"""Small helpers for text."""


def truncate(text, width):
    """Return `text` cut to at most `width` characters, ending in "..." when it was cut."""
    if len(text) <= width:
        return text
    return text[: max(width - 3, 0)] + "..."
