"""retro_bench.Method and Param (python/retro_bench/method.py, docs/adding-a-method.md): the declared
parameters become the registry's schema and the instance's attributes, checked as the registry checks a
config; retro-bench loads a Method subclass from a file and refuses its bad values by name. Pure Python
(the compiled core is not needed), plus retro-bench for the loading."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
from retro_bench import Method, Param  # noqa: E402

BIN = os.path.abspath(os.environ.get("RETRO_BIN", os.path.join(ROOT, "build", "retro-bench")))


class Base(Method):
    """A base with one parameter."""
    sink = Param(4, min=0, max=100, description="sink tokens", source="test")


class Derived(Base):
    """Derived: the window and a mode.

    More text."""
    paper = "a paper"
    window = Param(64, min=1, description="window", source="test")
    ratio = Param(0.5, min=0.0, max=1.0, description="a fraction", source="test")
    mode = Param("fast", choices=["fast", "slow"], description="a mode", source="test")
    exact = Param(False, description="a flag", source="test")

    def build(self, ctx, keys, values, prefill_queries):
        pass

    def select(self, queries, step, kv):
        return list(range(kv.n))


class Declarations(unittest.TestCase):
    def test_schema_from_declarations_base_first(self):
        self.assertEqual([p["name"] for p in Derived.params], ["sink", "window", "ratio", "mode", "exact"])
        self.assertEqual([p["type"] for p in Derived.params], ["int", "int", "number", "string", "bool"])
        self.assertEqual(Derived.params[0], {"name": "sink", "type": "int", "default": 4, "description": "sink tokens",
                                             "source": "test", "min": 0, "max": 100})
        self.assertEqual(Derived.params[3]["choices"], ["fast", "slow"])
        self.assertEqual([p["name"] for p in Base.params], ["sink"])  # a subclass adds to its own list only
        self.assertEqual(Derived.description, "Derived: the window and a mode.")
        self.assertEqual(Derived.paper, "a paper")
        self.assertEqual(Method.params, [])

    def test_values_defaults_and_checks(self):
        m = Derived({"window": 32}, mode="slow")
        self.assertEqual(m.param_values(), {"sink": 4, "window": 32, "ratio": 0.5, "mode": "slow", "exact": False})
        self.assertEqual(repr(Derived(sink=2)), "Derived(sink=2, window=64, ratio=0.5, mode='fast', exact=False)")
        self.assertIsInstance(Derived(ratio=1).ratio, float)
        self.assertIsInstance(Derived(window=8.0).window, int)
        for kwargs, err, words in [({"windw": 3}, TypeError, "unknown parameter(s) windw"),
                                   ({"window": 0}, ValueError, "'window' must be in [1, None]"),
                                   ({"window": 2.5}, TypeError, "'window' must be an integer"),
                                   ({"sink": 101}, ValueError, "'sink' must be in [0, 100]"),
                                   ({"mode": "medium"}, ValueError, "must be one of fast, slow"),
                                   ({"exact": 1}, TypeError, "'exact' must be a bool"),
                                   ({"ratio": "x"}, TypeError, "'ratio' must be a number"),
                                   ({"window": True}, TypeError, "'window' must be a number")]:
            with self.assertRaises(err, msg=kwargs) as cm:
                Derived(**kwargs)
            self.assertIn(words, str(cm.exception))

    def test_bad_declarations(self):
        with self.assertRaises(TypeError):
            Param([1], description="d", source="s")  # no type from a list
        with self.assertRaises(ValueError):
            Param(1, type="float", description="d", source="s")
        with self.assertRaises(ValueError):
            Param(1, description="", source="s")


METHOD_FILE = '''
import numpy as np
from retro_bench import Method, Param

class Window(Method):
    """The last `window` tokens."""
    window = Param(16, min=1, max=1e6, description="most recent tokens kept", source="test")

    def build(self, ctx, keys, values, prefill_queries):
        pass

    def select(self, queries, step, kv):
        return np.arange(max(0, kv.n - self.window), kv.n)
'''


@unittest.skipUnless(os.path.exists(BIN), "no retro-bench built")
class InRetroBench(unittest.TestCase):
    """retro-bench's embedded interpreter imports retro_bench itself: a Method subclass loads with its
    declarations, runs, and its out-of-range value is refused before any work."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="retro-method-base-")
        self.file = os.path.join(self.tmp, "window.py")
        with open(self.file, "w") as f:
            f.write(METHOD_FILE)

    def cli(self, *args):
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # nothing on the path: found by retro-bench
        return subprocess.run([BIN, *args], capture_output=True, text=True, env=env, cwd=self.tmp)

    def test_listed_run_and_refused(self):
        p = self.cli("list-methods", "--py", self.file, "--json")
        if p.returncode != 0 and "Python methods" in p.stderr and "not" in p.stderr:
            self.skipTest("retro-bench built without Python methods")
        self.assertEqual(p.returncode, 0, p.stderr)
        (m,) = json.loads(p.stdout)
        self.assertEqual((m["description"], [(s["name"], s["type"], s["default"]) for s in m["params"]]),
                         ("The last `window` tokens.", [("window", "int", 16)]))
        trace = os.path.join(self.tmp, "t.h5")
        subprocess.run([BIN, "synth", trace, "--preset", "smollm2", "--layers", "1", "--prompt-len", "300",
                        "--steps", "3", "--prefill-queries", "8"], check=True, capture_output=True)
        name = "py:" + self.file + ":Window"
        cfg = os.path.join(self.tmp, "c.json")
        for window, rc in ((32, 0), (0, 2)):
            with open(cfg, "w") as f:
                json.dump({"name": f"w{window}", "traces": [trace], "threads": 1,
                           "methods": [{"name": name, "params": {"window": window}}]}, f)
            p = self.cli("run", cfg, "--results", os.path.join(self.tmp, "results"))
            self.assertEqual(p.returncode, rc, p.stderr[-2000:])
        self.assertIn("window", p.stderr)
        with open(os.path.join(self.tmp, "results", "w32", "runs.jsonl")) as f:
            (r,) = [json.loads(x) for x in f]
        # 32 of 301..303 visible tokens, every step
        self.assertAlmostEqual(r["metrics"]["exact_frac"]["mean"], sum(32 / n for n in (301, 302, 303)) / 3, places=9)


if __name__ == "__main__":
    unittest.main()
