"""The binding's surface: the registry equals `retro-bench list-methods --json`, traces read back with
their metadata, inputs are validated with clear exceptions before any C++ work (unknown method or
parameter, wrong shapes and dtypes, NaN, calls out of order), and NumPy conversions behave (float64 input
gives the float32 result, outputs own their buffers)."""

import json
import subprocess
import threading
import unittest

import numpy as np

from binding_util import BIN, make_trace, rb


class Registry(unittest.TestCase):
    def test_methods_equal_list_methods(self):
        cli = json.loads(subprocess.run([BIN, "list-methods", "--json"], check=True, capture_output=True,
                                        text=True).stdout)
        py = rb.methods()
        self.assertEqual([m["name"] for m in py], [m["name"] for m in cli])
        for pm, cm in zip(py, cli):
            self.assertEqual(pm["description"], cm["description"])
            self.assertEqual([(p["name"], p["type"], p["default"], p["source"]) for p in pm["params"]],
                             [(p["name"], p["type"], p["default"], p["source"]) for p in cm["params"]])
        wave = next(m for m in py if m["name"] == "wave")
        gqa = next(p for p in wave["params"] if p["name"] == "gqa")
        self.assertEqual(gqa["choices"], ["sum", "max", "mean"])
        iters = next(p for p in wave["params"] if p["name"] == "iters")
        self.assertEqual((iters["min"], iters["max"]), (1, 1000))

    def test_resolve_params(self):
        p = rb.resolve_params("oracle_topk", {"k": 64})
        self.assertEqual(p, {"k": 64, "gqa": "per_head"})
        self.assertEqual(rb.resolve_params("full"), {"offloaded": False})
        self.assertEqual(rb.resolve_params("magicpig", {"K": np.int64(6)})["K"], 6)

    def test_bad_method_and_params(self):
        cases = [
            (("nope", {}), "unknown method 'nope'"),
            (("wave", {"bogus": 1}), "unknown parameter 'bogus'"),
            (("wave", {"iters": 0}), "'iters'"),
            (("wave", {"gqa": "median"}), "expected one of sum|max|mean"),
            (("wave", {"segment": "x"}), "expected an integer"),
            (("wave", [1, 2]), "params must be an object"),
        ]
        for args, text in cases:
            with self.subTest(args=args):
                with self.assertRaises(ValueError) as cm:
                    rb.resolve_params(*args)
                self.assertIn(text, str(cm.exception))
                self.assertIsInstance(cm.exception, rb.ConfigError)
                with self.assertRaises(ValueError):
                    rb.HeadMethod(args[0], args[1], 64, 3)
        with self.assertRaises(TypeError):
            rb.resolve_params("wave", {"iters": object()})


class TraceAndHead(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.path = make_trace()
        cls.trace = rb.Trace(cls.path)
        cls.h = cls.trace.read_head(0, 1)

    def test_trace_info_and_head_shapes(self):
        i = self.trace.info
        self.assertEqual((i["num_q_heads"], i["num_kv_heads"], i["head_dim"], i["group"]), (9, 3, 64, 3))
        self.assertEqual((i["prompt_len"], i["num_decode_steps"], i["dtype"]), (600, 6, "float16"))
        self.assertEqual(i["layers"], [0])
        h = self.h
        self.assertEqual(h["keys"].shape, (606, 64))
        self.assertEqual(h["values"].shape, (606, 64))
        self.assertEqual(h["queries"].shape, (3, 6, 64))
        self.assertEqual(h["prefill_queries"].shape, (3, 48, 64))
        self.assertEqual((h["first_q_head"], h["group"]), (3, 3))
        for name in ("keys", "values", "queries", "prefill_queries"):
            a = h[name]
            self.assertEqual(a.dtype, np.float32)
            self.assertTrue(a.flags.c_contiguous)
            self.assertFalse(a.flags.owndata)  # the C++ buffer, handed over without a copy
        self.assertEqual(self.trace.read_head(0, 1, max_steps=2)["queries"].shape, (3, 2, 64))

    def test_bad_trace_input(self):
        with self.assertRaisesRegex(ValueError, "trace file not found"):
            rb.Trace("/nonexistent/x.h5")
        with self.assertRaisesRegex(ValueError, "layer 5 is not in the trace"):
            self.trace.read_head(5, 0)
        with self.assertRaisesRegex(ValueError, "kv_head 3 out of range"):
            self.trace.read_head(0, 3)

    def method(self, name="oracle_topk", params=None, **kw):
        h = self.h
        m = rb.HeadMethod(name, params or {}, h["head_dim"], h["group"], **kw)
        return m

    def test_bad_shapes_dtypes_and_order(self):
        h, P = self.h, self.h["prompt_len"]
        K, V = h["keys"][:P], h["values"][:P]
        m = self.method()
        with self.assertRaisesRegex(ValueError, r"attend: call build\(\) first"):
            m.attend(h["queries"][:, 0, :], 0)
        with self.assertRaisesRegex(ValueError, r"keys: expected shape \[n, head_dim=64\], got \(600, 32\)"):
            m.build(K[:, :32], V)
        with self.assertRaisesRegex(ValueError, r"values: expected shape \[n=600, head_dim=64\]"):
            m.build(K, V[:599])
        with self.assertRaisesRegex(TypeError, "keys: expected a float32 array, got dtype complex128"):
            m.build(K.astype(np.complex128), V)
        with self.assertRaisesRegex(TypeError, "keys: expected a float32 array, got dtype <U3"):
            m.build("abc", V)
        with self.assertRaisesRegex(TypeError, "values: expected a float32 array, got None"):
            m.build(K, None)
        bad = K.copy()
        bad[7, 3] = np.nan
        with self.assertRaisesRegex(ValueError, "keys: NaN or Inf at flat index 451"):
            m.build(bad, V)
        with self.assertRaisesRegex(ValueError, r"prefill_queries: expected shape \[group=3, n_prefill, head_dim=64\]"):
            m.build(K, V, h["prefill_queries"][:2])
        self.assertFalse(m.built)
        m.build(K, V)
        with self.assertRaisesRegex(ValueError, "already built"):
            m.build(K, V)
        with self.assertRaisesRegex(ValueError, "append the step's token first"):
            m.attend(h["queries"][:, 0, :], 0)
        m.append(h["keys"][P:P + 2], h["values"][P:P + 2])
        self.assertEqual((m.n_visible, m.next_step), (602, 1))
        with self.assertRaisesRegex(ValueError, "step 0 needs 601 visible tokens"):
            m.attend(h["queries"][:, 0, :], 0)
        with self.assertRaisesRegex(ValueError, r"queries: expected shape \[group=3, head_dim=64\], got \(2, 64\)"):
            m.attend(h["queries"][:2, 1, :], 1)
        with self.assertRaisesRegex(ValueError, "expected 1 rows"):
            m.append(h["keys"][P + 2:P + 3], h["values"][P + 2:P + 4])
        with self.assertRaisesRegex(ValueError, "storage 'f8'"):
            self.method(storage="f8")
        with self.assertRaisesRegex(ValueError, "seed must be in"):
            self.method(seed=-1)
        # a method that needs prefill queries says so
        ct = self.method("ctkvr", {"sink": 16, "window": 64, "C": 32})
        with self.assertRaisesRegex(ValueError, "ctkvr: parameter 'C' = 32 needs 32 prefill queries"):
            ct.build(K, V)

    def test_float64_input_gives_the_float32_result(self):
        h, P = self.h, self.h["prompt_len"]
        outs = []
        for dt in (np.float32, np.float64):
            m = self.method("wave")
            m.build(h["keys"][:P].astype(dt), h["values"][:P].astype(dt))
            m.append(h["keys"][P:P + 1].astype(dt), h["values"][P:P + 1].astype(dt))
            outs.append(m.attend(h["queries"][:, 0, :].astype(dt)))
        np.testing.assert_array_equal(outs[0]["out"], outs[1]["out"])
        np.testing.assert_array_equal(outs[0]["lse"], outs[1]["lse"])

    def test_attend_result_fields(self):
        h, P = self.h, self.h["prompt_len"]
        m = self.method("quest", {"k": 128}, layer=0, kv_head=1)
        self.assertEqual(m.params, rb.resolve_params("quest", {"k": 128}))
        m.build(h["keys"][:P], h["values"][:P])
        m.append(h["keys"][P], h["values"][P])
        r = m.attend(h["queries"][:, 0, :], 0)
        self.assertEqual(r["out"].shape, (3, 64))
        self.assertEqual(r["lse"].shape, (3,))
        self.assertEqual(r["n_visible"], P + 1)
        for g in range(3):
            ids = r["exact_ids"][g]
            self.assertEqual(ids.dtype, np.int32)
            self.assertEqual(len(ids), r["exact_tokens"][g])
            self.assertEqual(len(np.unique(ids)), len(ids))
            self.assertAlmostEqual(r["exact_frac"][g], len(ids) / (P + 1))
            self.assertLessEqual(len(ids), 128 + 16)  # 8 pages of 16 + the last page
        self.assertGreater(r["h2d_bytes"], 0)  # placement offload: chosen pages copied
        self.assertGreater(r["fetch_bytes"], 0)
        self.assertEqual(r["est_clusters"], 0)
        self.assertIsNone(r["exact_log_weight"])
        fp = m.footprint()
        self.assertGreater(fp["gpu_bytes"] + fp["cpu_bytes"], 0)

    def test_seed_default_is_the_runs_seed(self):
        h = self.h
        a = rb.HeadMethod("magicpig", {}, 64, 3, layer=0, kv_head=1)
        b = rb.HeadMethod("magicpig", {}, 64, 3, layer=0, kv_head=2)
        self.assertNotEqual(a.seed, b.seed)
        self.assertEqual(rb.HeadMethod("magicpig", {}, 64, 3, seed=7).seed, 7)

    def test_clone_shares_a_build_across_search_time_parameters(self):
        """HeadMethod.clone: a copy of a built index for another budget attends as a new build of that
        point does; the original is untouched; build parameters, appended tokens and methods that cannot
        share are refused or answered None."""
        h, P = self.h, self.h["prompt_len"]
        base = {"k": 16, "sink": 8, "window": 16, "nq": 10, "build_L": 40}

        def built(params, **kw):
            m = self.method("retrieval_attention", params, layer=0, kv_head=1, **kw)
            m.build(h["keys"][:P], h["values"][:P], h["prefill_queries"])
            return m

        def decode(m):
            outs = []
            for t in range(h["num_steps"]):
                m.append(h["keys"][P + t], h["values"][P + t])
                r = m.attend(h["queries"][:, t, :], t)
                outs.append((r["out"], [ids.tolist() for ids in r["exact_ids"]]))
            return outs

        def same(a, b):
            for (oa, ia), (ob, ib) in zip(a, b):
                np.testing.assert_array_equal(oa, ob)
                self.assertEqual(ia, ib)

        m = built(base)
        search = {p["name"] for p in next(x for x in rb.methods() if x["name"] == "retrieval_attention")["params"]
                  if p["search"]}
        self.assertEqual(search, {"k", "search_L"})
        other = dict(base, k=40, search_L=60)
        c = m.clone(other)
        self.assertTrue(c.built)
        self.assertEqual((c.params, c.seed, c.n_visible), (rb.resolve_params("retrieval_attention", other), m.seed, P))
        same(decode(c), decode(built(other)))
        same(decode(m), decode(built(base)))  # the copy's appends never reached the original
        with self.assertRaisesRegex(ValueError, "decode token.*appended"):
            m.clone(other)
        with self.assertRaisesRegex(ValueError, r"build parameter\(s\) differ \(M 35 -> 20\)"):
            built(base).clone(dict(base, M=20))
        with self.assertRaisesRegex(ValueError, "call build"):
            self.method("retrieval_attention", base).clone(base)
        q = self.method("quest", {"k": 64})
        q.build(h["keys"][:P], h["values"][:P])
        self.assertIsNone(q.clone({"k": 64}))  # quest shares no build (its page bounds cost nothing)

    def test_threads_share_nothing(self):
        """Two methods attended from two threads (the GIL released in C++) give the serial results."""
        h, P = self.h, self.h["prompt_len"]

        def run(res, i):
            m = self.method("wave", {"tokens_per_cluster": 4, "update_segment": 4})
            m.build(h["keys"][:P], h["values"][:P])
            outs = []
            for t in range(h["num_steps"]):
                m.append(h["keys"][P + t], h["values"][P + t])
                outs.append(m.attend(h["queries"][:, t, :], t)["out"])
            res[i] = np.stack(outs)

        serial = [None]
        run(serial, 0)
        res = [None, None]
        ths = [threading.Thread(target=run, args=(res, i)) for i in range(2)]
        for th in ths:
            th.start()
        for th in ths:
            th.join()
        for r in res:
            np.testing.assert_array_equal(r, serial[0])


class Threads(unittest.TestCase):
    def test_set_threads_bounds_the_builds_and_keeps_results(self):
        """set_threads(n) is what get_threads() then reports; a wave build (k-means over OpenMP segments)
        gives the same selections and outputs on 1 thread as on 2; n < 1 is refused by name."""
        before = rb.get_threads()
        rng = np.random.default_rng(3)
        n, d, g = 3000, 32, 2
        k = rng.standard_normal((n, d)).astype(np.float32)
        v = rng.standard_normal((n, d)).astype(np.float32)
        q = rng.standard_normal((g, d)).astype(np.float32)
        got = {}
        try:
            for t in (1, 2):
                rb.set_threads(t)
                self.assertEqual(rb.get_threads(), t)
                m = rb.HeadMethod("wave", {"segment": 1024, "retrieval": 4, "sink": 4, "window": 16}, d, g)
                m.build(k[:n - 1], v[:n - 1])
                m.append(k[n - 1], v[n - 1])
                got[t] = m.attend(q)
        finally:
            rb.set_threads(max(1, before))
        for a, b in zip(got[1]["exact_ids"], got[2]["exact_ids"]):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(got[1]["out"], got[2]["out"], rtol=0, atol=1e-6)
        with self.assertRaisesRegex(ValueError, "set_threads: n = 0: expected >= 1"):
            rb.set_threads(0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
