"""Offline vs online (docs/closed-loop.md): the same methods and parameter points open-loop on traces
dumped from the closed loop's own prompts, and the Spearman rank correlation, across (method, budget)
points, between each open-loop metric and each closed-loop one.

Config section "open_loop": {"steps": 16, "kinds": ["fidelity"], "layers": "all" | [l, ...], "threads": 0,
"check_tol": the dump check's tolerance (default: the dumper's, 2e-2 for float16 storage)}:
for every case of those kinds the
dumper (retro_bench.dump.dump_trace --prompt-ids, the prompt's exact token ids, no chat template added)
writes a trace of all layers with `steps` greedy decode steps into RESULTS/<name>/traces/; a replay
config with the closed loop's "methods" list runs on those traces (on `layers`: open-loop metrics are
means over (layer, head, step), a subset of layers keeps the replay affordable) (`retro-bench run`, results in
RESULTS/<name>-openloop/); offline-online.json in the closed-loop results directory holds the matched
points and the correlation table (the `offline_online` figure of retro-bench plot draws it)."""

import json
import os
import subprocess
import sys

from .. import lifeline
from .._launch import launch_command
from ..atomic import write_text
from ..runs_file import read_runs
from . import metrics, model_runner

OPEN = (("recall@100", "recall@100"), ("mass", "mass"), ("out_err", "out_err"))
# closed-loop metrics: (name, path in the run record)
CLOSED = (("kl_mean", ("fidelity", "kl_mean")), ("top1", ("fidelity", "top1")),
          ("ppl", ("fidelity", "ppl")), ("niah_accuracy", ("task", "accuracy")),
          ("agreement", ("task", "agreement_mean")))


def _canon(method, params):
    return json.dumps([method, params], sort_keys=True)


def dump_traces(cfg, cases, res_dir, python):
    ol = cfg["open_loop"]
    kinds = ol.get("kinds", ["fidelity"])
    out = []
    for c in cases:
        if c["kind"] not in kinds:
            continue
        path = os.path.join(res_dir, "traces", c["id"] + ".h5")
        out.append(path)
        if os.path.exists(path):
            continue
        os.makedirs(os.path.dirname(path), exist_ok=True)
        model = cfg["model"]
        cached = model_runner.gguf_checkpoint_cache(model) if model != "tiny-random-llama" else None
        if model == "tiny-random-llama":
            margs = ["--tiny-random-llama"]
        elif cached and os.path.isdir(cached):  # the closed loop's export of the GGUF: the GGUF's q/k layout
            margs = ["--model", cached, "--rope-layout", model_runner.gguf_identity(model)[2]]
        else:
            margs = ["--model", model]
        cmd = [*launch_command("retro_bench.dump.dump_trace", python), path, *margs,
               "--prompt-ids", os.path.join(res_dir, "prompts", c["id"] + ".json"), "--no-chat",
               "--steps", str(int(ol.get("steps", 16))), "--prefill-queries", str(int(cfg.get("prefill_queries", 64))),
               "--seed", str(int(cfg.get("seed", 0))), "--threads", str(int(cfg.get("threads", 0)))]
        if cfg.get("allow_beyond_context"):
            cmd.append("--allow-beyond-context")
        if ol.get("check_tol") is not None:
            cmd += ["--check-tol", str(float(ol["check_tol"]))]
        print(f"[closed-loop] open loop: dumping {path}", file=sys.stderr, flush=True)
        r = lifeline.run(cmd)  # holds the results lock with us, ends with us
        if r.returncode != 0:
            raise RuntimeError(f"the trace dump for case {c['id']} failed ({r.returncode}): {' '.join(cmd)}")
    return out


def run_open_loop(cfg, traces, results_root, retro_bin):
    name = cfg["name"] + "-openloop"
    ocfg = {"name": name, "description": f"open-loop replay of the closed-loop config {cfg['name']} on traces "
                                         "dumped from its prompts (docs/closed-loop.md)",
            "traces": [{"path": t} for t in traces], "layers": cfg["open_loop"].get("layers", "all"),
            "kv_heads": "all", "steps": "all",
            "threads": int(cfg.get("open_loop", {}).get("threads", 0)), "methods": cfg["methods"]}
    cpath = os.path.join(results_root, cfg["name"], "openloop-config.json")
    write_text(cpath, json.dumps(ocfg, indent=1))
    odir = os.path.join(results_root, name)
    done = os.path.join(odir, "manifest.json")
    if os.path.exists(done) and os.path.exists(os.path.join(odir, "runs.jsonl")):
        with open(done) as f:
            m = json.load(f)
        if m.get("status") == "complete" and m.get("config_source") == ocfg:  # the same replay, finished
            return read_runs(odir)
    cmd = [retro_bin, "run", cpath, "--results", results_root, "-q", "--resume" if os.path.isdir(odir) else "--force"]
    print(f"[closed-loop] open loop: {' '.join(cmd)}", file=sys.stderr, flush=True)
    r = lifeline.run(cmd, stdout=subprocess.DEVNULL)  # ends with us (its own directory, its own lock)
    if r.returncode != 0:
        raise RuntimeError(f"the open-loop run failed ({r.returncode}): {' '.join(cmd)}")
    return read_runs(odir)


def correlate(open_records, closed_records):
    """Matches (method, params) points; per (open, closed) metric pair the Spearman correlation."""
    by = {}
    for r in open_records:  # several traces: the mean over traces
        by.setdefault(_canon(r["method"], r["params"]), []).append(r)
    points = []
    for c in closed_records:
        if c["method"] == "reference":
            continue
        o = by.get(_canon(c["method"], c["params"]))
        if not o:
            continue
        p = {"label": c["label"], "method": c["method"], "exact_frac": c.get("exact_frac")}
        for name, key in OPEN:
            vals = [r["metrics"][key]["mean"] for r in o if key in r.get("metrics", {})]
            p[name] = sum(vals) / len(vals) if vals else None
        for name, path in CLOSED:
            v = c.get(path[0]) or {}
            p[name] = v.get(path[1])
        points.append(p)
    table = []
    for oname, _ in OPEN:
        for cname, _ in CLOSED:
            pts = [(p[oname], p[cname]) for p in points if p[oname] is not None and p[cname] is not None]
            rho = metrics.spearman([a for a, _ in pts], [b for _, b in pts]) if pts else None
            table.append({"open": oname, "closed": cname, "n": len(pts), "spearman": rho})
    return {"kind": "offline-online", "points": points, "table": table}


def run(cfg, cases, res_dir, results_root, closed_records, retro_bin):
    traces = dump_traces(cfg, cases, res_dir, sys.executable)
    if not traces:
        return None
    open_records = run_open_loop(cfg, traces, results_root, retro_bin)
    out = correlate(open_records, closed_records)
    out["traces"] = traces
    write_text(os.path.join(res_dir, "offline-online.json"), json.dumps(out, indent=1) + "\n")
    return out


def print_table(out):
    print("\nSpearman rank correlation, open-loop metric (rows) vs closed-loop metric (columns), "
          f"over {max(t['n'] for t in out['table'])} (method, budget) points:")
    closed = [c for c, _ in CLOSED]
    print(f"{'':12}" + "".join(f"{c:>15}" for c in closed))
    for o, _ in OPEN:
        row = {t["closed"]: t["spearman"] for t in out["table"] if t["open"] == o}
        print(f"{o:12}" + "".join(f"{row[c]:15.3f}" if row[c] is not None else f"{'-':>15}" for c in closed))
