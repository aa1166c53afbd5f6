"""The value of a shop's stock. An item is a dict with `name`, `price`, `quantity` and an
optional `discount` in percent."""


def unit_price(item):
    """The price of one of `item` after its discount."""
    price = item["price"]
    if item.get("discount"):
        price = price * (100 - item["discount"]) / 100
    return price


def total_value(items):
    """The value of all the items, rounded to cents."""
    return round(sum(unit_price(item) * item["quantity"] for item in items), 2)


def most_valuable(items):
    """The name of the item whose stock is worth most (None when there are no items)."""
    best, best_value = None, None
    for item in items:
        value = unit_price(item) * item["quantity"]
        if best_value is None or value > best_value:
            best, best_value = item["name"], value
    return best


def value_report(items):
    """A line per item: its name and the value of its stock."""
    return "\n".join(
        f"{item['name']}: {unit_price(item) * item['quantity']:.2f}" for item in items
    )
