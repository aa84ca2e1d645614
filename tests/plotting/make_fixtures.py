#!/usr/bin/python3
"""Regenerates tests/plotting/fixtures/ from real result directories, trimmed to stay small.

    build/retro-bench run configs/quickstart.json --results /tmp/fx
    for c in configs/paper/wave-*.json; do build/retro-bench run $c --results /tmp/fx; done
    build/retro-bench inspect datasets/generated/synth-llama3-16k.h5 --step-stride 8 --json /tmp/fx/inspect16k.json
    /usr/bin/python3 tests/plotting/make_fixtures.py /tmp/fx

Trimming: numbers rounded to 6 significant digits (per_head.csv 5, parts 4); per_head.csv keeps query heads < 8 (quickstart: layers 0
and 1) or < 4; parts/ kept only for wave-updates (the per-step figure needs them); the inspect JSON keeps
query heads < 8. The ood-recall fixture is hand-written (fixtures/ood/), not produced here.
"""
import csv
import glob
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures")


def rnd(x, digits=6):
    if isinstance(x, float):
        return float(f"{x:.{digits}g}")
    if isinstance(x, dict):
        return {k: rnd(v, digits) for k, v in x.items()}
    if isinstance(x, list):
        return [rnd(v, digits) for v in x]
    return x


def rnd_cell(c):
    try:
        v = float(c)
    except ValueError:
        return c
    return c if c.lstrip("-").isdigit() else f"{v:.5g}"


def dump(obj, path, lines=False):
    with open(path, "w", encoding="utf-8") as f:
        if lines:
            for o in obj:
                f.write(json.dumps(rnd(o), separators=(",", ":"), sort_keys=True) + "\n")
        else:
            json.dump(rnd(obj), f, indent=1, sort_keys=True)
            f.write("\n")


def trim(src, name, max_qhead, parts=False):
    s, d = os.path.join(src, name), os.path.join(OUT, name)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    with open(os.path.join(s, "manifest.json"), encoding="utf-8") as f:
        dump(json.load(f), os.path.join(d, "manifest.json"))
    with open(os.path.join(s, "runs.jsonl"), encoding="utf-8") as f:
        dump([json.loads(l) for l in f if l.strip()], os.path.join(d, "runs.jsonl"), lines=True)
    with open(os.path.join(s, "per_head.csv"), newline="", encoding="utf-8") as f, \
            open(os.path.join(d, "per_head.csv"), "w", newline="", encoding="utf-8") as g:
        r = csv.reader(f)
        w = csv.writer(g, lineterminator="\n")
        head = next(r)
        w.writerow(head)
        qi = head.index("q_head")
        for row in r:
            if int(row[qi]) < max_qhead:
                w.writerow([rnd_cell(c) for c in row])
    if parts:
        for p in sorted(glob.glob(os.path.join(s, "parts", "*", "*.json"))):
            rel = os.path.relpath(p, s)
            os.makedirs(os.path.dirname(os.path.join(d, rel)), exist_ok=True)
            with open(p, encoding="utf-8") as f:
                obj = json.load(f)
            with open(os.path.join(d, rel), "w", encoding="utf-8") as g:
                json.dump(rnd(obj, 4), g, separators=(",", ":"), sort_keys=True)


def main(src):
    trim(src, "quickstart", 8)
    for n in ("wave-zones", "wave-estimation", "wave-segments"):
        trim(src, n, 4)
    trim(src, "wave-updates", 4, parts=True)
    insp = os.path.join(src, "inspect16k.json")
    if os.path.exists(insp):
        with open(insp, encoding="utf-8") as f:
            obj = json.load(f)
        obj["heads"] = [h for h in obj["heads"] if h["q_head"] < 8]
        dump(obj, os.path.join(OUT, "inspect-synth-llama3-16k.json"))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/plotres")
