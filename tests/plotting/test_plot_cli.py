#!/usr/bin/python3
"""`retro-bench plot` and `retro-bench report` end to end on fixture results (RETRO_BIN: the binary)."""
import base64
import glob
import json
import os
import re
import stat
import sys
import unittest
from html.parser import HTMLParser

import plot_test_util as U
from retro_bench.plotting import figures as F
from retro_bench.plotting import results as R

BIN = U.retro_bin()
PNG = b"\x89PNG\r\n\x1a\n"


class DomSummary(HTMLParser):
    """imgs (attrs), tables (id -> number of body rows), ids."""

    def __init__(self):
        super().__init__()
        self.imgs, self.tables, self.ids = [], {}, set()
        self._table, self._in_tbody = None, False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "img":
            self.imgs.append(a)
        elif tag == "table":
            self._table = a.get("id", f"table{len(self.tables)}")
            self.tables[self._table] = 0
        elif tag == "tbody":
            self._in_tbody = True
        elif tag == "tr" and self._in_tbody and self._table:
            self.tables[self._table] += 1

    def handle_endtag(self, tag):
        if tag == "tbody":
            self._in_tbody = False
        elif tag == "table":
            self._table = None


def summarize(html):
    p = DomSummary()
    p.feed(html)
    return p


def applicable(name, extra=()):
    res = R.load(U.fixture(name), extra)
    return [n for n, f in F.FIGURES.items() if f.applies(res)]


@unittest.skipIf(BIN is None, "RETRO_BIN not set and no build/retro-bench")
class PlotCommandTest(U.TempDirMixin, unittest.TestCase):
    def plot(self, *args, env=None):
        return U.run([BIN, "plot", *args], env=env)

    def test_writes_png_and_pdf_for_applicable_figures(self):
        for name in ("quickstart", "wave-zones", "wave-estimation", "wave-segments", "wave-updates", "wave-cache",
                     "throughput", "baselines2", "trace-figures", "centroid-rank", "gpu-run", "gpu-run-kernels",
                     "closed-loop-tiny"):
            d = U.copy_fixture(name, self.tmp)
            r = self.plot(d)
            self.assertEqual(r.returncode, 0, r.stderr)
            figs = os.path.join(d, "figures")
            want = applicable(name)
            for n in F.FIGURES:
                for ext in ("png", "pdf"):
                    p = os.path.join(figs, f"{n}.{ext}")
                    self.assertEqual(os.path.exists(p), n in want, (name, p))
                if n in want:
                    with open(os.path.join(figs, f"{n}.png"), "rb") as f:
                        self.assertEqual(f.read(8), PNG)
                    with open(os.path.join(figs, f"{n}.pdf"), "rb") as f:
                        self.assertEqual(f.read(5), b"%PDF-")
                    self.assertGreater(os.path.getsize(os.path.join(figs, f"{n}.png")), 5000)
                    with open(os.path.join(figs, f"{n}.json")) as f:
                        self.assertEqual(json.load(f)["series"], json.loads(json.dumps(
                            F.FIGURES[n].data(R.load(U.fixture(name))))))
                else:
                    self.assertIn(f"skip {n}: needs", r.stderr)
            with open(os.path.join(figs, "index.json")) as f:
                idx = json.load(f)
            self.assertEqual([m["name"] for m in idx["made"]], want)
            self.assertEqual(len(idx["made"]) + len(idx["skipped"]), len(F.FIGURES))
            self.assertEqual(glob.glob(os.path.join(figs, "*.tmp-*")) + glob.glob(os.path.join(figs, ".*")), [])

    def test_gpu_run_figures(self):
        # a "backend": "cuda" run gets exactly the three GPU figures; a CPU run none of them
        gpu = ["gpu_step_time", "gpu_phases", "gpu_speedup"]
        for name in ("gpu-run", "gpu-run-kernels"):
            d = U.copy_fixture(name, self.tmp)
            r = self.plot(d, "--format", "png")
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(os.path.join(d, "figures", "index.json")) as f:
                self.assertEqual([m["name"] for m in json.load(f)["made"]], gpu)
            with open(os.path.join(d, "figures", "gpu_speedup.json")) as f:
                s = json.load(f)["series"]
            self.assertEqual([x["kernel"] for x in s["series"]],
                             ["own"] if name == "gpu-run" else ["flashinfer", "own"])
        d = U.copy_fixture("quickstart", self.tmp)
        r = self.plot(d, "--format", "png", "--only", ",".join(gpu))
        self.assertEqual(r.returncode, 0, r.stderr)
        for n in gpu:
            self.assertIn(f"skip {n}: needs records of a \"backend\": \"cuda\" run", r.stderr)
            self.assertFalse(os.path.exists(os.path.join(d, "figures", f"{n}.png")))

    def test_closed_loop_directories(self):
        # two closed-loop directories (two models): the closed-loop figures with a row of panels per model,
        # written into the first; without task cases the accuracy figure is skipped with what it needs
        a, b = U.copy_fixture("closed-loop-smollm2", self.tmp), U.copy_fixture("closed-loop-tiny", self.tmp)
        r = self.plot(a, b, "--format", "png")
        self.assertEqual(r.returncode, 0, r.stderr)
        figs = ["closed_loop_kl", "closed_loop_top1", "closed_loop_accuracy"]
        with open(os.path.join(a, "figures", "index.json")) as f:
            self.assertEqual([m["name"] for m in json.load(f)["made"]], figs)
        self.assertFalse(os.path.exists(os.path.join(b, "figures")))
        for n in figs:
            with open(os.path.join(a, "figures", f"{n}.png"), "rb") as f:
                self.assertEqual(f.read(8), PNG)
            with open(os.path.join(a, "figures", f"{n}.json")) as f:
                s = json.load(f)["series"]
            self.assertEqual([(p["model_label"], p["context"]) for p in s["panels"]],
                             [("SmolLM2-135M-Instruct", 200), ("SmolLM2-135M-Instruct", 400),
                              ("tiny-random-llama", 200), ("tiny-random-llama", 400)])
            for p in s["panels"]:
                self.assertEqual([(x["method"], len(x["points"])) for x in p["series"]],
                                 [("streaming", 2), ("oracle_topk", 2)])
        runs = list(U.runs_by_id("closed-loop-tiny").values())  # a fidelity-only closed loop: no task results
        with open(os.path.join(b, "runs.jsonl"), "w") as f:
            f.write("".join(json.dumps({k: v for k, v in r.items() if k != "task"}) + "\n" for r in runs))
        with open(os.path.join(b, "manifest.json")) as f:
            man = json.load(f)
        man["cases"] = [c for c in man["cases"] if c["kind"] == "fidelity"]
        with open(os.path.join(b, "manifest.json"), "w") as f:
            json.dump(man, f)
        r = self.plot(b, "--format", "png")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("skip closed_loop_accuracy: needs closed-loop runs with scored task results", r.stderr)
        self.assertTrue(os.path.exists(os.path.join(b, "figures", "closed_loop_kl.png")))
        self.assertFalse(os.path.exists(os.path.join(b, "figures", "closed_loop_accuracy.png")))
        r = self.plot(b, os.path.join(self.tmp, "nope"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("nope does not exist", r.stderr)

    def test_out_format_inspect_only(self):
        d = U.copy_fixture("quickstart", self.tmp)
        out = os.path.join(self.tmp, "figs")
        r = self.plot(d, "--out", out, "--format", "svg", "--inspect", U.INSPECT,
                      "--only", "sparsity_heatmap,zone_sweeps")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(sorted(os.listdir(out)), ["index.json", "sparsity_heatmap.json", "sparsity_heatmap.svg"])
        self.assertIn("skip zone_sweeps", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(d, "figures")))

    def test_ood_only_directory(self):
        d = U.copy_fixture("ood", self.tmp)
        r = self.plot(d, "--format", "png")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(os.path.exists(os.path.join(d, "figures", "ood_recall.png")))

    def test_bad_input(self):
        d = U.copy_fixture("quickstart", self.tmp)
        cases = [
            ([os.path.join(self.tmp, "nope")], {}, "does not exist"),
            ([d, "--format", "png,gif"], {}, "--format"),
            ([d, "--only", "nonsense"], {}, "unknown figure"),
            ([d, "--inspect", os.path.join(self.tmp, "none.json")], {}, "no such file"),
            ([d], {"RETRO_PYTHON": "/nonexistent/python3"}, "RETRO_PYTHON"),
            ([d], {"RETRO_PYTHON_PACKAGE": "/nonexistent/retro_bench"}, "RETRO_PYTHON_PACKAGE"),
        ]
        for args, env, msg in cases:
            r = self.plot(*args, env=env)
            self.assertEqual(r.returncode, 2, (args, env, r.stderr))
            self.assertIn(msg, r.stderr)
            self.assertIn("error", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(d, "figures", "accuracy_budget.png")))

    def test_missing_matplotlib_is_a_clear_error(self):
        fake = os.path.join(self.tmp, "python-without-site")
        with open(fake, "w") as f:  # -S: no site-packages, so no Debian matplotlib
            f.write(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")
        os.chmod(fake, os.stat(fake).st_mode | stat.S_IEXEC)
        d = U.copy_fixture("quickstart", self.tmp)
        r = self.plot(d, env={"RETRO_PYTHON": fake})
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("matplotlib is not available", r.stderr)
        self.assertIn("scripts/setup.sh", r.stderr)

    def test_package_override(self):
        """RETRO_PYTHON_PACKAGE names the package retro-bench runs (here the source tree's, which has no
        compiled core: plotting needs none)."""
        d = U.copy_fixture("wave-segments", self.tmp)
        r = self.plot(d, "--only", "segments", env={"RETRO_PYTHON_PACKAGE": os.path.dirname(U.SCRIPT[0])})
        self.assertEqual(r.returncode, 0, r.stderr)


@unittest.skipIf(BIN is None, "RETRO_BIN not set and no build/retro-bench")
class CentroidRankCommandTest(U.TempDirMixin, unittest.TestCase):
    """`retro-bench centroid-rank` on a small synthetic trace, then `retro-bench plot` on its JSON."""

    def test_curves_and_figure(self):
        trace = os.path.join(self.tmp, "tiny.h5")
        r = U.run([BIN, "synth", trace, "--prompt-len", "4096", "--steps", "4", "--layers", "1",
                   "--prefill-queries", "0"])
        self.assertEqual(r.returncode, 0, r.stderr)
        d = os.path.join(self.tmp, "cr")
        os.makedirs(d)
        out = os.path.join(d, "centroid-rank-tiny.json")
        r = U.run([BIN, "centroid-rank", trace, "--kv-heads", "0,1", "--step-stride", "2", "--json", out])
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(out) as f:
            obj = json.load(f)
        self.assertEqual(obj["kind"], "centroid-rank")
        self.assertEqual(obj["clusters"], round((4096 - 4 - 64) / 16))  # sink 4 and window 64 stay out
        self.assertEqual(obj["queries_per_head"], 2 * 4)  # steps 0 and 2, four query heads per KV head
        self.assertEqual([s["kind"] for s in obj["series"]], ["true", "estimate", "oracle"])
        ranks = obj["series"][0]["rank"]
        self.assertEqual((ranks[0], ranks[-1]), (1, obj["clusters"]))
        self.assertEqual(ranks, sorted(set(ranks)))
        true, est, orc = (s["cum_attention"] for s in obj["series"])
        for ys in (true, est, orc):
            self.assertEqual(ys, sorted(ys))  # cumulative
        for a, b, c in zip(est, true, orc):
            self.assertLessEqual(a, b + 1e-9)
            self.assertLessEqual(b, c + 1e-9)
        self.assertAlmostEqual(true[-1], obj["clustered"], places=9)
        self.assertAlmostEqual(orc[-1], obj["clustered"], places=9)
        self.assertTrue(0.0 < obj["clustered"] < 1.0)
        r = U.run([BIN, "plot", d, "--format", "png"])
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(d, "figures", "centroid_rank.png"), "rb") as f:
            self.assertEqual(f.read(8), PNG)
        r = U.run([BIN, "centroid-rank", trace, "--kv-heads", "9"])
        self.assertEqual(r.returncode, 2, r.stderr)


@unittest.skipIf(BIN is None, "RETRO_BIN not set and no build/retro-bench")
class ReportCommandTest(U.TempDirMixin, unittest.TestCase):
    def report(self, name, *args):
        d = U.copy_fixture(name, self.tmp)
        r = U.run([BIN, "report", d, *args])
        self.assertEqual(r.returncode, 0, r.stderr)
        out = args[args.index("--out") + 1] if "--out" in args else os.path.join(d, "report.html")
        with open(out, encoding="utf-8") as f:
            return f.read(), d

    def test_quickstart_report(self):
        html, d = self.report("quickstart", "--inspect", U.INSPECT)
        dom = summarize(html)
        want = applicable("quickstart", [U.INSPECT])
        self.assertIn("sparsity_heatmap", want)
        # every applicable figure embedded as a decodable PNG
        figs = [i for i in dom.imgs if i.get("class") == "fig"]
        self.assertEqual(len(figs), len(want))
        for n in want:
            self.assertIn(f"fig-{n}", dom.ids)
        for img in figs:
            src = img["src"]
            self.assertTrue(src.startswith("data:image/png;base64,"))
            png = base64.b64decode(src.split(",", 1)[1])
            self.assertEqual(png[:8], PNG)
            self.assertGreater(len(png), 5000)
        # tables: one row per run, best per budget, manifest
        self.assertEqual(dom.tables["runs-table"], 10)
        self.assertGreater(dom.tables["best-table"], 5)
        self.assertGreater(dom.tables["manifest-table"], 8)
        self.assertGreater(dom.tables["metrics-table"], 10)
        with open(os.path.join(d, "manifest.json")) as f:
            man = json.load(f)
        self.assertIn(html_escape(man["host"]["blas"]), html)
        self.assertIn(man["host"]["git_revision"], html)
        self.assertIn('id="config-source"', html)
        self.assertNotIn("http://", re.sub(r'xmlns="http://[^"]*"', "", html))  # self-contained
        self.assertNotIn("https://", html)

    def test_report_says_where_it_ran(self):
        """The manifest's instruction sets and library versions (issue 42 #6) are rows of the report."""
        from types import SimpleNamespace
        from retro_bench.plotting.report import manifest_html
        host = {"hostname": "h", "blas": "OpenBLAS (x)", "cpu_flags": ["avx2", "avx512f"],
                "versions": {"faiss": "1.7.3", "hdf5": "1.10.8", "cuda": "not built", "torch": "2.5.1"}}
        html = manifest_html(SimpleNamespace(manifest={"name": "x", "host": host}))
        self.assertIn("instruction sets", html)
        self.assertIn("avx2, avx512f", html)
        self.assertIn("faiss 1.7.3, hdf5 1.10.8, cuda not built, torch 2.5.1", html)
        self.assertNotIn("&quot;faiss&quot;", html)  # a row of its own, not the raw JSON of an unknown key

    def test_best_per_budget(self):
        from retro_bench.plotting.report import best_per_budget
        res = R.load(U.fixture("quickstart"))
        best, rk = best_per_budget(res)
        self.assertEqual(rk, "recall@100")
        by = {(b["bin"], b["method"]): b for b in best}
        # oracle k=256 (1.56%) is alone in the 1-2% bin; wave's two runs (2.2%) share the 2-5% bin
        b = by[((0.01, 0.02), "oracle_topk")]
        self.assertEqual(b["by_err"]["params"]["k"], 256)
        w = by[((0.02, 0.05), "wave")]
        self.assertEqual(w["n"], 2)
        self.assertEqual(w["by_err"]["params"]["estimation"], 0.232)  # lower out_err
        for b in best:
            lo, hi = b["bin"]
            for r in (b["by_err"], b["by_recall"]):
                self.assertTrue(lo < r["metrics"]["exact_frac"]["mean"] <= hi)

    def test_every_fixture_and_out(self):
        for name in ("wave-zones", "wave-estimation", "wave-segments", "wave-updates", "wave-cache", "throughput",
                     "baselines2", "gpu-run", "gpu-run-kernels"):
            out = os.path.join(self.tmp, f"{name}.html")
            html, _ = self.report(name, "--out", out)
            dom = summarize(html)
            self.assertEqual(len([i for i in dom.imgs if i.get("class") == "fig"]), len(applicable(name)))
            self.assertEqual(dom.tables["runs-table"], len(U.runs_by_id(name)))
            if name.startswith("gpu-run"):  # the GPU figures, and the runs told apart by batch and kernel
                for n in ("gpu_step_time", "gpu_phases", "gpu_speedup"):
                    self.assertIn(f"fig-{n}", dom.ids)
                self.assertIn("GPU step µs", html)
                self.assertIn("batch=64", html)
                self.assertEqual("kernel=flashinfer" in html, name == "gpu-run-kernels")
                self.assertIn("kernel=own", html)
        # closed-loop directories: the closed-loop figures, and the revision not said to be "?"
        out = os.path.join(self.tmp, "cl.html")
        a = U.copy_fixture("closed-loop-smollm2", self.tmp)
        b = U.copy_fixture("closed-loop-tiny", self.tmp)
        r = U.run([BIN, "report", a, b, "--out", out])
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(out, encoding="utf-8") as f:
            html = f.read()
        dom = summarize(html)
        self.assertEqual(sorted(i for i in dom.ids if i.startswith("fig-")),
                         ["fig-closed_loop_accuracy", "fig-closed_loop_kl", "fig-closed_loop_top1"])
        self.assertEqual(dom.tables["closed-loop-table"], 10)  # reference + 4 runs, per model
        self.assertIn("models SmolLM2-135M-Instruct, tiny-random-llama", html)
        self.assertIn("revision not recorded", html)
        self.assertNotIn("revision ?", html)
        # a directory with only trace-level JSON (no runs, no manifest) still reports
        html, _ = self.report("trace-figures")
        dom = summarize(html)
        self.assertEqual(len([i for i in dom.imgs if i.get("class") == "fig"]), 1)
        self.assertIn("No manifest.json", html)


def html_escape(s):
    import html
    return html.escape(s, quote=True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
