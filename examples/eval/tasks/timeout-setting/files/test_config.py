import unittest

from config import load


class LoadTest(unittest.TestCase):
    def test_defaults(self):
        self.assertEqual(load("")["host"], "127.0.0.1")
        self.assertEqual(load("")["port"], 8080)

    def test_values_and_comments(self):
        settings = load("# the server\nhost = example.org\nport=9000\n")
        self.assertEqual(settings["host"], "example.org")
        self.assertEqual(settings["port"], 9000)

    def test_unknown_key(self):
        with self.assertRaises(ValueError):
            load("colour=blue")


if __name__ == "__main__":
    unittest.main()
