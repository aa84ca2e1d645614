#!/usr/bin/env python3
"""Markdown table: `retro-bench inspect --json` statistics of a real trace next to one or more synthetic
ones (means, medians and p10..p90 over (layer, query head); "inside" = the synthetic mean lies within the
real trace's p10..p90 spread across heads). Used for docs/traces.md.

  compare_inspect.py REAL.json SYNTH.json [LABEL=SYNTH2.json ...] [--layers]
"""
import json
import sys

import numpy as np

STATS = [("f90", "f90 (% of tokens for 90% mass)", 100), ("n90", "n90 (tokens)", 1),
         ("top_frac_mass", "top1% mass", 1), ("static_top_frac_mass", "st1% (step 0's top-1% later)", 1),
         ("overlap", "ovl100 (consecutive top-100 overlap)", 1), ("query_cos", "qcos", 1),
         ("sink_mass", "sink (first 4 tokens)", 1), ("local_mass", "local (last 64)", 1),
         ("ood_ratio", "ood (query/key Mahalanobis)", 1), ("key_mean_ratio", "key mean / spread", 1),
         ("key_cos_near", "key locality (centered cosine, 1 apart)", 1),
         ("key_cos_far", "key locality (centered cosine, 64 apart)", 1)]


def col(j, k, scale):
    return np.array([h[k] for h in j["heads"] if h.get(k) is not None], float) * scale


def g(x):
    return f"{x:.3g}"


def main(argv):
    layers = "--layers" in argv
    argv = [a for a in argv if a != "--layers"]
    real = json.load(open(argv[0]))
    synths = []
    for a in argv[1:]:
        label, path = a.split("=", 1) if "=" in a else ("synth", a)
        synths.append((label, json.load(open(path))))
    head = "| statistic | real: mean / median (p10..p90) |"
    for label, _ in synths:
        head += f" {label}: mean / median (p10..p90) | inside? |"
    print(head)
    print("|---|---|" + "---|---|" * len(synths))
    for k, name, sc in STATS:
        r = col(real, k, sc)
        pr = np.percentile(r, [10, 90])
        row = f"| {name} | {g(r.mean())} / {g(np.median(r))} ({g(pr[0])}..{g(pr[1])}) |"
        for _, s in synths:
            v = col(s, k, sc)
            ps = np.percentile(v, [10, 90])
            inside = "yes" if pr[0] <= v.mean() <= pr[1] else "**no**"
            row += f" {g(v.mean())} / {g(np.median(v))} ({g(ps[0])}..{g(ps[1])}) | {inside} |"
        print(row)
    if layers:
        for label, j in [("real", real)] + synths:
            print(f"\n{label} per layer: f90% " + " ".join(f"{l['f90'] * 100:.1f}" for l in j["layers"]))
            print(f"{label} per layer: sink " + " ".join(f"{l['sink_mass']:.2f}" for l in j["layers"]))
            print(f"{label} per layer: local " + " ".join(f"{l['local_mass']:.2f}" for l in j["layers"]))


if __name__ == "__main__":
    main(sys.argv[1:])
