"""Summary statistics of a list of numbers."""


def mean(values):
    """The arithmetic mean of `values` (a ValueError when there are none)."""
    if not values:
        raise ValueError("mean of no values")
    return sum(values) / len(values)


def median(values):
    """The middle value of `values` once sorted; for an even count, the mean of the two
    middle values (a ValueError when there are none)."""
    if not values:
        raise ValueError("median of no values")
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2 == 1:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2
