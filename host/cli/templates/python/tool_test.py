"""The tool's own tests, run natively: `python3 -m unittest` in this folder."""

import os
import tempfile
import unittest

import app
import warden


class CountTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.ctx = warden.Context(directory=self.dir)

    def test_counts_lines_and_words(self):
        with open(os.path.join(self.dir, "a.txt"), "w") as f:
            f.write("one two\nthree\n")
        out = app.count(self.ctx, {"path": "a.txt"})
        self.assertEqual(out.metadata, {"lines": 2, "words": 3})

    def test_refuses_paths_outside_the_working_directory(self):
        with self.assertRaises(warden.InvalidArguments):
            app.count(self.ctx, {"path": "../elsewhere.txt"})

    def test_an_empty_file_is_an_error(self):
        open(os.path.join(self.dir, "empty.txt"), "w").close()
        with self.assertRaisesRegex(ValueError, "empty.txt is empty"):
            app.count(self.ctx, {"path": "empty.txt"})


if __name__ == "__main__":
    unittest.main()
