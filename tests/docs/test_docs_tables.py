"""Every generated table of the docs equals what its command prints from the files in the repository
(issue 42 #3; python/retro_bench/doc_tables.py): `python -m retro_bench.doc_tables --check` over docs/*.md
and README.md, with at least the blocks this test knows of; and the check can fail: a changed digit inside
a block, a block without its end and a command that is neither a package module nor a repository script
are each refused. Debian's /usr/bin/python3 with NumPy; no build needed."""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
LAUNCH = os.path.join(ROOT, "python", "retro_bench", "_launch.py")
MIN_BLOCKS = 8  # the closed loop's 32K and 16K tables, the costs, claims and Spearman tables, SmolLM2's


def check(*args):
    return subprocess.run([sys.executable, "-B", LAUNCH, "retro_bench.doc_tables", *args], cwd=ROOT,
                          capture_output=True, text=True)


class DocTables(unittest.TestCase):
    def test_every_generated_table_equals_its_files(self):
        r = check("--check")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        n = int(re.search(r"checked (\d+) generated table", r.stdout).group(1))
        self.assertGreaterEqual(n, MIN_BLOCKS, r.stdout)

    def test_a_changed_number_is_found(self):
        tmp = tempfile.mkdtemp(prefix="retro-doc-tables-")
        try:
            doc = os.path.join(tmp, "closed-loop.md")
            with open(os.path.join(ROOT, "docs", "closed-loop.md")) as f:
                text = f.read()
            start = text.index("<!-- generated: retro_bench.closedloop.doc_views fidelity")
            m = re.compile(r"0\.0189").search(text, start)  # the oracle's KL at 1.8 % (32K fidelity)
            self.assertIsNotNone(m)
            with open(doc, "w") as f:
                f.write(text[:m.start()] + "0.0198" + text[m.end():])
            r = check("--check", "--root", ROOT, doc)
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertIn("doc_views fidelity results/closedloop-qwen2.5-0.5b-32k", r.stderr)
            r = check("--write", "--root", ROOT, doc)  # --write puts the files' number back
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(doc) as f:
                self.assertEqual(f.read(), text)
            with open(doc, "w") as f:
                f.write("<!-- generated: retro_bench.closedloop.claims x -->\nno end\n")
            r = check("--check", "--root", ROOT, doc)
            self.assertEqual(r.returncode, 2)
            self.assertIn("has no '<!-- end generated -->'", r.stderr)
            with open(doc, "w") as f:
                f.write("<!-- generated: rm -rf / -->\n<!-- end generated -->\n")
            r = check("--check", "--root", ROOT, doc)
            self.assertEqual(r.returncode, 2)
            self.assertIn("a command is a module retro_bench.X or a script scripts/X.py", r.stderr)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
