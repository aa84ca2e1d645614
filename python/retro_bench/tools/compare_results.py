"""Compares two results directories record by record: every field of every runs.jsonl record, metric
statistics included, must be identical, except what measures time or names the machine or the build.

    PYTHONPATH=python python3 -m retro_bench.tools.compare_results results-before/quickstart results-after/quickstart
    PYTHONPATH=python python3 -m retro_bench.tools.compare_results /tmp/before /tmp/after  # every config directory under both

Records are matched by run_id (which hashes trace, method, parameters, metric options and steps).
Ignored: measured times (metrics and fields ending in _ms or _us, except the cost model's model_*),
timestamps (*_at), elapsed*, host, revision. Exit status 1 when anything differs or a record is
missing on one side, so the script can gate a refactoring.
"""
import os
import re
import sys

from ..runs_file import read_runs

MEASURED = re.compile(r"(_ms|_us)$")
IGNORED_FIELDS = {"host", "revision"}


def ignored(name):
    if name in IGNORED_FIELDS or name.endswith("_at") or name.startswith("elapsed"):
        return True
    return bool(MEASURED.search(name)) and not name.startswith("model_")


def strip(x):
    """x without the ignored keys, at every depth."""
    if isinstance(x, dict):
        return {k: strip(v) for k, v in x.items() if not ignored(k)}
    if isinstance(x, list):
        return [strip(v) for v in x]
    return x


def diff(a, b, path, out):
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                out.append(f"{path}.{k}: only in {'after' if k not in a else 'before'}")
            else:
                diff(a[k], b[k], f"{path}.{k}", out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            diff(x, y, f"{path}[{i}]", out)
    elif a != b:
        out.append(f"{path}: {a!r} != {b!r}")


def load(d):
    return {r["run_id"]: r for r in read_runs(d)}


def count_values(x):
    if isinstance(x, dict):
        return sum(count_values(v) for v in x.values())
    if isinstance(x, list):
        return sum(count_values(v) for v in x)
    return 1


def compare(before, after):
    a, b = load(before), load(after)
    problems = [f"{rid}: only in {before}" for rid in sorted(set(a) - set(b))]
    problems += [f"{rid}: only in {after}" for rid in sorted(set(b) - set(a))]
    values = 0
    for rid in sorted(set(a) & set(b)):
        x, y = strip(a[rid]), strip(b[rid])
        values += count_values(x)
        diff(x, y, rid, problems)
    print(f"{os.path.basename(os.path.normpath(before))}: {len(set(a) & set(b))} record(s) matched, "
          f"{values} values compared, {len(problems)} difference(s)")
    for p in problems[:50]:
        print("  " + p)
    return not problems


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    before, after = sys.argv[1:]
    if os.path.exists(os.path.join(before, "runs.jsonl")):
        pairs = [(before, after)]
    else:
        names = sorted(n for n in os.listdir(before) if os.path.exists(os.path.join(before, n, "runs.jsonl")))
        if not names:
            sys.exit(f"compare-results: no runs.jsonl in {before} or its sub-directories")
        pairs = [(os.path.join(before, n), os.path.join(after, n)) for n in names]
    ok = True
    for x, y in pairs:
        if not os.path.exists(os.path.join(y, "runs.jsonl")):
            print(f"{os.path.basename(x)}: missing in {y}")
            ok = False
            continue
        ok = compare(x, y) and ok
    print("identical (timings, timestamps, host and revision aside)" if ok else "DIFFERENT")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
