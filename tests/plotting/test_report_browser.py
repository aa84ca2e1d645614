#!/usr/bin/python3
"""The HTML report renders in a real browser: headless Chromium loads it, every embedded figure decodes
(naturalWidth > 0), the tables are in the DOM, and the figures change what is painted (screenshot with
figures vs. without). Exit code 77 (ctest SKIP_RETURN_CODE) with "SKIPPED: chromium not installed" when
no Chromium is found; scripts/setup.sh installs it."""
import os
import shutil
import subprocess
import sys
import unittest

import plot_test_util as U
from test_plot_cli import summarize

CHROMIUM = next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome"))
                 if p), None)
PROBE = ("<script>window.addEventListener('load',function(){var im=document.images;"
         "for(var i=0;i<im.length;i++){im[i].setAttribute('data-natural-width',im[i].naturalWidth);"
         "im[i].setAttribute('data-natural-height',im[i].naturalHeight);}"
         "document.body.setAttribute('data-loaded','1');});</script>")


def chromium(tmp, *args, timeout=180):
    cmd = [CHROMIUM, "--headless", "--disable-gpu", "--no-sandbox", "--disable-dev-shm-usage",
           "--no-first-run", "--hide-scrollbars", f"--user-data-dir={os.path.join(tmp, 'profile')}",
           "--virtual-time-budget=10000", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


class ReportInBrowserTest(U.TempDirMixin, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import tempfile
        cls.root = tempfile.mkdtemp(prefix="retro-plot-browser-")
        cls.results = U.copy_fixture("quickstart", cls.root)
        cls.report = os.path.join(cls.root, "report.html")
        b = U.retro_bin()
        cmd = ([b, "report"] if b else [sys.executable, "-B", *U.SCRIPT, "report"]) + \
            [cls.results, "--out", cls.report, "--inspect", U.INSPECT]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise RuntimeError(f"report failed: {r.stderr}")
        with open(cls.report, encoding="utf-8") as f:
            cls.html = f.read()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.root, ignore_errors=True)

    def test_dom_has_decoded_figures_and_tables(self):
        probe = os.path.join(self.tmp, "probe.html")
        with open(probe, "w", encoding="utf-8") as f:
            f.write(self.html.replace("</body>", PROBE + "</body>"))
        r = chromium(self.tmp, "--dump-dom", "file://" + probe)
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        dom = summarize(r.stdout)
        self.assertIn('data-loaded="1"', r.stdout, "the page's load event did not fire")
        figs = [i for i in dom.imgs if i.get("class") == "fig"]
        self.assertEqual(len(figs), 4)  # accuracy_budget, estimation, head_heatmap, sparsity_heatmap
        for img in figs:
            self.assertTrue(img["src"].startswith("data:image/png;base64,"))
            self.assertGreater(len(img["src"]), 10000)
            self.assertGreater(int(img.get("data-natural-width", 0)), 300, img.get("alt"))
            self.assertGreater(int(img.get("data-natural-height", 0)), 100, img.get("alt"))
        self.assertEqual(dom.tables.get("runs-table"), 10)
        self.assertGreater(dom.tables.get("best-table", 0), 0)
        self.assertGreater(dom.tables.get("manifest-table", 0), 0)
        for sec in ("figures", "runs", "best", "manifest"):
            self.assertIn(sec, dom.ids)

    def test_screenshot_shows_the_figures(self):
        import numpy as np
        from matplotlib import image as mpimg
        noimg = os.path.join(self.tmp, "noimg.html")
        import re
        with open(noimg, "w", encoding="utf-8") as f:
            f.write(re.sub(r'src="data:image/png;base64,[^"]*"', 'src=""', self.html))
        shots = {}
        for name, page in (("with", self.report), ("without", noimg)):
            out = os.path.join(self.tmp, f"{name}.png")
            r = chromium(self.tmp, "--window-size=1300,2200", f"--screenshot={out}", "file://" + page)
            self.assertEqual(r.returncode, 0, r.stderr[-2000:])
            shots[name] = mpimg.imread(out)[..., :3]
        a, b = shots["with"], shots["without"]
        self.assertEqual(a.shape, b.shape)
        nonwhite = float((a.min(axis=2) < 0.95).mean())
        self.assertGreater(nonwhite, 0.03, "the page is (almost) blank")
        changed = float((np.abs(a - b).max(axis=2) > 0.1).mean())
        self.assertGreater(changed, 0.03, "the figures did not change what was painted")
        # the wave colour (#0072B2) is painted in quantity only by the figures
        blue = (np.abs(a - np.array([0, 114, 178]) / 255.0).max(axis=2) < 0.06).sum()
        self.assertGreater(int(blue), 3000)


if __name__ == "__main__":
    if CHROMIUM is None:
        print("SKIPPED: chromium not installed (bash scripts/setup.sh installs the Debian package chromium)")
        sys.exit(U.SKIP)
    unittest.main(verbosity=2)
