"""Exit 0 when two results directories hold the same results, timings aside (docs/cluster.md).

    same_results.py DIR_A DIR_B

Compares runs.jsonl (every record, without its write time and the measured build_ms / select_us /
attend_us), per_head.csv (without those columns) and manifest.json (without sessions, host and times)
as bytes after that removal; prints the first difference otherwise. Standard library only.
"""
import csv
import io
import json
import sys

TIMED = {"build_ms", "select_us", "attend_us"}


def runs(d):
    out = []
    with open(f"{d}/runs.jsonl") as f:
        for line in f:
            r = json.loads(line)
            r.pop("finished_at", None)
            for k in TIMED:
                r["metrics"].pop(k, None)
                r["per_layer"].pop(k, None)
            out.append(json.dumps(r, sort_keys=True))
    return out


def per_head(d):
    with open(f"{d}/per_head.csv", newline="") as f:
        rows = list(csv.reader(f))
    keep = [i for i, c in enumerate(rows[0]) if c not in TIMED]
    return [",".join(row[i] for i in keep) for row in rows]


def manifest(d):
    with open(f"{d}/manifest.json") as f:
        m = json.load(f)
    for k in ("sessions", "finished_at", "host"):
        m.pop(k, None)
    return [json.dumps(m, sort_keys=True, indent=1)]


def main():
    a, b = sys.argv[1], sys.argv[2]
    for name, get in (("runs.jsonl", runs), ("per_head.csv", per_head), ("manifest.json", manifest)):
        la, lb = get(a), get(b)
        if len(la) != len(lb):
            print(f"{name}: {len(la)} vs {len(lb)} lines")
            return 1
        for i, (x, y) in enumerate(zip(la, lb)):
            if x != y:
                print(f"{name} line {i + 1} differs:\n  {x[:400]}\n  {y[:400]}")
                return 1
    print(f"same results: {len(runs(a))} runs, {len(per_head(a)) - 1} per-head rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
