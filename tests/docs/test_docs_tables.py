"""Every generated table of the docs equals what its command prints from the files in the repository
(issue 42 #3; python/retro_bench/doc_tables.py): `python -m retro_bench.doc_tables --check` over every
Markdown file under docs/ (docs/methods/ too) and README.md, with at least the blocks this test knows of; and the check can fail: a changed digit inside
a block, a block without its end and a command that is neither a package module nor a repository script
are each refused; the performance tables' generators (retro_bench.tools.gbench_table, runs_table) on small
made-up files. Debian's /usr/bin/python3 with NumPy; no build needed."""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
LAUNCH = os.path.join(ROOT, "python", "retro_bench", "_launch.py")
MIN_BLOCKS = 26  # docs/closed-loop.md's 10 (the 32K and 16K tables, costs, claims, Spearman, SmolLM2's),
#                  docs/performance.md's 15 (the CPU tables from docs/measurements/cpu-*, the GPU recount, cache
#                  locality) and docs/methods/pq.md's quantizer-vs-FAISS table


def check(*args):
    return subprocess.run([sys.executable, "-B", LAUNCH, "retro_bench.doc_tables", *args], cwd=ROOT,
                          capture_output=True, text=True)


class DocTables(unittest.TestCase):
    def test_every_generated_table_equals_its_files(self):
        r = check("--check")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        n = int(re.search(r"checked (\d+) generated table", r.stdout).group(1))
        self.assertGreaterEqual(n, MIN_BLOCKS, r.stdout)
        # every block of every doc is checked, a method's page too (pq.md's table once sat unfilled, its
        # folder outside the default files)
        docs = [os.path.join(d, f) for d, _, fs in os.walk(os.path.join(ROOT, "docs")) for f in fs if f.endswith(".md")]
        present = 0
        for path in docs + [os.path.join(ROOT, "README.md")]:
            with open(path) as f:
                present += len(re.findall(r"^<!-- generated: ", f.read(), re.M))
        self.assertEqual(n, present, r.stdout)

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


def tool(name, *args):
    return subprocess.run([sys.executable, "-B", LAUNCH, f"retro_bench.tools.{name}", *args], cwd=ROOT,
                          capture_output=True, text=True)


class TableTools(unittest.TestCase):
    """gbench_table and runs_table (the performance tables' generators): medians, ratios, '—' for what no
    file has, and a name that picks two benchmarks refused."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="retro-table-tools-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_gbench_table(self):
        def rep(name, real, cpu, **counters):
            return {"name": name, "run_name": name, "run_type": "iteration", "real_time": real, "cpu_time": cpu,
                    "time_unit": "ms", **counters}
        bench = [rep("BM_A/8/min_time:1.000", t, t / 2, hits=h) for t, h in ((3.0, 1), (1.0, 5), (2.0, 9))]
        bench += [rep("BM_B/8/min_time:1.000", 8.0, 8.0), rep("BM_B/80/min_time:1.000", 1.0, 1.0)]
        path = os.path.join(self.tmp, "b.json")
        with open(path, "w") as f:
            json.dump({"context": {}, "benchmarks": bench}, f)
        r = tool("gbench_table", path, "--header", "n|A|A/B|hits|C", "--row", "8=eight", "--col", "[ms BM_A/$1:.1f] ms",
                 "--col", "[ms BM_B/$1 / cpu_ms BM_A/$1:.2f]x", "--col", "[counter.hits BM_A/$1:.0f]", "--col", "[s BM_C/$1:.1f]")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.splitlines()[:3], ["| n | A | A/B | hits | C |", "|---|---|---|---|---|",
                                                     "| eight | 2.0 ms | 8.00x | 5 | — |"])
        self.assertIn("medians of 1/3 repetitions", r.stdout)
        r = tool("gbench_table", path, "--header", "A", "--row", "=x", "--col", "[ms BM_B:.1f]")
        self.assertEqual(r.returncode, 2)
        self.assertIn("names 2 benchmarks", r.stderr)

    def test_runs_table(self):
        for i, (sel, wall) in enumerate(((10.0, 3.0), (30.0, 5.0)), 1):
            d = os.path.join(self.tmp, f"rep{i}", "sweep")
            os.makedirs(d)
            with open(os.path.join(d, "manifest.json"), "w") as f:
                json.dump({"sessions": [{"wall_s": wall}]}, f)
            with open(os.path.join(d, "runs.jsonl"), "w") as f:
                for k in (1, 2):
                    f.write(json.dumps({"method": "m", "label": f"m(k={k})", "params": {"k": k},
                                        "metrics": {"select_us": {"p50": sel * k}}}) + "\n")
        roots = [os.path.join(self.tmp, "rep1"), os.path.join(self.tmp, "rep2")]
        r = tool("runs_table", *roots, "--header", "k|select|wall rep 2", "--row", "2=two", "--row", "3=three",
                 "--col", "[select_us.p50 sweep/m,k=$1:.0f]", "--col", "[wall_s swe*@2:.1f]")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.splitlines()[2:4], ["| two | 40 | 5.0 |", "| three | — | 5.0 |"])
        self.assertIn("medians over 2 repetitions", r.stdout)
        r = tool("runs_table", *roots, "--header", "x", "--row", "=x", "--col", "[select_us.p50 sweep/m:.0f]")
        self.assertEqual(r.returncode, 2)
        self.assertIn("picks 2 records", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
