import unittest

from inventory import most_valuable, total_value, value_report

STOCK = [
    {"name": "pen", "price": 2.0, "quantity": 10},
    {"name": "lamp", "price": 40.0, "quantity": 1, "discount": 25},
    {"name": "desk", "price": 150.0, "quantity": 2, "discount": 10},
]


class InventoryTest(unittest.TestCase):
    def test_total_value(self):
        self.assertEqual(total_value(STOCK), 320.0)

    def test_total_value_of_nothing(self):
        self.assertEqual(total_value([]), 0)

    def test_most_valuable(self):
        self.assertEqual(most_valuable(STOCK), "desk")
        self.assertIsNone(most_valuable([]))

    def test_value_report(self):
        self.assertEqual(value_report(STOCK), "pen: 20.00\nlamp: 30.00\ndesk: 270.00")


if __name__ == "__main__":
    unittest.main()
