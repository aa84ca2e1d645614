"""The binding computes what the evaluator scores: for each method, a `retro-bench run` on a tiny trace
writes per-step metrics of every query head (parts/<run>/L<l>_H<h>.json); the same method driven through
rb.HeadMethod on the same heads gives outputs whose metrics, recomputed here in NumPy against
rb.full_attention, equal the run's (out_err, out_cos, lse_err, exact_frac, est_frac, scan_ops to float
rounding; mass and recall@k, which depend on the reference's scores, to one token)."""

import glob
import json
import os
import unittest

import numpy as np

from binding_util import make_trace, rb, replay, run_config

RECALL_K = (10, 32)
WINDOW = {"sink": 16, "window": 64}
METHODS = [
    {"name": "full"},
    {"name": "oracle_topk", "params": {"k": 32}},
    {"name": "oracle_topk", "params": {"k": 0.05, "gqa": "max"}},
    {"name": "streaming"},
    # retrieval + estimation zones (estimated clusters); the prompt is indexed when it holds at least
    # update_segment tokens beyond sink + window (1024 by default, more than this tiny trace has)
    {"name": "wave", "params": {"update_segment": 256}},
    {"name": "wave", "params": {"tokens_per_cluster": 4, "update_segment": 4}},  # decode tokens clustered into the index
    {"name": "magicpig"},                               # importance weights
    {"name": "magicpig", "params": {"K": 6, "L": 20}},
    {"name": "quest", "params": {"k": 128}},
    {"name": "pq", "params": {"k": 64}},
    {"name": "faiss_ivf", "params": {**WINDOW, "k": 32, "nlist": 16, "nprobe": 4}},
    {"name": "ctkvr", "params": {**WINDOW, "C": 32, "rho_prime": 64}},
    {"name": "retrieval_attention", "params": {**WINDOW, "k": 32, "search_L": 48}},
]


def metrics(h, t, r, ref_out, ref_lse):
    """The evaluator's q_step metrics (docs/metrics.md) of each query head, from the binding's output."""
    d, P = h["head_dim"], h["prompt_len"]
    n = P + t + 1
    keys = h["keys"][:n].astype(np.float64)
    out = []
    for g in range(h["group"]):
        a, ref = r["out"][g].astype(np.float64), ref_out[g].astype(np.float64)
        s = keys @ h["queries"][g, t].astype(np.float64) / np.sqrt(d)
        w = np.exp(s - s.max())
        w /= w.sum()
        ids = r["exact_ids"][g]
        m = {
            "out_err": np.sqrt(((a - ref) ** 2).sum() / (ref ** 2).sum()),
            "out_cos": (a @ ref) / np.sqrt((a @ a) * (ref @ ref)),
            "lse_err": abs(r["lse"][g] - ref_lse[g]),
            "exact_frac": len(ids) / n,
            "est_frac": r["est_tokens"] / n,
            "mass": min(w[ids].sum(), 1.0),
        }
        for k in RECALL_K:
            kk = min(k, n)
            sk = np.sort(s)[::-1][kk - 1]
            m[f"recall@{k}"] = min(int((s[ids] >= sk - 1e-6 * abs(sk)).sum()), kk) / kk
        out.append(m)
    return out


class BindingVsRun(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.trace_path = make_trace()
        cls.results = run_config("vs-run", cls.trace_path, METHODS, RECALL_K)
        cls.trace = rb.Trace(cls.trace_path)
        with open(os.path.join(cls.results, "runs.jsonl")) as f:
            cls.runs = [json.loads(line) for line in f]

    def test_every_method_matches_the_run(self):
        self.assertEqual(len(self.runs), len(METHODS))
        for run in self.runs:
            parts = sorted(glob.glob(os.path.join(self.results, "parts", run["run_id"], "L*_H*.json")))
            self.assertEqual(len(parts), self.trace.info["num_kv_heads"], run["run_id"])
            for part_path in parts:
                with open(part_path) as f:
                    part = json.load(f)
                with self.subTest(method=run["method"], params=run["params"], kv_head=part["kv_head"]):
                    self.check_head(run, part)

    def check_head(self, run, part):
        qm, kvm = part["q_metrics"], part["kv_metrics"]
        steps = part["steps"]
        self.assertEqual(steps, list(range(self.trace.info["num_decode_steps"])))
        est_seen = 0
        for t, h, r, ref_out, ref_lse in replay(self.trace, part["layer"], part["kv_head"], run["method"],
                                                  run["params"]):
            i = steps.index(t)
            est_seen += r["est_clusters"]
            for g, m in enumerate(metrics(h, t, r, ref_out, ref_lse)):
                where = f"step {t} query head {g}"
                for name in ("out_err", "out_cos", "lse_err", "exact_frac", "est_frac"):
                    self.assertAlmostEqual(m[name], qm[name][g][i], delta=1e-9 + 1e-6 * abs(qm[name][g][i]),
                                           msg=f"{name} {where}")
                self.assertAlmostEqual(m["mass"], qm["mass"][g][i], delta=1e-5, msg=f"mass {where}")
                for k in RECALL_K:
                    self.assertAlmostEqual(m[f"recall@{k}"], qm[f"recall@{k}"][g][i], delta=1.01 / k,
                                           msg=f"recall@{k} {where}")
            self.assertAlmostEqual(r["scan_ops"] / r["n_visible"], kvm["scan_ops"][i],
                                   delta=1e-9 * max(1.0, kvm["scan_ops"][i]), msg=f"scan_ops step {t}")
            for name in ("fetch_bytes", "d2h_bytes"):
                self.assertAlmostEqual(r[name], kvm[name][i], delta=1e-9 * max(1.0, kvm[name][i]),
                                       msg=f"{name} step {t}")
        if run["method"] == "wave":  # the estimation zone was exercised (clusters entered the output)
            self.assertGreater(est_seen, 0)

    def test_weights_and_estimates_are_exercised(self):
        """The comparison above covers importance weights (magicpig) and estimated clusters (wave)."""
        h = self.trace.read_head(0, 0)
        P = h["prompt_len"]
        m = rb.HeadMethod("magicpig", {}, h["head_dim"], h["group"])
        m.build(h["keys"][:P], h["values"][:P])
        m.append(h["keys"][P], h["values"][P])
        r = m.attend(h["queries"][:, 0, :], 0)
        self.assertIsNotNone(r["exact_log_weight"])
        self.assertTrue(any(np.any(w != 0) for w in r["exact_log_weight"]))


if __name__ == "__main__":
    unittest.main(verbosity=2)
