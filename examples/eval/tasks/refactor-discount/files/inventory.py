"""The value of a shop's stock. An item is a dict with `name`, `price`, `quantity` and an
optional `discount` in percent."""


def total_value(items):
    """The value of all the items, rounded to cents."""
    total = 0
    for item in items:
        price = item["price"]
        if item.get("discount"):
            price = price * (100 - item["discount"]) / 100
        total += price * item["quantity"]
    return round(total, 2)


def most_valuable(items):
    """The name of the item whose stock is worth most (None when there are no items)."""
    best, best_value = None, None
    for item in items:
        price = item["price"]
        if item.get("discount"):
            price = price * (100 - item["discount"]) / 100
        value = price * item["quantity"]
        if best_value is None or value > best_value:
            best, best_value = item["name"], value
    return best


def value_report(items):
    """A line per item: its name and the value of its stock."""
    lines = []
    for item in items:
        price = item["price"]
        if item.get("discount"):
            price = price * (100 - item["discount"]) / 100
        lines.append(f"{item['name']}: {price * item['quantity']:.2f}")
    return "\n".join(lines)
