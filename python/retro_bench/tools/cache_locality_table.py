"""The cache-locality table (issue 40 #4; scripts/cache-locality.sh): the GPU block cache's hit ratio
(`cache_hit`, mean over (layer, KV head, step)) per trace and cache size from results directories, and, for
each real trace, the synthetic layer's `stay` whose curve is closest to it (least squares over the cache
sizes). A trace is synthetic when its file name says its `stay` (`...-stay0.95.h5`), real otherwise.

    cache_locality_table.py RESULTS [RESULTS ...] [--json OUT]

Standard library only."""
import argparse
import json
import os
import re


def curves(results_dir):
    """{trace label: {cache fraction: hit ratio}} from runs.jsonl."""
    out = {}
    with open(os.path.join(results_dir, "runs.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            trace = os.path.basename(r["trace"]["path"] if isinstance(r["trace"], dict) else r["trace"])
            cache = float(r["system"]["cache"])
            out.setdefault(trace, {})[cache] = r["metrics"]["cache_hit"]["mean"]
    return out


def stay_of(trace):
    m = re.search(r"stay([0-9.]+)\.h5$", trace)
    return float(m.group(1)) if m else None


def closest(real_curve, synthetic):
    """(trace, sum of squared differences): the synthetic curve nearest the real one over their common caches."""
    dist = {t: sum((cur[c] - real_curve[c]) ** 2 for c in real_curve if c in cur) for t, cur in synthetic.items()}
    best = min(dist, key=lambda t: (dist[t], t))
    return best, dist[best]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+", help="results directories (runs.jsonl of wave with system.cache set)")
    ap.add_argument("--json", help="write the curves and the choices here")
    a = ap.parse_args()
    real, synth = {}, {}
    for d in a.results:
        for t, cur in curves(d).items():
            (synth if stay_of(t) is not None else real).setdefault(t, {}).update(cur)
    caches = sorted({c for cur in list(real.values()) + list(synth.values()) for c in cur})
    print("| trace | " + " | ".join(f"cache {100 * c:g}%" for c in caches) + " |")
    print("|---|" + "---|" * len(caches))
    rows = [(t, real[t]) for t in sorted(real)] + sorted(synth.items(), key=lambda kv: stay_of(kv[0]))
    for t, cur in rows:
        print(f"| {t} | " + " | ".join(f"{cur[c]:.3f}" if c in cur else "-" for c in caches) + " |")
    choices = {}
    if real and synth:
        print()
        for rt, rc in sorted(real.items()):
            best, d = closest(rc, synth)
            choices[rt] = {"closest": best, "stay": stay_of(best), "sum_sq": d}
            print(f"closest to {rt}: {best} (stay {stay_of(best)}; sum of squared differences {d:.4f});"
                  f" at 5%: real {rc.get(0.05, float('nan')):.3f}, synthetic {synth[best].get(0.05, float('nan')):.3f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"real": real, "synthetic": synth, "choices": choices}, f, indent=1)


if __name__ == "__main__":
    main()
