import unittest

from textutils import truncate


class TruncateTest(unittest.TestCase):
    def test_short_text_is_kept(self):
        self.assertEqual(truncate("abc", 5), "abc")

    def test_long_text_is_cut_with_an_ellipsis(self):
        self.assertEqual(truncate("abcdefgh", 6), "abc...")


if __name__ == "__main__":
    unittest.main()
