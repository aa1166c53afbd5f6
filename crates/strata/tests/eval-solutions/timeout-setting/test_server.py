import unittest

from config import load
from server import describe


class DescribeTest(unittest.TestCase):
    def test_describe(self):
        self.assertEqual(
            describe(load("port=9000")), "listening on 127.0.0.1:9000, timeout 30s"
        )


if __name__ == "__main__":
    unittest.main()
