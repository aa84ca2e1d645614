"""The cache-locality table (issue 40 #4; scripts/cache-locality.sh): the GPU block cache's hit ratio
(`cache_hit`, mean over (layer, KV head, step)) per trace and cache size from results directories, and the
synthetic layer's `stay` whose curve is closest to the real trace's (least squares over the cache sizes).

    cache_locality_table.py REAL_RESULTS SYNTHETIC_RESULTS [--json OUT]

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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("real")
    ap.add_argument("synthetic")
    ap.add_argument("--json", help="write the curves and the choice here")
    a = ap.parse_args()
    real, synth = curves(a.real), curves(a.synthetic)
    caches = sorted({c for cur in list(real.values()) + list(synth.values()) for c in cur})
    print("| trace | " + " | ".join(f"cache {100 * c:g}%" for c in caches) + " |")
    print("|---|" + "---|" * len(caches))
    rows = [(t, real[t]) for t in sorted(real)] + sorted(synth.items(), key=lambda kv: stay_of(kv[0]) or 0)
    for t, cur in rows:
        print(f"| {t} | " + " | ".join(f"{cur[c]:.3f}" if c in cur else "-" for c in caches) + " |")
    (rt, rc), = real.items() if len(real) == 1 else [(None, None)]
    if rc is None:
        return
    dist = {t: sum((cur[c] - rc[c]) ** 2 for c in caches if c in cur and c in rc) for t, cur in synth.items()}
    best = min(dist, key=dist.get)
    print(f"\nclosest to {rt}: {best} (stay {stay_of(best)}; sum of squared differences {dist[best]:.4f});"
          f" at 5%: real {rc.get(0.05, float('nan')):.3f}, synthetic {synth[best].get(0.05, float('nan')):.3f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"real": {rt: rc}, "synthetic": synth, "closest": best, "stay": stay_of(best)}, f, indent=1)


if __name__ == "__main__":
    main()
