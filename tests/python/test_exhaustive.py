"""Exhaustive parameters turn every approximate method into full attention: through the binding, on
every KV head and decode step of a tiny trace, the output equals rb.full_attention's to 1e-5 and the
LSE to 1e-5 (the exact top-k oracle with k = every token, wave retrieving every cluster without
estimation, IVF probing every list, MagicPIG with K = 0 so that every token collides with weight 1,
Quest and PQ with budgets over the whole context, StreamingLLM with a window over the whole context)."""

import unittest

import numpy as np

from binding_util import make_trace, rb, replay

ALL = 1e9  # a budget larger than any context: methods clamp it to the visible tokens
EXHAUSTIVE = [
    ("full", {}),
    ("oracle_topk", {"k": ALL}),
    ("oracle_topk", {"k": ALL, "gqa": "sum"}),
    ("wave", {"retrieval": ALL, "estimation": 0, "update_segment": 256}),  # the prompt indexed (see test_binding_vs_run)
    ("wave", {"retrieval": ALL, "estimation": 0, "tokens_per_cluster": 4, "update_segment": 4}),
    ("faiss_ivf", {"sink": 16, "window": 64, "nlist": 16, "nprobe": 16, "k": ALL}),
    ("faiss_flat", {"sink": 16, "window": 64, "k": ALL}),
    ("magicpig", {"K": 0}),
    ("quest", {"k": ALL}),
    ("pq", {"k": ALL}),
    ("streaming", {"window": 1000000000}),
]


class Exhaustive(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.trace = rb.Trace(make_trace())

    def test_exhaustive_parameters_give_full_attention(self):
        for method, params in EXHAUSTIVE:
            for kv_head in range(self.trace.info["num_kv_heads"]):
                with self.subTest(method=method, params=params, kv_head=kv_head):
                    for t, h, r, ref_out, ref_lse in replay(self.trace, 0, kv_head, method, params):
                        np.testing.assert_allclose(r["out"], ref_out, rtol=0, atol=1e-5,
                                                   err_msg=f"{method} {params} step {t}")
                        np.testing.assert_allclose(r["lse"], ref_lse, rtol=0, atol=1e-5)
                        self.assertEqual(r["est_clusters"], 0)
                        np.testing.assert_array_equal(r["exact_tokens"], r["n_visible"])

    def test_a_small_budget_is_not_full_attention(self):
        """The comparison above can fail: a sink-only selection is far from full attention."""
        worst = 0.0
        for t, h, r, ref_out, ref_lse in replay(self.trace, 0, 0, "streaming", {"sink": 4, "window": 1}):
            worst = max(worst, float(np.abs(r["out"] - ref_out).max()))
        self.assertGreater(worst, 1e-3)

    def test_full_attention_matches_numpy(self):
        h = self.trace.read_head(0, 1)
        q, k, v = h["queries"][:, 2, :], h["keys"], h["values"]
        out, lse = rb.full_attention(q, k, v)
        s = q.astype(np.float64) @ k.T.astype(np.float64) / np.sqrt(h["head_dim"])
        m = s.max(axis=1, keepdims=True)
        w = np.exp(s - m)
        np.testing.assert_allclose(lse, (m[:, 0] + np.log(w.sum(axis=1))), atol=1e-4)
        np.testing.assert_allclose(out, (w / w.sum(axis=1, keepdims=True)) @ v.astype(np.float64), atol=1e-5)
        self.assertEqual(out.dtype, np.float32)
        self.assertEqual(lse.dtype, np.float64)


if __name__ == "__main__":
    unittest.main(verbosity=2)
