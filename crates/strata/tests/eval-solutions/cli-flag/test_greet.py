import contextlib
import io
import unittest

from greet import greeting, main


def printed(argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(argv)
    return out.getvalue()


class GreetTest(unittest.TestCase):
    def test_greeting(self):
        self.assertEqual(greeting("Ada"), "Hello, Ada!")

    def test_main_prints_the_greeting(self):
        self.assertEqual(printed(["Ada"]), "Hello, Ada!\n")

    def test_shout_prints_it_in_upper_case(self):
        self.assertEqual(printed(["--shout", "Ada"]), "HELLO, ADA!\n")


if __name__ == "__main__":
    unittest.main()
