"""Loading a retro-bench results directory (docs/results.md) into plain Python structures.

Nothing here imports matplotlib or numpy: the figure data extraction and the tests run on this alone.
"""
import csv
import glob
import json
import math
import os

from ..runs_file import read_runs


class ResultsError(Exception):
    """A results directory is missing, unreadable or holds no run records."""


def _read_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise ResultsError(f"cannot read {path}: {e}") from e


def _num(s):
    if s is None or s == "":
        return None
    try:
        x = float(s)
    except ValueError:
        return s
    return x


def _canon(v):
    """A hashable, order-independent key for a parameter value."""
    return json.dumps(v, sort_keys=True)


def classify_extra(path, obj):
    """Which kind of extra JSON a file in the results directory is: 'inspect' (retro-bench inspect
    --json), 'ood_recall' (retro-bench ood-recall), 'centroid_rank', or None."""
    if not isinstance(obj, dict):
        return None
    base = os.path.basename(path).lower().replace("_", "-")
    kind = str(obj.get("kind", obj.get("type", ""))).lower().replace("_", "-")
    if "info" in obj and "heads" in obj and "trace" in obj:
        return "inspect"
    mean = obj.get("mean")
    if isinstance(mean, list) and mean and isinstance(mean[0], dict) and "recall_decode" in mean[0]:
        return "ood_recall"  # retro-bench ood-recall TRACE --json FILE
    if kind.startswith("ood-recall") or base.startswith("ood-recall") or base.startswith("ood"):
        return "ood_recall"
    if kind.startswith("centroid-rank") or base.startswith("centroid-rank"):
        return "centroid_rank"
    if base.startswith("inspect"):
        return "inspect"
    return None


class Results:
    """One results directory: manifest, run records, per-head means, optional extra JSON files."""

    def __init__(self, path, extra_files=(), others=()):
        self.path = os.path.abspath(path)
        if not os.path.isdir(self.path):
            raise ResultsError(f"results directory {path} does not exist (run `retro-bench run CONFIG` first)")
        mpath = os.path.join(self.path, "manifest.json")
        self.manifest = _read_json(mpath) if os.path.exists(mpath) else {}
        self.runs = self._load_runs()
        self.per_head = self._load_per_head()
        self.extras = {"inspect": [], "ood_recall": [], "centroid_rank": []}
        files = sorted(glob.glob(os.path.join(self.path, "*.json")))
        files = [f for f in files if os.path.basename(f) != "manifest.json"] + list(extra_files)
        for f in files:
            obj = _read_json(f)
            kind = classify_extra(f, obj)
            if kind is None and f in extra_files:
                raise ResultsError(f"{f}: not an inspect, ood-recall or centroid-rank JSON file")
            if kind:
                obj = dict(obj)
                obj["_file"] = f
                self.extras[kind].append(obj)
        if not self.runs and not any(self.extras.values()):
            raise ResultsError(f"{path} holds no run records (runs.jsonl or runs/*.json) and no extra JSON")
        self._parts_cache = {}
        # more results directories read with this one (closed-loop figures and tables across models:
        # `retro-bench plot DIR OTHER...`); the open-loop figures read this directory alone
        self.others = [o if isinstance(o, Results) else Results(o) for o in others]

    # ---- loading ----
    def _load_runs(self):
        runs = []
        jl = os.path.join(self.path, "runs.jsonl")
        if os.path.exists(jl):
            try:
                runs = read_runs(self.path)
            except ValueError as e:
                raise ResultsError(str(e)) from e
        else:
            for p in sorted(glob.glob(os.path.join(self.path, "runs", "*.json"))):
                runs.append(_read_json(p))
            runs.sort(key=lambda r: r.get("index", 0))
            if not runs:
                runs = self._closed_loop_runs_in_progress()
        cfg_runs = (self.manifest.get("config") or {}).get("runs") or []
        for r in runs:
            r.setdefault("params", {})
            r.setdefault("metrics", {})
            if not isinstance(r.get("system"), dict):
                r["system"] = self._system_point(r, cfg_runs)
        return runs

    def _closed_loop_runs_in_progress(self):
        """A closed-loop grid still running (or sharded, its last shard not done) has part files but no
        runs.jsonl yet: one record per run of the manifest that has part files (the reference first), marked
        complete false; the closed-loop figures compute their points from the part files
        (plotting/closed.py). [] for any other directory."""
        m = self.manifest
        if m.get("experiment") != "closed-loop":
            return []
        runs = [{"run_id": "reference", "method": "reference", "label": "full attention (the model's own, eager)"}]
        runs += [{"run_id": r.get("id"), "method": r.get("method"), "params": r.get("params") or {},
                  "label": r.get("label") or r.get("method")} for r in (m.get("resolved") or {}).get("runs") or []]
        out = []
        for r in runs:
            if r["run_id"] and glob.glob(os.path.join(self.path, "parts", r["run_id"], "*.json")):
                r.update(complete=False, in_progress=True)  # the model: the manifest's (closed.model_of)
                out.append(r)
        return out

    @staticmethod
    def _system_point(r, cfg_runs):
        """The run's system-model point ("system": cache, policy, ...): from the resolved config in the
        manifest (records are in config order: index = trace * runs + run), else from the label's
        '@system(k=v,...)' suffix; {} when the config has no "system" key."""
        i = r.get("index")
        if cfg_runs and isinstance(i, int):
            c = cfg_runs[i % len(cfg_runs)]
            if c.get("method") == r.get("method") and c.get("params") == r.get("params"):
                return dict(c.get("system") or {})
        label = r.get("label", "")
        j = label.find("@system(")
        if j < 0:
            return {}
        body = label[j + len("@system("):]
        end = body.find(")@")  # a later suffix, e.g. '@cuda(batch=8)' of backend "cuda" runs
        body = body[:end] if end >= 0 else (body[:-1] if body.endswith(")") else body)
        out = {}
        for kv in body.split(","):
            k, _, v = kv.partition("=")
            try:
                out[k] = json.loads(v)
            except ValueError:
                out[k] = v
        return out

    def _load_per_head(self):
        p = os.path.join(self.path, "per_head.csv")
        if not os.path.exists(p):
            return []
        rows = []
        with open(p, newline="", encoding="utf-8") as f:
            for row in csv.DictReader(f):
                out = {}
                for k, v in row.items():
                    if k in ("run_id", "method", "trace"):
                        out[k] = v
                    elif k == "params":
                        out[k] = json.loads(v) if v else {}
                    elif k in ("layer", "kv_head", "q_head"):
                        out[k] = int(v)
                    else:
                        out[k] = _num(v)
                rows.append(out)
        return rows

    # ---- manifest ----
    @property
    def name(self):
        return self.manifest.get("name") or os.path.basename(self.path.rstrip("/"))

    @property
    def config_source(self):
        return self.manifest.get("config_source") or {}

    @property
    def figure_note(self):
        return self.config_source.get("figure") or self.manifest.get("config", {}).get("figure")

    @property
    def description(self):
        return self.config_source.get("description") or self.manifest.get("config", {}).get("description", "")

    def metric_info(self, name):
        for m in self.manifest.get("metrics", []):
            if m.get("name") == name:
                return m
        return None

    # ---- runs ----
    def methods(self):
        """Method names in order of first appearance."""
        seen = []
        for r in self.runs:
            if r.get("method") not in seen:
                seen.append(r.get("method"))
        return seen

    def runs_of(self, method):
        return [r for r in self.runs if r.get("method") == method]

    def has_metric(self, name):
        return any(metric(r, name) is not None for r in self.runs)

    def recall_metric(self, prefer=100):
        """The recall@k metric to plot: recall@`prefer` if present, else the k closest to it."""
        ks = set()
        for r in self.runs:
            for m in r.get("metrics", {}):
                if m.startswith("recall@"):
                    try:
                        ks.add(int(m.split("@", 1)[1]))
                    except ValueError:
                        pass
        if not ks:
            return None
        k = min(ks, key=lambda x: (abs(math.log(x / prefer)), x))
        return f"recall@{k}"

    def varying_params(self, method):
        """Parameter names whose value differs between this method's runs, in key order."""
        runs = self.runs_of(method)
        names = []
        for r in runs:
            for k in r.get("params", {}):
                if k not in names:
                    names.append(k)
        out = []
        for k in names:
            vals = {_canon(r.get("params", {}).get(k)) for r in runs}
            if len(vals) > 1:
                out.append(k)
        return out

    def varying_system(self, method):
        """System-model keys (cache, policy, ...) whose value differs between this method's runs."""
        runs = self.runs_of(method)
        names = []
        for r in runs:
            for k in r.get("system", {}):
                if k not in names:
                    names.append(k)
        return [k for k in names if len({_canon(r.get("system", {}).get(k)) for r in runs}) > 1]

    def short_label(self, run, with_method=True):
        """'oracle_topk k=64': the method and the parameters (and system-model settings) that vary
        between its runs here."""
        p = run.get("params", {})
        parts = [f"{k}={fmt_value(p.get(k))}" for k in self.varying_params(run.get("method"))]
        sy = run.get("system", {})
        parts += [f"{k}={fmt_value(sy.get(k))}" for k in self.varying_system(run.get("method"))]
        if is_cuda_run(run):  # backend "cuda": the batch, and full attention's kernel
            parts.append(f"batch={cuda_batch(run)}")
            if cuda_kernel(run):
                parts.append(f"kernel={cuda_kernel(run)}")
        if len(self.traces()) > 1:
            parts.append(os.path.basename(run.get("trace", "")))
        s = " ".join(parts)
        if not with_method:
            return s or "defaults"
        return f"{run.get('method')} {s}".strip()

    def traces(self):
        seen = []
        for r in self.runs:
            if r.get("trace") not in seen:
                seen.append(r.get("trace"))
        return seen

    def prompt_len(self):
        for r in self.runs:
            if r.get("prompt_len"):
                return int(r["prompt_len"])
        for t in self.manifest.get("traces", []):
            if t.get("prompt_len"):
                return int(t["prompt_len"])
        return None

    # ---- parts (per step samples) ----
    def parts(self, run_id):
        """The part files of one run: list of dicts (layer, kv_head, q_heads, steps, q_metrics, kv_metrics)."""
        if run_id not in self._parts_cache:
            files = sorted(glob.glob(os.path.join(self.path, "parts", run_id, "L*_H*.json")))
            self._parts_cache[run_id] = [_read_json(f) for f in files]
        return self._parts_cache[run_id]

    def per_step(self, run_id, name):
        """Mean of one metric per decode step over every (layer, head) of the run: {step: mean}, from
        parts/. Empty when the run has no part files."""
        sums, counts = {}, {}
        for part in self.parts(run_id):
            steps = part.get("steps", [])
            if name in part.get("q_metrics", {}):
                rows = part["q_metrics"][name]
            elif name in part.get("kv_metrics", {}):
                rows = [part["kv_metrics"][name]]
            else:
                continue
            for row in rows:
                for s, v in zip(steps, row):
                    if v is None or (isinstance(v, float) and not math.isfinite(v)):
                        continue
                    sums[s] = sums.get(s, 0.0) + v
                    counts[s] = counts.get(s, 0) + 1
        return {s: sums[s] / counts[s] for s in sorted(sums)}


def metric(run, name, stat="mean"):
    """A run's aggregate of one metric (None when absent or not finite)."""
    m = run.get("metrics", {}).get(name)
    if not isinstance(m, dict):
        return None
    v = m.get(stat)
    if v is None:
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def is_cuda_run(run):
    """A record of `"backend": "cuda"` (docs/cuda.md): measured on a GPU, with a `cuda` summary."""
    return run.get("backend") == "cuda" or isinstance(run.get("cuda"), dict)


def cuda_batch(run):
    """The batch a backend "cuda" record decoded together (the record's `batch`, else `cuda.batch`)."""
    b = run.get("batch")
    if b is None and isinstance(run.get("cuda"), dict):
        b = run["cuda"].get("batch")
    return int(b) if isinstance(b, (int, float)) else None


def cuda_kernel(run):
    """Full attention's kernel in a backend "cuda" record: `cuda.kernel` ("flashinfer" | "own"), else the
    label's '@cuda(...,kernel=K)'; records made before the kernel was a choice have neither and ran the
    project's own kernel ("own"). None for other methods and for CPU records."""
    if not is_cuda_run(run) or run.get("method") != "full":
        return None
    k = (run.get("cuda") or {}).get("kernel")
    if isinstance(k, str) and k:
        return k
    label = run.get("label", "")
    j = label.find("@cuda(")
    if j >= 0:
        for kv in label[j + len("@cuda("):].rstrip(")").split(","):
            key, _, v = kv.partition("=")
            if key == "kernel" and v:
                return v
    return "own"


def fmt_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, (dict, list)):
        return json.dumps(v, sort_keys=True)
    return str(v)


def load(path, extra_files=(), others=()):
    return Results(path, extra_files, others)
