import unittest

from textutils import slugify, truncate


class TruncateTest(unittest.TestCase):
    def test_short_text_is_kept(self):
        self.assertEqual(truncate("abc", 5), "abc")

    def test_long_text_is_cut_with_an_ellipsis(self):
        self.assertEqual(truncate("abcdefgh", 6), "abc...")


class SlugifyTest(unittest.TestCase):
    def test_words_are_joined_by_hyphens(self):
        self.assertEqual(slugify("Hello, World!"), "hello-world")

    def test_no_hyphen_at_the_ends(self):
        self.assertEqual(slugify("  -Rust & Python 3-  "), "rust-python-3")


if __name__ == "__main__":
    unittest.main()
