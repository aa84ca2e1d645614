#!/usr/bin/python3
"""Figures and the HTML report for retro-bench results (docs/plots.md).

    retro_plot.py plot   RESULTS_DIR [--out DIR] [--format png,pdf] [--only NAMES] [--inspect FILE]
    retro_plot.py report RESULTS_DIR [--out FILE]
    retro_plot.py list   RESULTS_DIR

Normally run through `retro-bench plot` / `retro-bench report`, with /usr/bin/python3 (Debian's
python3-matplotlib; scripts/env.sh's RETRO_PYTHON).
"""
import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from retroplot.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
