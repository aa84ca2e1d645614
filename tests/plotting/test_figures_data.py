#!/usr/bin/python3
"""The data behind each figure (which series, which points), from committed fixture results. No pixels."""
import csv
import json
import math
import os
import shutil
import unittest

import plot_test_util as U
from retro_bench.plotting import figures as F
from retro_bench.plotting import results as R

ALL = ("quickstart", "wave-zones", "wave-estimation", "wave-segments", "wave-updates", "wave-cache", "throughput",
       "baselines2", "trace-figures", "gpu-run", "gpu-run-kernels", "closed-loop-tiny", "closed-loop-smollm2")
GPU_FIGURES = {"gpu_step_time", "gpu_phases", "gpu_speedup"}
CLOSED_FIGURES = {"closed_loop_kl", "closed_loop_top1", "closed_loop_accuracy"}


def load(name, extra=()):
    return R.load(U.fixture(name), extra)


def data(fig, res):
    return F.FIGURES[fig].data(res)


class RegistryTest(unittest.TestCase):
    def test_every_figure_has_data_and_draw(self):
        for name, f in F.FIGURES.items():
            self.assertEqual(f.name, name)
            self.assertTrue(callable(f.data), name)
            self.assertTrue(callable(f.draw), f"{name} has no draw function")
            self.assertTrue(f.needs and f.title, name)

    def test_registry_order_is_the_one_list(self):
        from retro_bench.plotting.figures import registry
        self.assertEqual(tuple(F.FIGURES), registry.ORDER)
        # a figure registered without being listed (or listed without being registered) fails the check
        registry.figure("not_listed", "t", "n")(lambda res: None)
        try:
            with self.assertRaisesRegex(RuntimeError, "not in ORDER.*not_listed"):
                registry.finish()
        finally:
            del F.FIGURES["not_listed"]
        registry.finish()

    def test_applicability_per_fixture(self):
        expected = {
            "quickstart": {"accuracy_budget", "estimation", "head_heatmap"},
            "wave-zones": {"zone_sweeps", "estimation", "head_heatmap"},
            "wave-estimation": {"accuracy_budget", "estimation", "head_heatmap"},
            "wave-segments": {"segments", "head_heatmap"},
            "wave-updates": {"updates", "head_heatmap"},
            "wave-cache": {"cache", "head_heatmap"},
            "throughput": {"throughput", "accuracy_budget", "head_heatmap"},
            "baselines2": {"recall_scanned", "build_time", "accuracy_budget", "head_heatmap"},
            "trace-figures": {"ood_recall"},
            "gpu-run": GPU_FIGURES,
            "gpu-run-kernels": GPU_FIGURES,
            "closed-loop-tiny": CLOSED_FIGURES,
            "closed-loop-smollm2": CLOSED_FIGURES,
        }
        for name in ALL:
            res = load(name)
            got = {n for n, f in F.FIGURES.items() if f.applies(res)}
            self.assertEqual(got, expected[name], name)

    def test_series_are_json(self):
        for name in ALL:
            res = load(name)
            for n, f in F.FIGURES.items():
                s = f.data(res)
                if s is not None:
                    json.dumps(s)  # the plot command writes it next to the figure


class ParetoTest(unittest.TestCase):
    def test_front_lower_cost_and_ties(self):
        pts = [{"x": 0.1, "y": 0.5}, {"x": 0.2, "y": 0.4}, {"x": 0.2, "y": 0.7}, {"x": 0.3, "y": 0.7},
               {"x": 0.4, "y": 0.9}, {"x": 0.05, "y": 0.2}]
        front, dom = F.pareto_front(pts, higher_better=True)
        self.assertEqual([(p["x"], p["y"]) for p in front], [(0.05, 0.2), (0.1, 0.5), (0.2, 0.7), (0.4, 0.9)])
        self.assertEqual(sorted((p["x"], p["y"]) for p in dom), [(0.2, 0.4), (0.3, 0.7)])

    def test_front_lower_better(self):
        pts = [{"x": 1, "y": 0.3}, {"x": 2, "y": 0.35}, {"x": 3, "y": 0.1}]
        front, dom = F.pareto_front(pts, higher_better=False)
        self.assertEqual([p["x"] for p in front], [1, 3])
        self.assertEqual([p["x"] for p in dom], [2])


class AccuracyBudgetTest(unittest.TestCase):
    def setUp(self):
        self.res = load("quickstart")
        self.s = data("accuracy_budget", self.res)
        self.runs = U.runs_by_id("quickstart")

    def panel(self, metric):
        return next(p for p in self.s["panels"] if p["metric"] == metric)

    def series(self, metric, method):
        return next(s for s in self.panel(metric)["series"] if s["method"] == method)

    def test_panels_and_methods(self):
        self.assertEqual(self.s["x_metric"], "exact_frac")
        self.assertEqual([p["metric"] for p in self.s["panels"]], ["recall@100", "mass", "out_err"])
        for p in self.s["panels"]:
            self.assertEqual([s["method"] for s in p["series"]], ["oracle_topk", "streaming", "wave"])

    def test_points_are_the_runs_means(self):
        for p in self.s["panels"]:
            for s in p["series"]:
                for q in s["points"] + s["dominated"]:
                    r = self.runs[q["run_id"]]
                    self.assertAlmostEqual(q["x"], r["metrics"]["exact_frac"]["mean"])
                    self.assertAlmostEqual(q["y"], r["metrics"][p["metric"]]["mean"])
                # every run of the method is either on the front or dominated
                n = sum(1 for r in self.runs.values() if r["method"] == s["method"])
                self.assertEqual(len(s["points"]) + len(s["dominated"]), n)

    def test_pareto_fronts(self):
        # recall@100 saturates at k=256: k=1024 and k=4096 add cost without recall
        rec = self.series("recall@100", "oracle_topk")
        self.assertEqual([q["label"] for q in rec["points"]], ["k=64", "k=256"])
        self.assertEqual(sorted(q["label"] for q in rec["dominated"]), ["k=1024", "k=4096"])
        # out_err keeps falling with k: every oracle point is on the front, by increasing budget
        err = self.series("out_err", "oracle_topk")
        self.assertEqual([q["label"] for q in err["points"]], ["k=64", "k=256", "k=1024", "k=4096"])
        # wave with and without estimation attend the same exact tokens; estimation lowers out_err
        w = self.series("out_err", "wave")
        self.assertEqual([q["label"] for q in w["points"]], ["estimation=0.232"])
        self.assertEqual([q["label"] for q in w["dominated"]], ["estimation=0"])
        for p in self.s["panels"]:
            hb = p["metric"] != "out_err"
            for s in p["series"]:
                xs = [q["x"] for q in s["points"]]
                ys = [q["y"] for q in s["points"]]
                self.assertEqual(xs, sorted(xs))
                for a, b in zip(ys, ys[1:]):
                    self.assertTrue(b > a if hb else b < a)

    def test_full_reference(self):
        ref = self.s["reference"]
        self.assertTrue(ref["run_id"].startswith("full-"))
        self.assertEqual(ref["x"], 1.0)
        self.assertEqual(ref["y"]["recall@100"], 1.0)

    def test_needs_two_methods(self):
        for name in ("wave-zones", "wave-segments", "wave-updates", "wave-cache"):
            self.assertIsNone(data("accuracy_budget", load(name)), name)
        s = data("accuracy_budget", load("wave-estimation"))
        self.assertEqual([x["method"] for x in s["panels"][0]["series"]], ["wave", "oracle_topk", "streaming"])
        self.assertIsNone(s["reference"])


class ZoneSweepsTest(unittest.TestCase):
    def setUp(self):
        self.s = data("zone_sweeps", load("wave-zones"))
        self.runs = U.runs_by_id("wave-zones")

    def test_axes_and_points(self):
        self.assertEqual([p["axis"] for p in self.s["panels"]], ["retrieval", "estimation", "steady"])
        xs = {p["axis"]: [q["x"] for q in p["points"]] for p in self.s["panels"]}
        self.assertEqual(xs["retrieval"], [0.0025, 0.005, 0.01, 0.018, 0.036, 0.072])
        self.assertEqual(xs["estimation"], [0, 0.05, 0.1, 0.232, 0.4, 0.6])
        self.assertEqual(xs["steady"], ["4+0", "0+64", "4+64", "16+256", "64+1024"])
        self.assertEqual(self.s["metrics"], ["recall@100", "mass", "out_err"])

    def test_centre_is_the_default_point_in_every_panel(self):
        self.assertEqual(self.s["centre"]["retrieval"], "0.018")
        self.assertEqual(self.s["centre"]["estimation"], "0.232")
        self.assertEqual((self.s["centre"]["sink"], self.s["centre"]["window"]), ("4", "64"))
        ids = set()
        for p in self.s["panels"]:
            c = [q for q in p["points"] if q["is_centre"]]
            self.assertEqual(len(c), 1, p["axis"])
            ids.add(c[0]["run_id"])
        self.assertEqual(len(ids), 1)  # the same run (it ran once)

    def test_values(self):
        for p in self.s["panels"]:
            for q in p["points"]:
                r = self.runs[q["run_id"]]
                for m in self.s["metrics"]:
                    self.assertAlmostEqual(q["y"][m], r["metrics"][m]["mean"])
                for k, v in q["params"].items():
                    self.assertEqual(r["params"][k], v)
                others = {k: v for k, v in r["params"].items() if k not in q["params"]}
                self.assertEqual({k: str(v) for k, v in others.items() if k in ("retrieval", "estimation")},
                                 {k: self.s["centre"][k] for k in others if k in ("retrieval", "estimation")})

    def test_modeled_throughput_row(self):
        # model_us (modeled attention time per layer step) is carried per point; the retrieval budget
        # is what costs time: more clusters retrieved, more bytes moved, slower steps
        self.assertEqual(self.s["system_metric"], "model_us")
        for p in self.s["panels"]:
            for q in p["points"]:
                self.assertAlmostEqual(q["y"]["model_us"], self.runs[q["run_id"]]["metrics"]["model_us"]["mean"])
        ret = next(p for p in self.s["panels"] if p["axis"] == "retrieval")
        t = [q["y"]["model_us"] for q in ret["points"]]
        self.assertEqual(t, sorted(t))
        self.assertGreater(t[-1], 5 * t[0])

    def test_not_for_grids_or_other_sweeps(self):
        # wave-cache repeats wave's default parameters once per cache setting: not a zone sweep
        for name in ("quickstart", "wave-estimation", "wave-segments", "wave-updates", "wave-cache"):
            self.assertIsNone(data("zone_sweeps", load(name)), name)


class EstimationTest(unittest.TestCase):
    def test_wave_estimation_config(self):
        s = data("estimation", load("wave-estimation"))
        runs = U.runs_by_id("wave-estimation")
        self.assertEqual(s["retrieval"], [0.009, 0.018, 0.036])
        self.assertEqual([v["estimation"] for v in s["variants"]], [0, 0.232])
        self.assertEqual([v["label"] for v in s["variants"]], ["w/o estimation", "w/ estimation (23.2%)"])
        for v in s["variants"]:
            for i, rid in enumerate(v["run_ids"]):
                r = runs[rid]
                self.assertEqual(r["params"]["retrieval"], s["retrieval"][i])
                self.assertEqual(r["params"]["estimation"], v["estimation"])
                for m in s["metrics"]:
                    self.assertAlmostEqual(v["y"][m][i], r["metrics"][m]["mean"])
        # references at wave's exact-token count (about 660 tokens of a 32K context)
        self.assertEqual([r["method"] for r in s["references"]], ["oracle_topk", "streaming"])
        self.assertEqual(s["references"][1]["label"], "sink=4 window=656")
        for r in s["references"]:
            self.assertLess(abs(math.log(r["exact_frac"] / s["target_exact_frac"])), math.log(1.5))

    def test_quickstart_single_budget(self):
        s = data("estimation", load("quickstart"))
        self.assertEqual(s["retrieval"], [0.018])
        self.assertEqual([v["estimation"] for v in s["variants"]], [0, 0.232])
        # streaming's runs attend 0.4%, 3.9%, 6.3% vs. wave's 2.2%: none within a factor 1.5
        self.assertEqual([(r["method"], r["label"]) for r in s["references"]], [("oracle_topk", "k=256")])

    def test_needs_paired_runs(self):
        self.assertIsNone(data("estimation", load("wave-segments")))
        self.assertIsNone(data("estimation", load("wave-updates")))


class SegmentsTest(unittest.TestCase):
    def test_points(self):
        s = data("segments", load("wave-segments"))
        runs = U.runs_by_id("wave-segments")
        self.assertEqual(s["recall_metric"], "recall@100")
        self.assertEqual(s["prompt_len"], 32768)
        self.assertEqual([v["final_global_assign"] for v in s["variants"]], [True, False])
        # results made before `final_assign` existed map onto it (true = global, false = none)
        self.assertEqual([v["final_assign"] for v in s["variants"]], ["global", "none"])
        for v in s["variants"]:
            self.assertEqual([p["segment_label"] for p in v["points"]], ["global", "16K", "8K", "4K", "2K", "1K"])
            self.assertEqual([p["segment"] for p in v["points"]], [0, 16384, 8192, 4096, 2048, 1024])
            for p in v["points"]:
                r = runs[p["run_id"]]
                self.assertEqual(r["params"]["segment"], p["segment"])
                self.assertEqual(r["params"]["final_global_assign"], v["final_global_assign"])
                self.assertAlmostEqual(p["build_ms"], r["metrics"]["build_ms"]["mean"])
                self.assertAlmostEqual(p["recall"], r["metrics"]["recall@100"]["mean"])

    def test_not_without_segment_sweep(self):
        for name in ("quickstart", "wave-zones", "wave-estimation", "wave-updates"):
            self.assertIsNone(data("segments", load(name)), name)


class UpdatesTest(U.TempDirMixin, unittest.TestCase):
    def test_per_step_from_parts(self):
        res = load("wave-updates")
        s = data("updates", res)
        self.assertEqual(s["metrics"], ["recall@100", "out_err", "gpu_bytes"])
        self.assertEqual([v["update_segment"] for v in s["variants"]], [1024, 512, 0, None])
        self.assertEqual(s["variants"][-1]["method"], "full")
        steps = list(range(127, 3200, 128))
        for v in s["variants"]:
            self.assertEqual(v["steps"], steps)
        # recompute one step by hand from the part files: mean over (KV head, query head)
        v = s["variants"][0]
        d = os.path.join(U.fixture("wave-updates"), "parts", v["run_id"])
        vals = []
        for f in sorted(os.listdir(d)):
            with open(os.path.join(d, f)) as fh:
                part = json.load(fh)
            i = part["steps"].index(1023)
            vals += [row[i] for row in part["q_metrics"]["out_err"]]
        self.assertAlmostEqual(v["y"]["out_err"][steps.index(1023)], sum(vals) / len(vals))
        # full attention keeps every token on the GPU: 128 tokens (K+V, fp16, d=128) per evaluated step
        g = s["variants"][-1]["y"]["gpu_bytes"]
        self.assertAlmostEqual(g[1] - g[0], 128 * 2 * 2 * 128, delta=0.01 * 65536)  # parts rounded to 4 digits

    def test_needs_parts(self):
        d = U.copy_fixture("wave-updates", self.tmp)
        shutil.rmtree(os.path.join(d, "parts"))
        self.assertIsNone(data("updates", R.load(d)))


class HeadHeatmapTest(unittest.TestCase):
    def per_head(self, name):
        with open(os.path.join(U.fixture(name), "per_head.csv"), newline="") as f:
            return list(csv.DictReader(f))

    def test_one_run_per_method_near_median_budget(self):
        res = load("quickstart")
        s = data("head_heatmap", res)
        self.assertEqual(s["metric"], "out_err")
        self.assertEqual([p["method"] for p in s["panels"]], ["oracle_topk", "streaming", "wave"])
        self.assertEqual([p["label"] for p in s["panels"]], ["k=256", "sink=128 window=512", "estimation=0.232"])
        rows = self.per_head("quickstart")
        for p in s["panels"]:
            self.assertEqual(p["layers"], [0, 1])
            self.assertEqual(p["q_heads"], list(range(8)))
            for li, l in enumerate(p["layers"]):
                for hi, h in enumerate(p["q_heads"]):
                    row = next(r for r in rows if r["run_id"] == p["run_id"] and int(r["layer"]) == l
                               and int(r["q_head"]) == h)
                    self.assertAlmostEqual(p["values"][li][hi], float(row["out_err"]))

    def test_one_method_sweep_spreads_over_its_budgets(self):
        # wave-zones: wave alone, 15 runs -> 4 of them, from the smallest to the largest exact-token share
        s = data("head_heatmap", load("wave-zones"))
        runs = U.runs_by_id("wave-zones")
        self.assertEqual({p["method"] for p in s["panels"]}, {"wave"})
        self.assertEqual(len(s["panels"]), 4)
        ef = [runs[p["run_id"]]["metrics"]["exact_frac"]["mean"] for p in s["panels"]]
        self.assertEqual(ef, sorted(ef))
        allf = [r["metrics"]["exact_frac"]["mean"] for r in runs.values()]
        self.assertEqual((ef[0], ef[-1]), (min(allf), max(allf)))
        # wave-updates: 3 wave runs (and full, never shown) -> all three
        s = data("head_heatmap", load("wave-updates"))
        self.assertEqual(len(s["panels"]), 3)

    def test_search_sweep_shows_best_run_at_the_budget(self):
        # baselines2: IVF / HNSW / RetrievalAttention sweep search effort at one exact-token budget; the
        # heatmap shows each method's lowest-out_err run there, not the first (lowest-effort) one
        res = load("baselines2")
        s = data("head_heatmap", res)
        runs = U.runs_by_id("baselines2")
        for p in s["panels"]:
            mine = runs[p["run_id"]]
            same = [r for r in runs.values() if r["method"] == p["method"] and
                    abs(r["metrics"]["exact_frac"]["mean"] / mine["metrics"]["exact_frac"]["mean"] - 1) < 1e-9]
            self.assertEqual(mine["metrics"]["out_err"]["mean"], min(r["metrics"]["out_err"]["mean"] for r in same),
                             p["method"])
        self.assertGreater(len([r for r in runs.values() if r["method"] == "faiss_ivf"]), 1)  # a real sweep

    def test_chosen_run(self):
        res = load("quickstart")
        res.options = {"heatmap_runs": ["streaming-9a3dac06a82c"]}
        s = data("head_heatmap", res)
        self.assertEqual([p["run_id"] for p in s["panels"]], ["streaming-9a3dac06a82c"])
        self.assertEqual(s["panels"][0]["label"], "sink=4 window=64")

    def test_full_only_has_none(self):
        res = load("quickstart")
        res.per_head = [r for r in res.per_head if r["method"] == "full"]
        self.assertIsNone(data("head_heatmap", res))


class SparsityHeatmapTest(unittest.TestCase):
    def test_from_inspect_json(self):
        self.assertIsNone(data("sparsity_heatmap", load("quickstart")))
        s = data("sparsity_heatmap", load("quickstart", [U.INSPECT]))
        with open(U.INSPECT) as f:
            insp = json.load(f)
        self.assertEqual(s["layers"], [0, 1])
        self.assertEqual(s["q_heads"], list(range(8)))
        self.assertEqual(s["n_tokens"], insp["info"]["n_tokens"])
        for h in insp["heads"]:
            self.assertEqual(s["values"][s["layers"].index(h["layer"])][s["q_heads"].index(h["q_head"])], h["n90"])

    def test_picked_up_from_results_dir(self):
        import tempfile
        with tempfile.TemporaryDirectory() as t:
            d = U.copy_fixture("wave-segments", t)
            shutil.copy(U.INSPECT, os.path.join(d, "inspect.json"))
            self.assertIsNotNone(data("sparsity_heatmap", R.load(d)))

    def test_most_layers_wins(self):
        # two inspect outputs (a one-layer trace sorts first by name): the heatmap shows the one with more heads
        import tempfile
        with open(U.INSPECT) as f:
            insp = json.load(f)
        one = dict(insp, heads=[h for h in insp["heads"] if h["layer"] == 1], trace="one-layer.h5")
        with tempfile.TemporaryDirectory() as t:
            d = U.copy_fixture("wave-segments", t)
            with open(os.path.join(d, "inspect-a-one-layer.json"), "w") as f:
                json.dump(one, f)
            shutil.copy(U.INSPECT, os.path.join(d, "inspect-b.json"))
            s = data("sparsity_heatmap", R.load(d))
        self.assertEqual(s["layers"], [0, 1])
        self.assertEqual(s["trace"], insp["trace"])


class OodRecallTest(U.TempDirMixin, unittest.TestCase):
    def test_fixture(self):
        s = data("ood_recall", load("ood"))
        self.assertEqual(s["k"], 100)
        self.assertEqual([p["queries"] for p in s["panels"]], ["decode", "keys"])
        dec, keys = s["panels"]
        self.assertEqual([x["index"] for x in dec["series"]], ["ivf", "hnsw"])
        self.assertEqual(dec["series"][0]["points"], [[0.01, 0.31], [0.05, 0.55], [0.2, 0.83], [0.4, 0.95]])
        # sorted by scanned fraction; parallel-array form accepted
        self.assertEqual(keys["series"][0]["points"], [[0.01, 0.88], [0.05, 0.97]])
        self.assertEqual(keys["series"][1]["points"], [[0.005, 0.93], [0.02, 0.99]])

    def test_flat_records(self):
        d = os.path.join(self.tmp, "r")
        os.makedirs(d)
        with open(os.path.join(d, "ood_recall.json"), "w") as f:
            json.dump({"kind": "ood_recall", "recall_k": [100], "records": [
                {"method": "faiss_ivf", "query": "k_to_k", "scanned_frac": 0.02, "recall@100": 0.9},
                {"method": "faiss_ivf", "query": "q_to_k", "scanned_frac": 0.02, "recall@100": 0.3},
                {"method": "faiss_ivf", "query": "q_to_k", "scanned_frac": 0.01, "recall@100": 0.2}]}, f)
        s = data("ood_recall", R.load(d))
        self.assertEqual(s["k"], 100)
        self.assertEqual(s["panels"][0]["series"][0]["points"], [[0.01, 0.2], [0.02, 0.3]])
        self.assertEqual(s["panels"][1]["series"][0]["points"], [[0.02, 0.9]])

    def test_retro_bench_ood_recall_json(self):
        # RESULTS/trace-figures/ood-recall-{ivf,hnsw}.json as `retro-bench ood-recall --json` writes them
        s = data("ood_recall", load("trace-figures"))
        self.assertEqual(s["k"], 100)
        self.assertEqual([p["queries"] for p in s["panels"]], ["decode", "keys"])
        for p in s["panels"]:
            self.assertEqual([x["index"] for x in p["series"]], ["hnsw", "ivf"])
        with open(os.path.join(U.fixture("trace-figures"), "ood-recall-ivf.json")) as f:
            ivf = json.load(f)
        dec = s["panels"][0]["series"][1]["points"]
        want = sorted([m["scanned_decode"], m["recall_decode"]] for m in ivf["mean"])
        self.assertEqual(dec, want)
        keys = s["panels"][1]["series"][1]["points"]
        self.assertEqual(keys, sorted([m["scanned_keys"], m["recall_keys"]] for m in ivf["mean"]))
        # the out-of-distribution gap: at equal search effort keys find their neighbours, queries do not
        by_setting = {m["setting"]: m for m in ivf["mean"]}
        self.assertGreater(by_setting["nprobe=8"]["recall_keys"], by_setting["nprobe=8"]["recall_decode"])

    def test_absent(self):
        for name in ALL:
            if name != "trace-figures":
                self.assertIsNone(data("ood_recall", load(name)))


class CacheTest(unittest.TestCase):
    def test_series_per_policy(self):
        res = load("wave-cache")
        s = data("cache", res)
        runs = U.runs_by_id("wave-cache")
        self.assertEqual(s["methods"], ["wave"])
        self.assertEqual([x["policy"] for x in s["series"]], ["lru", "lfu", "belady"])  # fixture drops fifo/clock
        for ser in s["series"]:
            self.assertEqual([p["cache"] for p in ser["points"]], [0, 0.01, 0.02, 0.05, 0.1, 0.2])
            for p in ser["points"]:
                r = runs[p["run_id"]]
                sy = next(x for x in res.runs if x["run_id"] == p["run_id"])["system"]
                self.assertEqual((sy["cache"], sy["policy"]), (p["cache"], ser["policy"]))
                self.assertAlmostEqual(p["hit"], r["metrics"]["cache_hit"]["mean"])
                self.assertAlmostEqual(p["h2d"], r["metrics"]["h2d_bytes"]["mean"])
            # without a cache every fetched byte crosses PCIe; the fetch itself does not depend on the cache
            self.assertEqual(ser["points"][0]["h2d"], ser["points"][0]["fetch"])
            self.assertEqual(len({p["fetch"] for p in ser["points"]}), 1)
        full = next(r for r in runs.values() if r["method"] == "full")
        self.assertEqual(s["full_h2d"], full["metrics"]["h2d_bytes"]["mean"])

    def test_system_point_from_manifest_and_label(self):
        res = load("wave-cache")
        for r in res.runs:
            self.assertIn("cache", r["system"])
            self.assertEqual(R.Results._system_point(r, []), r["system"])  # the label says the same
        self.assertEqual(res.varying_system("wave"), ["cache", "policy"])


class ThroughputTest(unittest.TestCase):
    def test_series(self):
        s = data("throughput", load("throughput"))
        runs = U.runs_by_id("throughput")
        self.assertEqual(s["contexts"], [30000, 60000, 120000])
        self.assertEqual(s["model"], "llama3-8b")
        self.assertEqual([(x["method"], x["variant"]) for x in s["series"]],
                         [("full", 0), ("full", 1), ("streaming", 0), ("oracle_topk", 0), ("wave", 0)])
        for x in s["series"]:
            t = runs[x["run_id"]]["throughput"]
            for N in s["contexts"]:
                pts = x["by_context"][str(N)]
                want = sorted([row["batch"], row["tokens_per_s"]] for row in t["rows"]
                              if row["context"] == N and not row["oom"])
                self.assertEqual(pts, want)
                mb = t["max_batch"][str(N)]
                if mb is not None:  # OOM batches are left out
                    self.assertTrue(all(b <= mb for b, _ in pts))
        # full attention on the GPU runs out of memory first; offloaded full attention never does
        full_gpu, full_off = s["series"][0], s["series"][1]
        self.assertLess(len(full_gpu["by_context"]["120000"]), len(full_off["by_context"]["120000"]))
        self.assertIsNone(full_off["max_batch"]["30000"])


class RecallScannedTest(unittest.TestCase):
    def test_search_effort_sweeps(self):
        s = data("recall_scanned", load("baselines2"))
        runs = U.runs_by_id("baselines2")
        self.assertEqual(s["recall_metric"], "recall@100")
        self.assertEqual([(x["method"], x["param"]) for x in s["series"]],
                         [("retrieval_attention", "search_L"), ("faiss_ivf", "nprobe"), ("faiss_hnsw", "ef_search")])
        self.assertEqual([p["setting"] for p in s["series"][0]["points"]], [100, 150, 200, 300, 500, 1000])
        self.assertEqual([p["setting"] for p in s["series"][1]["points"]], [4, 8, 16, 32, 64, 150])
        for x in s["series"]:
            for p in x["points"]:
                r = runs[p["run_id"]]
                self.assertEqual(r["params"][x["param"]], p["setting"])
                # scan_ops counts the GQA group's inner products (4 query heads per KV head here)
                self.assertEqual(p["group"], 4)
                self.assertAlmostEqual(p["x"], r["metrics"]["scan_ops"]["mean"] / 4)
                self.assertAlmostEqual(p["y"], r["metrics"]["recall@100"]["mean"])
            # more search effort scans more keys
            xs = [p["x"] for p in x["points"]]
            self.assertEqual(xs, sorted(xs))

    def test_absent_without_search_sweeps(self):
        for name in ALL:
            if name != "baselines2":
                self.assertIsNone(data("recall_scanned", load(name)), name)


class BuildTimeTest(unittest.TestCase):
    def test_methods_with_an_index(self):
        s = data("build_time", load("baselines2"))
        runs = U.runs_by_id("baselines2")
        self.assertEqual([m["method"] for m in s["methods"]],
                         ["retrieval_attention", "faiss_ivf", "faiss_hnsw", "ctkvr", "magicpig"])
        for m in s["methods"]:
            vals = sorted(r["metrics"]["build_ms"]["mean"] for r in runs.values() if r["method"] == m["method"])
            self.assertEqual(m["runs"], len(vals))
            self.assertEqual((m["min_ms"], m["max_ms"]), (vals[0], vals[-1]))
            self.assertEqual(m["median_ms"], vals[len(vals) // 2])
        # oracle_topk and streaming build nothing; wave alone is one method
        for name in ("quickstart", "wave-zones", "wave-updates"):
            self.assertIsNone(data("build_time", load(name)), name)


class ScaleTest(U.TempDirMixin, unittest.TestCase):
    """Cost growth vs. context (configs/paper/scale-1m.json): one series per method point over >= 3 prompt
    lengths, with the log-log slope of each phase."""

    def write_runs(self, lens):
        with open(os.path.join(self.tmp, "runs.jsonl"), "w") as f:
            for i, n in enumerate(lens):
                for method, params, build, select in (("wave", {"final_assign": "local"}, 1e-4 * n, 1e-9 * n * n),
                                                     ("full", {}, 0.0, 0.0)):
                    f.write(json.dumps({
                        "run_id": f"{method}-{i}", "method": method, "params": params, "prompt_len": n,
                        "label": method + json.dumps(params), "trace": f"t{n}.h5",
                        "metrics": {"build_ms": {"mean": build, "p50": build},
                                    "select_us": {"mean": select, "p50": select},
                                    "attend_us": {"mean": 2e-3 * n, "p50": 2e-3 * n}}}) + "\n")

    def test_slopes_per_phase(self):
        self.write_runs([32768, 131072, 524288, 1048576])
        s = data("scale", R.load(self.tmp))
        self.assertEqual(s["phases"], ["build_ms", "select_us", "attend_us"])
        by = {v["method"]: v for v in s["series"]}
        self.assertEqual([p["prompt_len"] for p in by["wave"]["points"]], [32768, 131072, 524288, 1048576])
        self.assertAlmostEqual(by["wave"]["slopes"]["build_ms"], 1.0, places=6)   # linear build
        self.assertAlmostEqual(by["wave"]["slopes"]["select_us"], 2.0, places=6)  # quadratic select
        self.assertAlmostEqual(by["full"]["slopes"]["attend_us"], 1.0, places=6)
        self.assertIsNone(by["full"]["slopes"]["build_ms"])  # no index: nothing to fit

    def test_needs_three_lengths(self):
        self.write_runs([32768, 131072])
        self.assertIsNone(data("scale", R.load(self.tmp)))
        for name in ALL:
            self.assertIsNone(data("scale", load(name)), name)


class ClosedLoopDirectoryTest(U.TempDirMixin, unittest.TestCase):
    """A closed-loop results directory (fidelity / task records, no open-loop metrics) is drawn only by
    the figures that read its records: the wave estimation figure found wave runs with and without
    estimation there and failed on their missing metrics (StatisticsError) before."""

    def test_open_loop_figures_skip_closed_loop_records(self):
        with open(os.path.join(self.tmp, "runs.jsonl"), "w") as f:
            for i, (est, retrieval) in enumerate((e, r) for e in (0, 0.232) for r in (1, 5, 11)):
                params = {"estimation": est, "retrieval": retrieval, "sink": 4, "window": 16}
                f.write(json.dumps({"run_id": f"wave-{i}", "method": "wave", "params": params,
                                    "label": "wave" + json.dumps(params), "exact_frac": 0.02 * retrieval,
                                    "est_frac": est, "fidelity": {"kl_mean": 0.1, "top1": 0.9, "ppl": 60},
                                    "task": {"accuracy": 0.5, "agreement_mean": 4}}) + "\n")
        res = R.load(self.tmp)
        for name, f in F.FIGURES.items():  # the closed-loop figures read the records (no part files here)
            self.assertEqual(f.applies(res), name in CLOSED_FIGURES, name)
        s = data("closed_loop_accuracy", res)
        self.assertEqual(len(s["panels"]), 1)
        self.assertIsNone(s["panels"][0]["context"])  # no manifest: the runs' cases have no known length
        # with and without the estimation zone: one line each (ClosedLoopVariantsTest)
        self.assertEqual([(ser["suffix"], [(q["x"], q["y"]) for q in ser["points"]]) for ser in s["panels"][0]["series"]],
                         [("estimation=0", [(0.02, 0.5), (0.1, 0.5), (0.22, 0.5)]),
                          ("estimation=0.232", [(0.02, 0.5), (0.1, 0.5), (0.22, 0.5)])])

    def test_report_shows_the_closed_loop_tables(self):
        from retro_bench.plotting import report
        with open(os.path.join(self.tmp, "manifest.json"), "w") as f:
            json.dump({"experiment": "closed-loop", "status": "complete"}, f)
        with open(os.path.join(self.tmp, "runs.jsonl"), "w") as f:
            for i, kl in enumerate((0.5, 0.25)):
                f.write(json.dumps({"run_id": f"oracle_topk-{i}", "method": "oracle_topk", "params": {"k": 10 * (i + 1)},
                                    "label": f"oracle_topk(k={10 * (i + 1)})", "exact_frac": 0.01 * (i + 1),
                                    "est_frac": 0.0, "complete": i == 0, "step_ms_median": 12.5,
                                    "fidelity": {"kl_mean": kl, "kl_p90": 2 * kl, "top1": 0.75, "ppl": 61.25},
                                    "task": {"accuracy": 0.625, "agreement_mean": 3}}) + "\n")
        with open(os.path.join(self.tmp, "offline-online.json"), "w") as f:
            json.dump({"points": [{}, {}], "table": [{"open": "mass", "closed": "kl_mean", "spearman": -0.9375},
                                                     {"open": "mass", "closed": "niah_accuracy", "spearman": None}]}, f)
        res = R.load(self.tmp)
        self.assertTrue(report.is_closed_loop(res))
        html = report.make_report(res, [])
        sec = html[html.index('<section id="closed-loop">'):]
        sec = sec[:sec.index("</section>")]
        for needle in ("KL mean", "NIAH acc", "ms/step p50", "0.25", "0.5", "61.25", "0.625", "12.5",
                       "oracle_topk(k=20) (partial)", "spearman-table", "-0.938", "2 (method, parameters) points"):
            self.assertIn(needle, sec)
        self.assertNotIn("oracle_topk(k=10) (partial)", sec)
        # an open-loop directory has no closed-loop section
        self.assertFalse(report.is_closed_loop(load("quickstart")))
        self.assertNotIn('id="closed-loop"', report.make_report(load("quickstart"), []))


def C_points(res):
    """The closed-loop points per (model, context), as the figures and the report read them."""
    from retro_bench.plotting import closed
    return list(closed.points(res).values())


def closed_parts(name):
    """The fixture's part files by (run id, prompt length), read here without the plotting package."""
    d = U.fixture(name)
    with open(os.path.join(d, "manifest.json")) as f:
        lens = {c["id"]: c["prompt_len"] for c in json.load(f)["cases"]}
    out = {}
    for rid in os.listdir(os.path.join(d, "parts")):
        for fn in os.listdir(os.path.join(d, "parts", rid)):
            with open(os.path.join(d, "parts", rid, fn)) as f:
                out.setdefault((rid, lens[fn[:-5]]), []).append(json.load(f))
    return out


class ClosedLoopFiguresTest(U.TempDirMixin, unittest.TestCase):
    """closed_loop_kl / _top1 / _accuracy on the closed-loop fixtures (two real runs, tiny random Llama and
    SmolLM2-135M: streaming and oracle_topk at two budgets, token-id prompts of 200 and 400 tokens, fidelity
    and task cases at each): one panel per (model, context), one line per method, every point against the
    part files it came from."""

    FIGS = {"closed_loop_kl": "kl_mean", "closed_loop_top1": "top1", "closed_loop_accuracy": "accuracy"}

    def test_panels_lines_and_points(self):
        for name, model in (("closed-loop-tiny", "tiny-random-llama"), ("closed-loop-smollm2", "SmolLM2-135M-Instruct")):
            parts = closed_parts(name)
            runs = U.runs_by_id(name)
            for fig, key in self.FIGS.items():
                s = data(fig, load(name))
                self.assertEqual(s["metric"], key)
                self.assertEqual([(p["model_label"], p["context"]) for p in s["panels"]], [(model, 200), (model, 400)])
                for p in s["panels"]:
                    self.assertEqual(p["title"], f"{model} · {p['context']} tokens")
                    self.assertEqual([x["method"] for x in p["series"]], ["streaming", "oracle_topk"])
                    ref = parts[("reference", p["context"])]
                    if key == "accuracy":  # the answers are the reference's own tokens: full answers all
                        self.assertEqual(p["reference"], 1.0)
                    else:
                        self.assertEqual(p["reference"], 0.0 if key == "kl_mean" else 1.0)
                    self.assertEqual(len(ref), 5)
                    for ser in p["series"]:
                        self.assertEqual(len(ser["points"]), 2)  # two budgets
                        xs = [q["x"] for q in ser["points"]]
                        self.assertEqual(xs, sorted(xs))
                        for q in ser["points"]:
                            self.assertEqual(runs[q["run_id"]]["method"], ser["method"])
                            ps = parts[(q["run_id"], p["context"])]
                            # x: the exact-token share of the loops behind y (teacher-forced / scored greedy)
                            infos = [x["gen"] if key == "accuracy" else x["tf"] for x in ps
                                     if ("answer" in x if key == "accuracy" else "kl" in x)]
                            self.assertEqual(len(infos), 3 if key == "accuracy" else 2)
                            self.assertAlmostEqual(q["x"], sum(i["exact_frac"] for i in infos) / len(infos), places=12)
                            if key == "accuracy":
                                scored = [x for x in ps if x.get("answer") is not None]
                                self.assertEqual(q["cases"], 3)
                                want = sum(bool(x["correct"]) for x in scored) / len(scored)
                            else:
                                vals = [v for x in ps for v in x.get("kl" if key == "kl_mean" else "top1", [])]
                                self.assertEqual(len(vals), 16)  # 2 fidelity cases x 8 positions
                                want = sum(vals) / len(vals)
                            self.assertAlmostEqual(q["y"], want, places=12)

    def test_contexts_pool_to_the_records(self):
        # the per-context values pooled back over both contexts are the runner's aggregated record
        for name in ("closed-loop-tiny", "closed-loop-smollm2"):
            runs = U.runs_by_id(name)
            for fig, key in self.FIGS.items():
                by_run = {}
                for p in data(fig, load(name))["panels"]:
                    for ser in p["series"]:
                        for q in ser["points"]:
                            by_run.setdefault(q["run_id"], []).append(q)
                self.assertEqual(len(by_run), 4)
                for rid, qs in by_run.items():
                    w = [q["cases"] if key == "accuracy" else q["positions"] for q in qs]
                    pooled = sum(q["y"] * n for q, n in zip(qs, w)) / sum(w)
                    rec = runs[rid]["task"]["accuracy"] if key == "accuracy" else runs[rid]["fidelity"][key]
                    self.assertAlmostEqual(pooled, rec, places=5, msg=(name, fig, rid))

    def test_more_budget_is_closer_to_full_on_smollm2(self):
        s = data("closed_loop_kl", load("closed-loop-smollm2"))
        for p in s["panels"]:
            for ser in p["series"]:
                ys = [q["y"] for q in ser["points"]]
                self.assertGreater(ys[0], ys[1], (p["title"], ser["method"]))
            streaming, oracle = (ser["points"] for ser in p["series"])
            for a, b in zip(streaming, oracle):  # the exact top-k beats the window at equal exact tokens
                self.assertAlmostEqual(a["x"], b["x"], places=9)
                self.assertGreater(a["y"], b["y"])

    def test_a_grid_in_progress_is_drawn_on_its_common_cases(self):
        """No runs.jsonl yet (a grid still running, or shards not all done): the records come from the
        manifest's runs that have part files, and every point stands on the cases all of them have done."""
        d = os.path.join(self.tmp, "cl")
        shutil.copytree(U.fixture("closed-loop-tiny"), d)
        os.remove(os.path.join(d, "runs.jsonl"))
        with open(os.path.join(d, "manifest.json")) as f:
            m = json.load(f)
        task = [c["id"] for c in m["cases"] if c["answer"] is not None and c["prompt_len"] == 200]
        victim = m["resolved"]["runs"][0]["id"]
        os.remove(os.path.join(d, "parts", victim, task[0] + ".json"))  # that run has not done this case yet
        shutil.rmtree(os.path.join(d, "parts", m["resolved"]["runs"][1]["id"]))  # nor this one any case
        res = R.load(d)
        self.assertEqual([r["run_id"] for r in res.runs], ["reference"] + [r["id"] for r in m["resolved"]["runs"]
                                                                        if r["id"] != m["resolved"]["runs"][1]["id"]])
        self.assertTrue(all(r["complete"] is False for r in res.runs))
        full = {(q["run_id"], p["context"]): q for p in data("closed_loop_accuracy", load("closed-loop-tiny"))["panels"]
                for ser in p["series"] for q in ser["points"]}
        for p in data("closed_loop_accuracy", res)["panels"]:
            for ser in p["series"]:
                for q in ser["points"]:
                    want = full[(q["run_id"], p["context"])]["cases"] - (1 if p["context"] == 200 else 0)
                    self.assertEqual(q["cases"], want, (q["run_id"], p["context"]))
        self.assertTrue(data("closed_loop_kl", res)["panels"])
        # the report's closed-loop table: the same points pooled per run, marked partial (no record yet)
        from retro_bench.plotting import report
        sec = report.closed_loop_html(res)
        cases = sum(p["cases"] for p in (q for ps in C_points(res) for q in ps if q["run_id"] == victim))
        self.assertIn(f"(partial: {cases} common cases)", sec)
        acc = [q for ps in C_points(res) for q in ps if q["run_id"] == victim and q["accuracy"] is not None]
        pooled = sum(q["accuracy"] * q["task_cases"] for q in acc) / sum(q["task_cases"] for q in acc)
        self.assertIn(f">{pooled:.4g}<", sec.replace("</td>", "<"))

    def test_only_where_reference_answers_leaves_out_full_attentions_misses(self):
        """A config with "only_where_reference_answers": no method part where full attention is wrong, and
        the panel at that context compares on the cases it answers (full at 1.0); without the key the same
        parts give full's accuracy over every case."""
        d = os.path.join(self.tmp, "only")
        shutil.copytree(U.fixture("closed-loop-tiny"), d)
        with open(os.path.join(d, "manifest.json")) as f:
            m = json.load(f)
        miss = [c["id"] for c in m["cases"] if c["answer"] is not None and c["prompt_len"] == 200][0]
        rpath = os.path.join(d, "parts", "reference", miss + ".json")
        with open(rpath) as f:
            ref = json.load(f)
        ref["correct"] = False
        with open(rpath, "w") as f:
            json.dump(ref, f)
        for r in m["resolved"]["runs"]:  # the runner skipped the methods there
            os.remove(os.path.join(d, "parts", r["id"], miss + ".json"))
        whole = {(q["run_id"], p["context"]): q for p in data("closed_loop_accuracy", load("closed-loop-tiny"))["panels"]
                 for ser in p["series"] for q in ser["points"]}
        for flag, full_at_200 in ((False, 2 / 3), (True, 1.0)):
            m.setdefault("config", {})["only_where_reference_answers"] = flag
            with open(os.path.join(d, "manifest.json"), "w") as f:
                json.dump(m, f)
            panels = {p["context"]: p for p in data("closed_loop_accuracy", R.load(d))["panels"]}
            self.assertAlmostEqual(panels[200]["reference"], full_at_200, places=9, msg=flag)
            self.assertEqual(panels[400]["reference"], 1.0)
            for q in (q for ser in panels[200]["series"] for q in ser["points"]):
                self.assertEqual(q["cases"], whole[(q["run_id"], 200)]["cases"] - 1)

    def test_two_models(self):
        res = R.load(U.fixture("closed-loop-smollm2"), others=[U.fixture("closed-loop-tiny")])
        from retro_bench.plotting import closed as C
        self.assertEqual([C.model_label(m) for m in C.models(res)], ["SmolLM2-135M-Instruct", "tiny-random-llama"])
        for fig in self.FIGS:
            s = data(fig, res)
            self.assertEqual([(p["model_label"], p["context"]) for p in s["panels"]],
                             [("SmolLM2-135M-Instruct", 200), ("SmolLM2-135M-Instruct", 400),
                              ("tiny-random-llama", 200), ("tiny-random-llama", 400)])
            alone = data(fig, load("closed-loop-tiny"))["panels"]
            self.assertEqual(s["panels"][2:], alone)  # the other directory's panels are its own figure's
            from retro_bench.plotting.figures.closed_loop import _grid
            self.assertEqual(_grid(s), (2, 2, [(0, 0), (0, 1), (1, 0), (1, 1)]))  # a row per model
        # the open-loop figures read the main directory alone
        self.assertFalse(F.FIGURES["accuracy_budget"].applies(res))

    def strip_tasks(self, name):
        """A copy of a fixture without its task cases (a fidelity-only closed loop)."""
        d = U.copy_fixture(name, self.tmp)
        with open(os.path.join(d, "manifest.json")) as f:
            man = json.load(f)
        tasks = {c["id"] for c in man["cases"] if c["kind"] == "task"}
        man["cases"] = [c for c in man["cases"] if c["id"] not in tasks]
        with open(os.path.join(d, "manifest.json"), "w") as f:
            json.dump(man, f)
        for rid in os.listdir(os.path.join(d, "parts")):
            for cid in tasks:
                os.remove(os.path.join(d, "parts", rid, cid + ".json"))
        runs = list(U.runs_by_id(name).values())
        with open(os.path.join(d, "runs.jsonl"), "w") as f:
            for r in runs:
                r.pop("task", None)
                f.write(json.dumps(r) + "\n")
        return d

    def test_without_task_results_no_accuracy_figure(self):
        d = self.strip_tasks("closed-loop-tiny")
        res = R.load(d)
        self.assertIsNone(data("closed_loop_accuracy", res))
        self.assertEqual(len(data("closed_loop_kl", res)["panels"]), 2)
        self.assertEqual(data("closed_loop_top1", res)["panels"], data("closed_loop_top1", load("closed-loop-tiny"))["panels"])
        shutil.rmtree(os.path.join(d, "parts"))  # records only: one panel per model, from the records
        s = data("closed_loop_kl", R.load(d))
        self.assertEqual([p["context"] for p in s["panels"]], [None])  # two prompt lengths pooled
        runs = U.runs_by_id("closed-loop-tiny")
        for ser in s["panels"][0]["series"]:
            for q in ser["points"]:
                self.assertEqual((q["x"], q["y"]), (runs[q["run_id"]]["exact_frac"],
                                                    runs[q["run_id"]]["fidelity"]["kl_mean"]))
        self.assertIsNone(data("closed_loop_accuracy", R.load(d)))


class ClosedLoopReportTest(U.TempDirMixin, unittest.TestCase):
    """The report of closed-loop directories: the header's revision and BLAS, several models."""

    def header(self, res):
        from retro_bench.plotting import report
        html = report.make_report(res, [])
        i = html.index('<p class="meta">status')
        return html[i:html.index("</p>", i)], html

    def test_header_revision_and_blas(self):
        d = U.copy_fixture("closed-loop-tiny", self.tmp)
        head, _ = self.header(R.load(d))  # the runner recorded neither (revision 63b054e)
        self.assertIn("revision not recorded", head)
        self.assertIn("BLAS not recorded", head)
        self.assertNotIn("?", head)
        self.assertIn("model tiny-random-llama", head)
        # the open-loop replay's manifest next to it (RESULTS/<name>-openloop/, written by retro-bench run)
        ol = d + "-openloop"
        os.makedirs(ol)
        with open(os.path.join(ol, "manifest.json"), "w") as f:
            json.dump({"host": {"git_revision": "abc1234def56", "blas": "OpenBLAS (libblas.so.3)"}}, f)
        head, _ = self.header(R.load(d))
        self.assertIn("revision abc1234def56 (from the open-loop replay&#x27;s manifest)", head)
        self.assertIn("BLAS OpenBLAS (libblas.so.3) (from the open-loop replay", head)
        # the manifest's own host (retro-bench's host_info(), as an open-loop run records it) comes first
        with open(os.path.join(d, "manifest.json")) as f:
            man = json.load(f)
        man["host"].update(git_revision="63b054eaab13", blas="OpenBLAS (/usr/lib/libblas.so.3)")
        with open(os.path.join(d, "manifest.json"), "w") as f:
            json.dump(man, f)
        head, html = self.header(R.load(d))
        self.assertIn("revision 63b054eaab13 · BLAS OpenBLAS (/usr/lib/libblas.so.3) · model tiny-random-llama", head)
        self.assertIn("63b054eaab13", html[html.index('id="manifest-table"'):])

    def test_two_models_closed_loop_section(self):
        a, b = U.copy_fixture("closed-loop-smollm2", self.tmp), U.copy_fixture("closed-loop-tiny", self.tmp)
        for d, rho in ((a, -0.75), (b, -1.0)):
            with open(os.path.join(d, "offline-online.json"), "w") as f:
                json.dump({"points": [{"method": "oracle_topk", "label": "k", "recall@100": 0.5 + i / 10, "mass": 0.9,
                                       "out_err": 0.1, "kl_mean": 1.0 / (i + 1), "niah_accuracy": 0.5} for i in range(3)],
                           "table": [{"open": "recall@100", "closed": "kl_mean", "spearman": rho}]}, f)
        res = R.load(a, others=[b])
        head, html = self.header(res)
        self.assertIn("models SmolLM2-135M-Instruct, tiny-random-llama", head)
        self.assertIn(f"with {b}", head)
        sec = html[html.index('<section id="closed-loop">'):]
        sec = sec[:sec.index("</section>")]
        self.assertIn('<th class="l">model</th>', sec)
        self.assertEqual(sec.count('<td class="l">SmolLM2-135M-Instruct</td>'), 5)  # reference + 4 runs
        self.assertEqual(sec.count('<td class="l">tiny-random-llama</td>'), 5)
        self.assertIn("Offline vs online — SmolLM2-135M-Instruct", sec)
        self.assertIn("Offline vs online — tiny-random-llama", sec)
        self.assertIn("-0.75", sec)
        s = data("offline_online", res)
        self.assertEqual(s["models"], ["SmolLM2-135M-Instruct", "tiny-random-llama"])
        p = s["panels"][0]
        self.assertEqual((p["open"], p["closed"]), ("recall@100", "kl_mean"))
        self.assertEqual(p["spearman_by_model"], {"SmolLM2-135M-Instruct": -0.75, "tiny-random-llama": -1.0})
        self.assertEqual(p["spearman"], -0.75)
        self.assertEqual([q["model"] for q in p["points"]], ["SmolLM2-135M-Instruct"] * 3 + ["tiny-random-llama"] * 3)
        self.assertEqual(len(data("offline_online", R.load(b))["panels"][0]["points"]), 3)  # one directory alone
        self.assertEqual(data("offline_online", R.load(b))["models"], ["tiny-random-llama"])


def gpu_records(name):
    """The fixture's records by (method, full's kernel as the record says it, context, batch), read here
    without the plotting package."""
    out = {}
    for r in U.runs_by_id(name).values():
        kernel = r["cuda"].get("kernel", "own") if r["method"] == "full" else None
        out[(r["method"], kernel, r["prompt_len"], r["batch"])] = r
    return out


class GpuFiguresTest(U.TempDirMixin, unittest.TestCase):
    """Backend "cuda" records (fixtures/gpu-run: the H200 run of configs/gpu/wave-vs-full.json before full had a
    kernel choice, batch 1/8/64; fixtures/gpu-run-kernels: the same with full's kernel "own" and edited
    "flashinfer" copies): step time, phases vs. the cost model, speed-up."""

    def test_step_time_is_the_records_gpu_step_us(self):
        for name, labels in (("gpu-run", ["Full attention (own kernel)", "RetroInfer (wave)"]),
                             ("gpu-run-kernels", ["Full attention (FlashInfer)", "Full attention (own kernel)",
                                                  "RetroInfer (wave)"])):
            s = data("gpu_step_time", load(name))
            recs = gpu_records(name)
            self.assertEqual(s["contexts"], [32768, 131072], name)
            self.assertEqual(s["device"], "NVIDIA H200")
            self.assertEqual(s["hardware"], "h100-sxm-pcie5")
            self.assertEqual([x["label"] for x in s["series"]], labels, name)
            n = 0
            for x in s["series"]:
                for N in s["contexts"]:
                    pts = x["by_context"][str(N)]
                    self.assertEqual([p["batch"] for p in pts], [1, 8, 64])
                    for p in pts:
                        r = recs[(x["method"], x["kernel"], N, p["batch"])]
                        self.assertEqual(p["run_id"], r["run_id"])
                        self.assertEqual(p["step_us"], r["metrics"]["gpu_step_us"]["mean"])
                        self.assertEqual(p["model_step_us"], r["metrics"]["model_step_us"]["mean"])
                        n += 1
            self.assertEqual(n, len(recs))  # every record drawn once
        # a point checked by hand: wave at 128K, batch 8 measured 1668.88 us per layer step on the H200
        s = data("gpu_step_time", load("gpu-run"))
        wave = next(x for x in s["series"] if x["method"] == "wave")
        self.assertEqual(wave["by_context"]["131072"][1]["step_us"], 1668.88)

    def test_kernels(self):
        # old records have no cuda.kernel: their full runs are the own kernel; new ones say it
        s = data("gpu_step_time", load("gpu-run"))
        self.assertEqual([(x["method"], x["kernel"]) for x in s["series"]], [("full", "own"), ("wave", None)])
        s = data("gpu_step_time", load("gpu-run-kernels"))
        self.assertEqual([(x["method"], x["kernel"], x["variant"]) for x in s["series"]],
                         [("full", "flashinfer", 0), ("full", "own", 1), ("wave", None, 0)])
        self.assertIsNone(R.cuda_kernel(next(iter(U.runs_by_id("quickstart").values()))))
        # without cuda.kernel the label's '@cuda(...,kernel=K)' says it
        r = dict(next(r for r in U.runs_by_id("gpu-run-kernels").values() if r["cuda"].get("kernel") == "flashinfer"))
        r["cuda"] = {k: v for k, v in r["cuda"].items() if k != "kernel"}
        self.assertEqual(R.cuda_kernel(r), "flashinfer")
        self.assertTrue(r["label"].endswith("@cuda(batch=%d,kernel=flashinfer)" % r["batch"]))

    def test_speedup_is_full_over_wave(self):
        for name, kernels in (("gpu-run", ["own"]), ("gpu-run-kernels", ["flashinfer", "own"])):
            s = data("gpu_speedup", load(name))
            recs = gpu_records(name)
            self.assertEqual(s["baseline_kernel"], kernels[0], name)  # the library kernel when present
            self.assertEqual([x["kernel"] for x in s["series"]], kernels, name)
            self.assertEqual([x["primary"] for x in s["series"]], [True] + [False] * (len(kernels) - 1))
            for x in s["series"]:
                for N in (32768, 131072):
                    pts = x["by_context"][str(N)]
                    self.assertEqual([p["batch"] for p in pts], [1, 8, 64])
                    for p in pts:
                        full = recs[("full", x["kernel"], N, p["batch"])]["metrics"]["gpu_step_us"]["mean"]
                        wave = recs[("wave", None, N, p["batch"])]["metrics"]["gpu_step_us"]["mean"]
                        self.assertAlmostEqual(p["speedup"], full / wave, places=12)
                        self.assertEqual((p["full_us"], p["wave_us"]), (full, wave))
        # the H200 numbers (docs: summary-table.md): wave 0.67x the own kernel at 32K batch 1, 2.77x at 128K batch 64
        own = data("gpu_speedup", load("gpu-run"))["series"][0]["by_context"]
        self.assertAlmostEqual(own["32768"][0]["speedup"], 0.671, places=3)
        self.assertAlmostEqual(own["131072"][-1]["speedup"], 2.765, places=3)

    def test_phases_measured_and_modeled(self):
        for name in ("gpu-run", "gpu-run-kernels"):
            s = data("gpu_phases", load(name))
            recs = gpu_records(name)
            self.assertEqual(s["phases"], ["select", "estimate", "gather", "attend", "other"])
            self.assertEqual(len(s["rows"]), 2 if name == "gpu-run" else 3)
            for row in s["rows"]:
                for N in s["contexts"]:
                    for p in row["by_context"][str(N)]:
                        r = recs[(row["method"], row["kernel"], N, p["batch"])]
                        m = {k: v["mean"] for k, v in r["metrics"].items()}
                        meas = p["measured"]
                        for ph in ("select", "estimate", "gather", "attend"):
                            self.assertEqual(meas[ph], m[f"gpu_{ph}_us"])
                        # the stacked bar is the measured step: its rest is what the phases leave out
                        self.assertEqual(p["step_us"], m["gpu_step_us"])
                        self.assertGreaterEqual(meas["other"], 0)
                        self.assertAlmostEqual(sum(meas.values()), m["gpu_step_us"], places=6)
                        self.assertEqual(p["host_us"], m["gpu_host_us"])
                        # the model's bar: its terms as the record's cuda summary matches them
                        ph = r["cuda"]["phases"]
                        mod = p["model"]
                        self.assertAlmostEqual(mod["select"], ph["select"]["model_us"], places=6)
                        self.assertAlmostEqual(mod["gather"], ph["gather"]["model_us"], places=6)
                        self.assertAlmostEqual(mod["attend"], ph["attend"]["model_us"], places=6)
                        self.assertEqual(mod["estimate"], 0.0)  # the model's select covers rank + estimate
                        self.assertAlmostEqual(p["model_step_us"], ph["step"]["model_us"], places=6)
                        self.assertAlmostEqual(sum(mod.values()), max(p["model_step_us"], sum(
                            mod[k] for k in ("select", "gather", "attend"))), places=6)
                        # the summary's measured select is rank + estimate (each rounded to 6 digits in the fixture)
                        self.assertLess(abs(meas["select"] + meas["estimate"] - ph["select"]["measured_us"]),
                                        1e-5 * max(1.0, ph["select"]["measured_us"]))
                        if row["method"] == "full":  # full attention's step is its attention
                            self.assertEqual(meas["select"] + meas["estimate"] + meas["gather"], 0)
                            self.assertAlmostEqual(meas["other"], 0, places=6)
        # wave at 32K batch 1 on the H200: 94.9 us ranking, 138 us estimation, 21 us gather, 22 us attention,
        # 32.6 us more on the step's critical path; the model (H100 profile) predicted 32.6 us in all
        w = next(x for x in data("gpu_phases", load("gpu-run"))["rows"] if x["method"] == "wave")
        p = w["by_context"]["32768"][0]
        self.assertEqual(p["batch"], 1)
        self.assertAlmostEqual(p["measured"]["other"], 308.692 - (94.852 + 138.048 + 21.048 + 22.144), places=6)
        self.assertAlmostEqual(p["model_step_us"], 32.5927, places=4)

    def test_not_for_cpu_results(self):
        for name in ALL:
            if name.startswith("gpu-run"):
                continue
            for fig in GPU_FIGURES:
                self.assertIsNone(data(fig, load(name)), (name, fig))

    def test_speedup_needs_both_methods(self):
        # a cuda run of wave alone: step time and phases, no speed-up
        with open(os.path.join(U.fixture("gpu-run"), "runs.jsonl")) as f, \
                open(os.path.join(self.tmp, "runs.jsonl"), "w") as g:
            for line in f:
                if json.loads(line)["method"] == "wave":
                    g.write(line)
        res = R.load(self.tmp)
        self.assertIsNotNone(data("gpu_step_time", res))
        self.assertIsNotNone(data("gpu_phases", res))
        self.assertIsNone(data("gpu_speedup", res))

    def test_system_point_from_a_cuda_label(self):
        # without the manifest the system point comes from the label, which ends in '@cuda(batch=B)'
        r = next(iter(U.runs_by_id("gpu-run").values()))
        self.assertEqual(R.Results._system_point(r, []), r["system"])


class CentroidRankTest(U.TempDirMixin, unittest.TestCase):
    """retro-bench centroid-rank JSON (fixtures/centroid-rank: the 32K synthetic trace, KV heads 0-1)."""

    def test_only_with_the_json(self):
        for name in ALL:
            self.assertIsNone(data("centroid_rank", load(name)), name)

    def test_series_and_points(self):
        d = U.fixture("centroid-rank")
        with open(os.path.join(d, "centroid-rank-synth-llama3-32k-l1.json")) as f:
            obj = json.load(f)
        s = data("centroid_rank", R.load(d))
        self.assertEqual([x["kind"] for x in s["series"]], ["true", "estimate", "oracle"])
        self.assertEqual([x["method"] for x in s["series"]], ["wave", "wave", "oracle_topk"])
        for ser, src in zip(s["series"], obj["series"]):
            self.assertEqual(ser["points"], [[r, y] for r, y in zip(src["rank"], src["cum_attention"])])
        self.assertEqual(s["clusters"], 2044)
        # the wave defaults' zones: 1.8% of 2044 clusters = 37, + 23.2% = 474 more
        self.assertEqual([z["rank"] for z in s["zones"]], [37, 37 + 474])
        true, est, orc = ([p[1] for p in x["points"]] for x in s["series"])
        for i in range(len(true)):
            self.assertLessEqual(est[i], true[i] + 1e-6)   # Jensen: the centroid estimate is a lower bound
            self.assertLessEqual(true[i], orc[i] + 1e-6)   # no ranking beats sorting by true attention
        self.assertAlmostEqual(true[-1], s["clustered"], places=4)
        self.assertAlmostEqual(orc[-1], s["clustered"], places=4)

    def test_generic_form(self):
        d = os.path.join(self.tmp, "cr")
        os.makedirs(d)
        with open(os.path.join(d, "centroid-rank.json"), "w") as f:
            json.dump({"kind": "centroid-rank", "series": [
                {"label": "layer 0", "rank": [1, 2, 4], "cum_attention": [0.3, 0.5, 0.7]}]}, f)
        s = data("centroid_rank", R.load(d))
        self.assertEqual(s["series"][0]["points"], [[1, 0.3], [2, 0.5], [4, 0.7]])
        self.assertNotIn("zones", s)


class PaperConfigsTest(unittest.TestCase):
    def test_every_paper_config_names_its_figure(self):
        import glob
        paper = sorted(glob.glob(os.path.join(U.ROOT, "configs", "paper", "*.json")))
        self.assertTrue(paper)
        # configs/real/ (real-model traces) follows the same rule once it exists
        for f in paper + sorted(glob.glob(os.path.join(U.ROOT, "configs", "real", "*.json"))):
            with open(f) as fh:
                cfg = json.load(fh)
            self.assertIsInstance(cfg.get("figure"), str, f)
            self.assertGreater(len(cfg["figure"].strip()), 10, f)

    def test_docs_map_every_paper_config_to_its_figures(self):
        import glob
        with open(os.path.join(U.ROOT, "docs", "plots.md"), encoding="utf-8") as fh:
            doc = fh.read()
        for f in sorted(glob.glob(os.path.join(U.ROOT, "configs", "paper", "*.json"))):
            self.assertIn(f"`configs/paper/{os.path.basename(f)}`", doc, f)
        for name in F.FIGURES:  # every figure of the registry is described
            self.assertIn(f"`{name}`", doc, name)


class ResultsLoaderTest(U.TempDirMixin, unittest.TestCase):
    def test_errors(self):
        with self.assertRaises(R.ResultsError):
            R.load(os.path.join(self.tmp, "missing"))
        with self.assertRaises(R.ResultsError):
            R.load(self.tmp)  # empty directory: no runs

    def test_runs_jsonl_bad_line_named_blank_lines_skipped(self):
        # one reader (retro_bench.runs_file) serves the loader, the closed-loop tables, the GPU tables and tools
        from retro_bench.runs_file import read_runs
        d = U.copy_fixture("wave-segments", self.tmp)
        jl = os.path.join(d, "runs.jsonl")
        with open(jl, encoding="utf-8") as f:
            lines = f.read().splitlines()
        with open(jl, "w", encoding="utf-8") as f:
            f.write("\n\n".join(lines) + "\n\n")
        self.assertEqual([r["run_id"] for r in read_runs(d)], [json.loads(x)["run_id"] for x in lines])
        self.assertEqual(len(R.load(d).runs), len(lines))
        with open(jl, "w", encoding="utf-8") as f:
            f.write(lines[0] + "\n" + lines[1][:-5] + "\n")
        with self.assertRaisesRegex(R.ResultsError, r"runs\.jsonl:2: bad JSON"):
            R.load(d)

    def test_runs_dir_fallback(self):
        d = U.copy_fixture("wave-segments", self.tmp)
        runs = list(U.runs_by_id("wave-segments").values())
        os.remove(os.path.join(d, "runs.jsonl"))
        os.makedirs(os.path.join(d, "runs"))
        for r in runs:
            with open(os.path.join(d, "runs", r["run_id"] + ".json"), "w") as f:
                json.dump(r, f)
        res = R.load(d)
        self.assertEqual([r["run_id"] for r in res.runs], [r["run_id"] for r in runs])

    def test_short_labels(self):
        res = load("quickstart")
        labels = [res.short_label(r) for r in res.runs]
        self.assertEqual(labels[:3], ["full", "oracle_topk k=64", "oracle_topk k=256"])
        self.assertEqual(res.varying_params("streaming"), ["sink", "window"])


class ClosedLoopVariantsTest(unittest.TestCase):
    """closed_loop_*: a method's runs that are a full grid of a budget and another setting (wave's
    retrieval x estimation) are one line per setting; knobs that move together (MagicPIG's K, L) or one
    knob are one line."""

    @staticmethod
    def pts(rows):
        return [{"params": dict(r), "x": i / 100.0} for i, r in enumerate(rows)]

    def test_groups(self):
        from retro_bench.plotting.figures.closed_loop import variant_groups
        wave = self.pts([{"retrieval": r, "estimation": e, "segment": 8192} for r in (14, 46, 96) for e in (0.232, 0)])
        got = [(sfx, [q["params"]["retrieval"] for q in g]) for sfx, g in variant_groups(wave)]
        self.assertEqual(got, [("estimation=0.232", [14, 46, 96]), ("estimation=0", [14, 46, 96])])
        pig = self.pts([{"K": 12, "L": 150}, {"K": 10, "L": 150}, {"K": 8, "L": 75}])
        self.assertEqual([(sfx, len(g)) for sfx, g in variant_groups(pig)], [(None, 3)])
        one = self.pts([{"k": k, "sink": 4} for k in (220, 732)])
        self.assertEqual([(sfx, len(g)) for sfx, g in variant_groups(one)], [(None, 2)])
        ragged = wave[:5]  # estimation 0 at two budgets only: not a full grid
        self.assertEqual([(sfx, len(g)) for sfx, g in variant_groups(ragged)], [(None, 5)])


class ModelThroughputTest(unittest.TestCase):
    """retro_bench.gpu.model_throughput (issue 40 #5): memory caps, the best within each cap, the batch from
    which offloading pays, the figure's rows, and the figure itself (the same file twice)."""
    MODEL = {"layers": 32, "kv_heads": 8, "head_dim": 128, "device_memory_bytes": 143 * 2**30}  # an H200

    class Args:
        gpu_GiB, reserved_GiB, weights_GB, host_GiB, wave_resident = 0.0, 4.0, 16.06, 512.0, 0.13

    def rows(self):
        tps = {"full": (100, 180, None, None), "full-cudnn": (110, 190, None, None),  # batch 1, 2, 8, 32
               "wave-hbm": (150, 280, 900, None), "wave": (60, 110, 380, 1200), "wave-dev": (70, 120, 300, 1100),
               "quest": (120, 200, None, None)}
        return [{"method": m, "context": 131072, "batch": b, "tokens_per_s": v}
                for m, vals in tps.items() for b, v in zip((1, 2, 8, 32), vals) if v is not None]

    def test_caps_best_and_where_offloading_pays(self):
        from retro_bench.gpu import model_throughput as mt
        (t,) = mt.tables(self.rows(), self.MODEL, self.Args)
        kv = 131072 * 8 * 128 * 4.0 * 32  # one sequence's KV, every layer: 17.2 GB
        free = 139 * 2**30 - 16.06e9
        self.assertEqual(t["caps"]["full"], (int(free // kv), None))  # Llama-3-8B: 7 requests at 128K
        self.assertEqual(t["caps"]["full"][0], 7)
        self.assertEqual(t["caps"]["wave"], (int(free // (0.13 * kv)), int(512 * 2**30 // kv)))
        by = {r["batch"]: r["cells"] for r in t["rows"]}
        self.assertTrue(by[8]["wave-hbm"]["oom"])  # past the HBM cap: shown, not counted
        self.assertFalse(by[32]["wave"]["oom"])
        self.assertEqual(t["best"]["full-cudnn"], (190, 2))
        self.assertEqual(t["full"], "full-cudnn")  # the fastest capped full row is the bar
        self.assertEqual(t["best"]["wave-hbm"], (280, 2))
        self.assertEqual(t["pays_from"], {"wave": 8, "wave-dev": 8})  # 380 and 300 > 190; 110 and 120 are not
        self.assertEqual(mt.figure_methods(t), ["full-cudnn", "quest", "wave-hbm", "wave"])  # wave beats wave-dev

    def test_figure_file_is_written_and_reproducible(self):
        import tempfile
        from retro_bench.gpu import model_throughput as mt
        ts = mt.tables(self.rows(), self.MODEL, self.Args)
        d = tempfile.mkdtemp(prefix="retro-mt-")
        try:
            paths = [os.path.join(d, f"t{i}.png") for i in (1, 2)]
            for p in paths:
                mt.draw(ts, p)
            with open(paths[0], "rb") as a, open(paths[1], "rb") as b:
                first = a.read()
                self.assertEqual(first, b.read())
            self.assertEqual(first[:8], b"\x89PNG\r\n\x1a\n")
        finally:
            shutil.rmtree(d)


class AccuracyTableMatchTest(unittest.TestCase):
    """retro_bench.gpu.accuracy_table's closed-loop column (issue 41 #4): which closed-loop run stands for a GPU
    record — the same method (full: the reference), the non-budget parameters equal, then the nearest
    exact-token share on a log scale."""

    @staticmethod
    def closed(method, frac, **params):
        return {"method": method, "params": params, "exact_frac": frac, "task": {"niah_cases": 32, "accuracy": frac}}

    @staticmethod
    def record(method, frac, **params):
        return {"method": method, "params": params, "metrics": {"exact_frac": {"mean": frac}}}

    def test_match(self):
        from retro_bench.gpu.accuracy_table import closed_loop_match as match
        runs = [self.closed("reference", None), self.closed("wave", 0.018, estimation=0.0, retrieval=32),
                self.closed("wave", 0.05, estimation=0.232, retrieval=96), self.closed("wave", 0.018, estimation=0.232, retrieval=32),
                self.closed("magicpig", 0.005, K=12, L=150), self.closed("magicpig", 0.023, K=10, L=150),
                self.closed("pq", 0.018, k=508), self.closed("pq", 0.05, k=1532), self.closed("pq", 0.10, k=3132)]
        self.assertIs(match(self.record("full", 1.0), runs), runs[0])
        self.assertIs(match(self.record("wave", 0.018, estimation=0.232, retrieval=0.018), runs), runs[3])
        self.assertIs(match(self.record("wave", 0.02, estimation=0.0, retrieval=96), runs), runs[1])
        # the estimation decides before the distance: no 0.232 run near 0.01, the 5 % one is taken
        self.assertIs(match(self.record("wave", 0.01, estimation=0.232), runs[:3]), runs[2])
        self.assertIs(match(self.record("magicpig", 0.004, K=10, L=150), runs), runs[5])  # K, L over the distance
        self.assertIs(match(self.record("pq", 0.012, k=1532), runs), runs[6])  # 1.2 %: 1.8 % (x1.5), not 5 % (x4.2)
        self.assertIs(match(self.record("pq", 0.032, k=1532), runs), runs[7])  # log scale: 5 % (x1.6), not 1.8 % (x1.8)
        self.assertIsNone(match(self.record("quest", 0.05, k=1600), runs))  # no run of the method
        self.assertIsNone(match(self.record("wave", 0.05, estimation=0.5), runs))  # none with its estimation


if __name__ == "__main__":
    unittest.main(verbosity=2)
