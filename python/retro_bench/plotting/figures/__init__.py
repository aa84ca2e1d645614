"""Paper-style figures: the registry (registry.py) and one module per figure family.

    accuracy     accuracy vs. exact-token budget (Pareto fronts), recall vs. scanned keys
    ood          recall vs. scanned keys: decode queries vs. keys as queries
    wave_sweeps  the wave index's zone sizes, estimation, decode-time updates, cluster ranking
    build_cost   index build time: segment sizes, per method
    scale        cost growth with the context: build and per-step time vs. tokens (log-log)
    heads        per (layer, query head) heatmaps: output error, attention sparsity
    system       GPU block cache, modeled throughput vs. batch
    gpu          what a "backend": "cuda" run measured: step time, its phases vs. the cost model, speed-up
    closed_loop  offline vs. online: open-loop metrics against closed-loop fidelity and accuracy

Importing the package registers every figure; `FIGURES` (name -> Figure) is in registry.ORDER.
"""
from . import accuracy, build_cost, closed_loop, gpu, heads, ood, scale, system, wave_sweeps  # noqa: F401  (register the figures)
from .common import pareto_front  # noqa: F401  (public: tests)
from .registry import FIGURES, Figure, drawer, figure, figure_size, finish, render  # noqa: F401

finish()
