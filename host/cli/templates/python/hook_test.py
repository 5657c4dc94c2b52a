"""The hook's own tests, run natively: `python3 -m unittest` in this folder."""

import unittest

import app
import warden


class GuardTest(unittest.TestCase):
    ctx = warden.Context(directory="/work")

    def test_blocks_secret_files(self):
        self.assertIsInstance(app.guard(self.ctx, "read", {"path": "keys.secret"}), warden.Block)

    def test_rewrites_dot_slash_paths(self):
        d = app.guard(self.ctx, "read", {"filePath": "./a.txt"})
        self.assertEqual(d.arguments, {"filePath": "a.txt"})

    def test_allows_the_rest(self):
        self.assertIsInstance(app.guard(self.ctx, "read", {"path": "a.txt"}), warden.Allow)


if __name__ == "__main__":
    unittest.main()
