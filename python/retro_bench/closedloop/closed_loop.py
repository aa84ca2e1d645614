"""The closed-loop experiment (docs/closed-loop.md): every method inside a real model's decode.

Launched by `retro-bench run CONFIG` for configs with "experiment": "closed-loop" (the C++ side checks
the config and the methods' parameters against the registry and passes the expanded runs), with the
dump venv's Python, as `python -B build/python/retro_bench/_launch.py retro_bench.closedloop.closed_loop`
(the package beside the binary, with its compiled core). For each case (a prompt: a fidelity excerpt or a
needle-in-a-haystack prompt) the prompt's prefill runs once with exact attention; then the reference
(the model's own exact attention) and every method run decode on top of that same prefill: the method
is built per (layer, KV head) on the prompt's post-RoPE keys/values (+ its last prefill queries) through
the retro_bench binding and sees each decode token appended in order; layers below dense_layers stay
exact (Quest's setting). One part file per (run, case) makes an interrupted sweep resume."""

import argparse
import hashlib
import itertools
import json
import os
import shlex
import shutil
import signal
import sys
import time

from .. import lifeline

if __name__ == "__main__":  # ends with retro-bench however it ends (before the slow imports; issue 43)
    lifeline.die_with_parent()

import numpy as np  # noqa: E402

from . import backend, metrics, sharding, tasks, user_cases  # noqa: E402
from ..atomic import save_npy, write_text  # noqa: E402
from .results import REFERENCE, ResultsDir, ResultsError  # noqa: E402

FIDELITY_KEYS = {"texts", "prompt_tokens", "continuation_tokens", "greedy_tokens", "random_prompt", "seed"}
NIAH_KEYS = {"texts", "prompt_tokens", "depths", "variants", "num_keys", "max_new_tokens", "seed", "haystack"}


class ConfigError(Exception):
    pass


QUIET = False  # --quiet (retro-bench run -q): no progress lines; errors and the results table still print


def log(msg, always=False):
    """A progress line on stderr; `always`: a warning, printed under --quiet too."""
    if always or not QUIET:
        print(f"[closed-loop] {msg}", file=sys.stderr, flush=True)


def prefill_progress(case, t0, every_s=300.0, clock=time.perf_counter):
    """A prefill's on_chunk: a line at most every `every_s` seconds (positions done, minutes since t0, the
    rest at the rate since the first chunk), so a long prefill is not a silent half hour."""
    state = {"last": clock(), "first": None}

    def on_chunk(done, total):
        now = clock()
        if state["first"] is None:
            state["first"] = (done, now)
        if now - state["last"] < every_s or done >= total:
            return
        state["last"] = now
        d0, s0 = state["first"]
        rate = (done - d0) / (now - s0) if done > d0 and now > s0 else 0.0
        left = f"; ~{(total - done) / rate / 60:.0f} min left" if rate > 0 else ""
        log(f"case {case['id']}: prefill {done}/{total} positions ({(now - t0) / 60:.0f} min{left})")
    return on_chunk


def check_config(cfg, origin):
    def keys(obj, allowed, where):
        if not isinstance(obj, dict):
            raise ConfigError(f"{origin}: {where}: expected an object")
        bad = sorted(set(obj) - allowed)
        if bad:
            raise ConfigError(f"{origin}: {where}: unknown key '{bad[0]}' (known: {', '.join(sorted(allowed))})")
    # the top-level keys and the methods are checked by retro-bench (apps/retro-bench/closed_loop_config.cpp)
    if "model" not in cfg or not isinstance(cfg["model"], str):
        raise ConfigError(f"{origin}: missing \"model\" (smollm2, qwen2.5-0.5b, qwen2.5-1.5b, FILE.gguf, a HF directory "
                          "or tiny-random-llama)")
    if "fidelity" in cfg:
        keys(cfg["fidelity"], FIDELITY_KEYS, "fidelity")
    if "niah" in cfg:
        keys(cfg["niah"], NIAH_KEYS, "niah")
    if "fidelity" not in cfg and "niah" not in cfg and "cases" not in cfg:
        raise ConfigError(f"{origin}: no task: give \"fidelity\", \"niah\" and/or \"cases\" (a JSONL file)")
    if not isinstance(cfg.get("only_where_reference_answers", False), bool):
        raise ConfigError(f"{origin}: only_where_reference_answers must be true or false, got "
                          f"{cfg['only_where_reference_answers']!r}")
    dl = cfg.get("dense_layers", 0)
    if not (isinstance(dl, int) and dl >= 0):
        raise ConfigError(f"{origin}: dense_layers must be an integer >= 0, got {dl!r}")


def check_same_device(res, device):
    """A resumed directory continues on the device it started on (its manifest's model.device; "cpu" before
    the option existed): the reference and the methods' parts of one directory come from one device's
    forward passes (a GPU's float rounding differs from the CPU's). ResultsError naming both otherwise."""
    path = res.manifest_path()
    if not os.path.exists(path):
        return
    with open(path, encoding="utf-8") as f:
        model = json.load(f).get("model")
    if not model:  # no session got past loading the model
        return
    was = str(model.get("device", "cpu")).split(":")[0]
    if was != device:
        raise ResultsError(f"{res.dir} was computed with --device {was} (manifest.json model.device); continue it "
                           f"with --device {was}, or write the --device {device} run to another --results directory")


def run_id(run, cfg):
    key = {"method": run["method"], "params": run["params"], "model": cfg["model"],
           "dense_layers": cfg.get("dense_layers", 0), "storage": cfg.get("storage", "f16"),
           "prefill_queries": cfg.get("prefill_queries", 64), "seed": cfg.get("seed", 0)}
    stem = run["method"]
    if run.get("method_source"):  # a Python method: its file's hash keys the run (an edited file is new)
        key["method_source"] = run["method_source"]
        stem = "py-" + stem.rsplit(":", 1)[1]  # "py:dir/file.py:Class" names no directory
    return stem + "-" + hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:10]


def reference_misses(cfg, ref):
    """Whether the config runs the methods only where full attention answers ("only_where_reference_answers":
    issue 27 #2's grid: a case full attention gets wrong says nothing about retrieval and costs as much as
    one it answers) and the reference part `ref` is a scored case it got wrong. Fidelity cases never miss."""
    return bool(cfg.get("only_where_reference_answers")) and ref is not None and \
        ref.get("answer") is not None and "correct" in ref and not ref["correct"]


def skipped_case(res, cfg, case_id):
    """reference_misses for a case whose reference part is on disk (False before the reference ran)."""
    return bool(cfg.get("only_where_reference_answers")) and res.has_part(REFERENCE, case_id) and \
        reference_misses(cfg, res.read_part(REFERENCE, case_id))


def case_done(res, cfg, run_id, case_id):
    """A run's part on a case is present, or not wanted (the case is skipped: reference_misses)."""
    return res.has_part(run_id, case_id) or (run_id != REFERENCE and skipped_case(res, cfg, case_id))


def session_units(args, runs, cases, mine, search_params):
    """The (run_id, case_id) units this session computes, the reference's with them: its worker's groups of
    runs (--worker), its shard's cases (`mine`), its kind (--only-kind). A resume checks these parts for
    damage; the other sessions' are theirs to check."""
    if args.worker:
        i_w, n_w = (int(x) for x in args.worker.split("/"))
        runs = [r for group in build_groups(runs, search_params)[i_w::n_w] for r in group]
    ids = [REFERENCE] + [r["id"] for r in runs]
    return [(rid, c["id"]) for c in cases if (not args.only_kind or c["kind"] == args.only_kind) and
            (args.worker or mine is None or c["id"] in mine) for rid in ids]


def build_key(run, search_params):
    """What a run's index depends on: its method and parameters without the search-time ones
    (ParamSpec::search, `search_params` {method: names}); runs with equal keys share one build."""
    skip = search_params.get(run["method"], set())
    return json.dumps([run["method"], run.get("method_source"),
                       {k: v for k, v in run["params"].items() if k not in skip}], sort_keys=True)


def parse_case_shard(spec):
    """(I, N) of a --case-shard "I/N", or ConfigError."""
    try:
        i, n = (int(x) for x in spec.split("/"))
        if not 0 <= i < n:
            raise ValueError
    except ValueError:
        raise ConfigError(f"--case-shard {spec!r}: expected I/N with 0 <= I < N") from None
    return i, n


def print_shard_plan(cfg, args, runs, own):
    """--shard-plan N: the cases each shard holds (the same cases and order a session builds, from the
    tokenizer alone) and which of their parts are on disk; the results directory is only read."""
    if args.shard_plan < 1:
        raise ConfigError(f"--shard-plan {args.shard_plan}: expected a number of shards >= 1")
    from . import model_runner
    tok, vocab, _ = model_runner.load_tokenizer(cfg["model"])
    cases = tasks.fidelity_cases(cfg, tok, vocab) + tasks.niah_cases(cfg, tok) + own
    res = ResultsDir.reader(args.results, cfg["name"])
    # grouped over every case, as a session groups them; --only-kind leaves the other kinds out of the list
    plan = sharding.shard_plan(sharding.case_order(cases), args.shard_plan, int(cfg.get("prefill_chunk", 1024)),
                               [r["id"] for r in runs], lambda run_id, case_id: case_done(res, cfg, run_id, case_id),
                               keep=lambda c: not args.only_kind or c["kind"] == args.only_kind,
                               kept=lambda case_id: os.path.exists(prefill_path(res, case_id)))
    rates = sharding.recorded_rates(readable_parts(res, [REFERENCE] + [r["id"] for r in runs]))
    print(sharding.format_plan(cfg["name"], plan, len(runs), rates))


def readable_parts(res, run_ids):
    """(run_id, part) of every readable part file of `run_ids` in the results directory (a damaged one is
    passed over: the plan only reads)."""
    for run_id in run_ids:
        d = os.path.join(res.dir, "parts", run_id)
        for f in sorted(os.listdir(d)) if os.path.isdir(d) else []:
            if f.endswith(".json"):
                try:
                    yield run_id, res.read_part(run_id, f[:-len(".json")])
                except (ResultsError, OSError):
                    continue


def build_groups(runs, search_params):
    """`runs` cut into maximal stretches of consecutive runs with equal build_key, in order."""
    return [list(g) for _, g in itertools.groupby(runs, key=lambda r: build_key(r, search_params))]


class Decoder:
    """Decode loops of one case on top of its prefill: the reference (heads None) or a method.
    A method's heads built for one run are kept, unappended, while later runs of the case have the same
    build_key: those runs decode on copies of them (HeadMethod.clone: a budget sweep builds each index
    once per case), so does a fidelity case's second loop (teacher-forced, then greedy)."""

    def __init__(self, lm, rb, cfg, case, logp0, prefill_q, search_params=None):
        self.lm, self.rb, self.cfg, self.case = lm, rb, cfg, case
        self.logp0, self.prefill_q = logp0, prefill_q
        self.pl = len(case["ids"])
        self.search_params = search_params or {}
        self.shared = None  # (build_key, heads): the last build, nothing appended

    def _build_heads(self, run):
        """One HeadMethod per (layer >= dense_layers, KV head) on the prompt's KV."""
        lm, rb = self.lm, self.rb
        heads = []
        g = lm.nq // lm.nkv
        for l in range(lm.n_layers):
            if l < self.cfg.get("dense_layers", 0):
                heads.append(None)
                continue
            K, V = lm.prefill_kv(l)
            K = lm.patch.to_trace_layout(K)
            PQ = lm.patch.to_trace_layout(self.prefill_q[l]) if self.prefill_q[l].shape[1] else None
            row = []
            for h in range(lm.nkv):
                # seed None: the seed `retro-bench run` gives this point on this (layer, KV head), so
                # the closed loop's selections are the open-loop replay's
                m = rb.HeadMethod(run["method"], run["params"], lm.d, g, layer=l, kv_head=h,
                                  storage=self.cfg.get("storage", "f16"))
                m.build(K[h], np.ascontiguousarray(V[h]), PQ[h * g:(h + 1) * g] if PQ is not None else None)
                row.append(m)
            heads.append(row)
        return heads

    @staticmethod
    def _copies(heads, params):
        """Copies of built heads for `params`, or None when the method cannot share its build."""
        out = []
        for row in heads:
            if row is None:
                out.append(None)
                continue
            copies = [m.clone(params) for m in row]
            if any(c is None for c in copies):
                return None
            out.append(copies)
        return out

    def build(self, run):
        """The run's heads into the patch: copies of the kept build when its build_key matches, else a
        new build (kept when the method can share it). Returns (seconds, shared)."""
        t0 = time.perf_counter()
        key = build_key(run, self.search_params)
        shared = self.shared is not None and self.shared[0] == key
        if not shared:
            self.shared = None  # the previous build's memory back first
            built = self._build_heads(run)
        heads = self._copies(self.shared[1] if shared else built, run["params"])
        if heads is None:  # cannot share: the run decodes on its own build
            heads = built
        elif not shared:
            self.shared = (key, built)
        self.lm.patch.heads = heads
        return time.perf_counter() - t0, shared

    def _steps(self, run, tokens, greedy):
        """Feeds tokens (teacher-forced) or its own argmax (greedy, starting from the prefill's)."""
        lm = self.lm
        lm.reset()
        build_s, shared = self.build(run) if run is not None else (0.0, False)
        lm.patch.stats, lm.patch.method_s = [], 0.0
        step_ms, logps, out = [], [], []
        tok = int(np.argmax(self.logp0)) if greedy else None
        n = tokens if greedy else len(tokens) - 1
        for t in range(n):
            cur = tok if greedy else tokens[t]
            if greedy:
                out.append(cur)
            t0 = time.perf_counter()
            logp = lm.step(cur, self.pl + t, t)
            step_ms.append((time.perf_counter() - t0) * 1e3)
            if greedy:
                tok = int(np.argmax(logp))
            else:
                logps.append(logp)
        st = np.array(lm.patch.stats) if lm.patch.stats else np.zeros((0, 3))
        info = dict(build_s=build_s, build_shared=shared, step_ms=step_ms, method_s=lm.patch.method_s,
                    exact_frac=float(st[:, 0].mean()) if len(st) else 1.0,
                    est_frac=float(st[:, 1].mean()) if len(st) else 0.0,
                    h2d_bytes_per_step=float(st[:, 2].sum() / max(1, n)) if len(st) else 0.0)
        lm.reset()
        return (np.array(logps) if not greedy else out), info

    def teacher_forced(self, run):
        return self._steps(run, self.case["continuation"], greedy=False)

    def generate(self, run):
        return self._steps(run, self.case["greedy_tokens"], greedy=True)


def prefill_path(res, case_id):
    return os.path.join(res.dir, "prefill", case_id + ".pt")  # the prefill, kept for resumed sessions


def seed_from_kept_prefill(lm, res, cfg, case, cases):
    """Before a prefill that the held cache serves little: the kept prefill (prefill/<id>.pt) of another
    case of this directory whose prompt shares the longest prefix with `case`'s, loaded as the held cache,
    so that lm.prefill goes on from there (bit-equal to a prefill from scratch, as any prefix reuse). A
    resumed session's first case otherwise paid its whole prefill although an earlier session had left
    the same haystack's prefix on disk (a 32K single-needle case after its text's other depths: ~30 min
    of two cores). Returns (case id, reusable positions) or None."""
    from .model_runner import reusable_prefix
    n_pf, chunk = int(cfg.get("prefill_queries", 64)), int(cfg.get("prefill_chunk", 1024))
    ids = case["ids"]
    first = len(ids) - min(n_pf, len(ids))
    best, best_p = None, lm.held_reusable_prefix(ids, first, chunk)
    for c in cases:
        if c["id"] == case["id"] or not os.path.exists(prefill_path(res, c["id"])):
            continue
        p = reusable_prefix(c["ids"], len(c["ids"]) - min(n_pf, len(c["ids"])), ids, first, chunk)
        if p > best_p:
            best, best_p = c, p
    if best is None or lm.load_prefill(prefill_path(res, best["id"]), best["ids"], n_pf) is None:
        return None
    return best["id"], best_p


def run_case(lm, rb, cfg, case, runs, res, tok, search_params=None, cases=()):
    """Prefill once, the reference, then every pending run of this case (consecutive runs with equal
    build_key share one build per case). `cases`: the directory's cases, whose kept prefills may seed
    this one's (seed_from_kept_prefill)."""
    t0 = time.perf_counter()
    ppath = prefill_path(res, case["id"])
    loaded = lm.load_prefill(ppath, case["ids"], int(cfg.get("prefill_queries", 64)))
    reused = 0
    seeded = None
    if loaded is None:
        seeded = seed_from_kept_prefill(lm, res, cfg, case, cases)
        if seeded:
            log(f"case {case['id']}: prefill goes on from case {seeded[0]}'s kept prefill ({seeded[1]} positions)")
        logp0, pq = lm.prefill(case["ids"], int(cfg.get("prefill_queries", 64)), int(cfg.get("prefill_chunk", 1024)),
                               on_chunk=prefill_progress(case, t0))
        reused = lm.reused_tokens
        lm.save_prefill(ppath, logp0, pq)
    else:
        logp0, pq = loaded
    prefill_s = time.perf_counter() - t0
    log(f"case {case['id']} ({case['desc']}, {len(case['ids'])} tokens): prefill {prefill_s:.1f} s"
        + (" (loaded)" if loaded is not None else "")
        + (f" ({reused} leading tokens reused from " + (f"case {seeded[0]}'s kept prefill)" if seeded else
                                                        "the previous prompt)") if reused else ""))
    dec = Decoder(lm, rb, cfg, case, logp0, pq, search_params)
    decode = (lambda ids: tok.decode(ids, skip_special_tokens=True)) if tok is not None else \
        (lambda ids: " ".join(map(str, ids)))
    targets = case["continuation"][1:]

    # the reference: the model's own exact attention (its log-probs kept next to its part file, so a
    # resumed session compares with the same distributions without decoding it again)
    lp_path = res.reference_npy_path(case["id"])
    if res.has_part(REFERENCE, case["id"]) and (len(case["continuation"]) <= 1 or os.path.exists(lp_path)):
        ref = res.read_part(REFERENCE, case["id"])
        lp_full = np.load(lp_path) if len(case["continuation"]) > 1 else None
    else:
        ref = {"case": case["id"], "kind": case["kind"], "desc": case["desc"], "prompt_len": len(case["ids"]),
               "prefill_s": prefill_s, "prefill_reused_tokens": reused}
        lp_full = None
        if len(case["continuation"]) > 1:
            lp_full, info = dec.teacher_forced(None)
            f = metrics.fidelity(lp_full, lp_full, targets)
            ref.update(nll=f["nll"], tf=info)
            save_npy(lp_path, lp_full)
        if case["greedy_tokens"] > 0:
            gen_full, info = dec.generate(None)
            text = decode(gen_full)
            ref.update(tokens=gen_full, text=text, gen=info, answer=case["answer"],
                       correct=user_cases.score(case, gen_full, decode))
            if "answers" in case:
                ref.update(answers=case["answers"], scoring=case["scoring"])
        res.write_part(REFERENCE, case["id"], ref)
        log(f"  reference: " + (f"ppl {np.exp(np.mean(ref['nll'])):.2f}" if "nll" in ref else "")
            + (f" answer {ref['text']!r} ({'ok' if ref['correct'] else 'wrong'})" if "text" in ref else ""))
    if reference_misses(cfg, ref):
        log(f"  methods skipped on this case: full attention answers it wrong (\"only_where_reference_answers\")")
        return
    gen_full = ref.get("tokens")
    for run in runs:
        rid = run["id"]
        if res.has_part(rid, case["id"]):
            continue
        part = {"case": case["id"], "kind": case["kind"], "desc": case["desc"], "run": rid, "label": run["label"]}
        if lp_full is not None:
            lp, info = dec.teacher_forced(run)
            part.update(metrics.fidelity(lp_full, lp, targets), nll_full=ref["nll"], tf=info)
        if gen_full is not None:
            gen, info = dec.generate(run)
            text = decode(gen)
            part.update(tokens=gen, text=text, gen=info, answer=case["answer"],
                        correct=user_cases.score(case, gen, decode), correct_full=ref["correct"],
                        agreement=metrics.agreement(gen, gen_full))
            if "answers" in case:
                part.update(answers=case["answers"], scoring=case["scoring"])
        res.write_part(rid, case["id"], part)
        kl = f" KL {np.mean(part['kl']):.3g}" if "kl" in part else ""
        ok = (f" answer {'ok' if part['correct'] else 'wrong'}" if part.get("answer") else "") + \
            (f" agree {part['agreement']}/{len(part['tokens'])}" if "tokens" in part else "")
        steps = (part.get("tf", {}).get("step_ms", []) + part.get("gen", {}).get("step_ms", []))
        log(f"  {run['label']}:{kl}{ok} ({np.median(steps):.0f} ms/token)")


def ms_median(parts, keys=("tf", "gen")):
    v = [x for p in parts for k in keys if k in p for x in p[k]["step_ms"]]
    return float(np.median(v)) if v else None


def aggregate(res, cfg, runs, cases, lm_name):
    """runs.jsonl (reference first) and cases.csv from the part files. A run is complete with a part on every
    case but those skipped (reference_misses), whose number the reference's record gives."""
    ids = [c["id"] for c in cases]
    ref_parts = [res.read_part(REFERENCE, c) for c in ids if res.has_part(REFERENCE, c)]
    skipped = {p["case"] for p in ref_parts if reference_misses(cfg, p)}
    records, rows = [], []
    ref_gen = [dict(p, agreement=len(p["tokens"]), correct_full=p["correct"])
               for p in ref_parts if "tokens" in p]
    ref_fid = [dict(p, kl=[0.0] * len(p["nll"]), top1=[1.0] * len(p["nll"]), nll_full=p["nll"])
               for p in ref_parts if "nll" in p]
    records.append(dict(run_id=REFERENCE, method="reference", label="full attention (the model's own, eager)",
                        params={}, model=lm_name, cases=len(ref_parts),
                        fidelity=metrics.summarize_fidelity(ref_fid), task=metrics.summarize_task(ref_gen),
                        step_ms_median=ms_median(ref_parts),
                        prefill_s_total=float(sum(p["prefill_s"] for p in ref_parts)),
                        cases_skipped=len(skipped)))
    for run in runs:
        # a part on a skipped case (written before the option was set) is left out, as claims.py does
        parts = [res.read_part(run["id"], c) for c in ids if c not in skipped and res.has_part(run["id"], c)]
        if not parts:
            continue
        infos = [p[k] for p in parts for k in ("tf", "gen") if k in p]
        records.append(dict(
            run_id=run["id"], method=run["method"], params=run["params"], label=run["label"], model=lm_name,
            cases=len(parts), complete=len(parts) == len(ids) - len(skipped), fidelity=metrics.summarize_fidelity([p for p in parts if "kl" in p]),
            task=metrics.summarize_task([p for p in parts if "tokens" in p]),
            step_ms_median=ms_median(parts), build_s_total=float(sum(i["build_s"] for i in infos)),
            exact_frac=float(np.mean([i["exact_frac"] for i in infos])),
            est_frac=float(np.mean([i["est_frac"] for i in infos])),
            h2d_bytes_per_step=float(np.mean([i["h2d_bytes_per_step"] for i in infos]))))
        if run.get("method_source"):
            records[-1]["method_source"] = run["method_source"]
        for p in parts:
            rows.append([run["id"], run["label"], p["case"], p["kind"], p["desc"],
                         f"{np.mean(p['kl']):.6g}" if "kl" in p else "",
                         f"{np.percentile(p['kl'], 90):.6g}" if "kl" in p else "",
                         f"{np.mean(p['top1']):.4f}" if "top1" in p else "",
                         f"{np.exp(np.mean(p['nll'])):.4f}" if "nll" in p else "",
                         str(int(p["correct"])) if "correct" in p and p.get("answer") else "",
                         str(int(p["correct_full"])) if "correct" in p and p.get("answer") else "",
                         str(p["agreement"]) if "agreement" in p else "",
                         f"{np.median(p.get('tf', p.get('gen', {})).get('step_ms', [0])):.2f}"])
    write_text(os.path.join(res.dir, "runs.jsonl"), "".join(json.dumps(r) + "\n" for r in records))
    head = "run_id,label,case,kind,desc,kl_mean,kl_p90,top1,ppl,correct,correct_full,agreement,step_ms_median\n"
    esc = lambda s: '"' + str(s).replace('"', '""') + '"' if ("," in str(s) or '"' in str(s)) else str(s)  # noqa: E731
    write_text(os.path.join(res.dir, "cases.csv"), head + "".join(",".join(esc(x) for x in r) + "\n" for r in rows))
    return records


def print_table(records):
    print(f"{'run':48} {'KL mean':>9} {'KL p90':>9} {'top1':>6} {'ppl':>8} {'acc':>6} {'acc|full':>8} "
          f"{'agree':>6} {'ms/tok':>8} {'exact':>6}")
    for r in records:
        f, t = r.get("fidelity") or {}, r.get("task") or {}
        fmt = lambda v, s: (s.format(v) if v is not None else "-")  # noqa: E731
        print(f"{r['label'][:48]:48} {fmt(f.get('kl_mean'), '{:9.4f}'):>9} {fmt(f.get('kl_p90'), '{:9.4f}'):>9} "
              f"{fmt(f.get('top1'), '{:6.3f}'):>6} {fmt(f.get('ppl'), '{:8.3f}'):>8} "
              f"{fmt(t.get('accuracy'), '{:6.3f}'):>6} {fmt(t.get('accuracy_on_full_correct'), '{:8.3f}'):>8} "
              f"{fmt(t.get('agreement_mean'), '{:6.2f}'):>6} {fmt(r.get('step_ms_median'), '{:8.1f}'):>8} "
              f"{fmt(r.get('exact_frac'), '{:6.3f}'):>6}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config")
    ap.add_argument("--runs-json", required=True, help="the expanded runs [{method, params, label}] (from retro-bench)")
    ap.add_argument("--results", default="results")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--command", default="", help="the command line recorded in the manifest")
    ap.add_argument("--only-kind", choices=["fidelity", "niah", "task"],
                    help="run only the cases of this kind (parallel workers on one results directory; a "
                         "last session without it writes the complete runs.jsonl)")
    ap.add_argument("--worker", default=None, metavar="I/N",
                    help="run every N-th run starting at I (0-based) on cases whose prefill and reference "
                         "are done (parallel workers; a last session without it writes runs.jsonl)")
    ap.add_argument("--case-shard", default=None, metavar="I/N",
                    help="run every run on the I-th of N groups of cases (cases sharing their first prefill chunk "
                         "form a group: a haystack's cases, whose prefills reuse each other's); `retro-bench run "
                         "--shard I/N` passes it. The shard that finds every part done writes runs.jsonl")
    ap.add_argument("--shard-plan", type=int, default=0, metavar="N",
                    help="print which cases each of N shards (--case-shard I/N) holds and what of them is still "
                         "to do in the results directory, and exit: no model is loaded, nothing is written")
    ap.add_argument("--quiet", action="store_true", help="no progress lines (errors and the table still print)")
    ap.add_argument("--threads", type=int, default=None,
                    help="> 0: overrides the config's \"threads\" (torch, BLAS and the methods' OpenMP; a shard's "
                         "cores; not part of a run's id)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="where the model's forward runs (cuda: torch's first GPU); the methods run on the host "
                         "through the binding either way. A results directory keeps the device it started on")
    ap.add_argument("--aggregate-only", action="store_true",
                    help="compute nothing: runs.jsonl, cases.csv and the open-loop correlation from the part "
                         "files on disk (runs missing cases are marked complete=false)")
    ap.add_argument("--retro-bin", default=shutil.which("retro-bench") or "retro-bench",
                    help="retro-bench, for the open-loop replay (\"open_loop\" section)")
    args = ap.parse_args(argv)
    global QUIET
    QUIET = args.quiet

    def terminated(signum, frame):  # Slurm's time limit, kill, a shell's background job: as Ctrl-C
        # once: a second copy (Slurm signals every process of the step, retro-bench passes its own on)
        # must not interrupt the stop itself
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, terminated)
    if signal.getsignal(signal.SIGHUP) != signal.SIG_IGN:  # nohup's ignored hangup stays ignored
        signal.signal(signal.SIGHUP, terminated)
    try:
        return run(args)
    except (ConfigError, tasks.TaskError, user_cases.CasesError, ResultsError, backend.BackendError) as e:
        print(f"retro-bench run: error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001
        from ..dump import model_loading
        from . import model_runner
        if isinstance(e, (model_loading.ModelError, model_runner.DeviceError)):
            print(f"retro-bench run: error: {e}", file=sys.stderr)
            return 2
        raise


def run(args):
    t_start = time.time()
    with open(args.config, encoding="utf-8") as f:
        cfg = json.load(f)
    check_config(cfg, args.config)
    if args.threads is not None and args.threads > 0:
        cfg["threads"] = args.threads
    runs = json.loads(args.runs_json)
    rb = backend.load()
    if int(cfg.get("threads", 0)) > 0:
        # the methods' k-means and BLAS on the config's threads, like torch's: with the default (every
        # core) each worker's OpenMP teams spin against the others' and the model's (wave builds 20x slower)
        rb.set_threads(int(cfg["threads"]))
    for r in runs:  # the same registry the C++ side checked: resolved params round-trip unchanged
        r["params"] = rb.resolve_params(r["method"], r["params"])  # loads a "py:FILE:Class" method
    methods = {m["name"]: m for m in rb.methods()}  # after the resolutions: Python methods registered
    for r in runs:
        if methods[r["method"]].get("source"):
            r["method_source"] = methods[r["method"]]["source"]
        r["id"] = run_id(r, cfg)
    search_params = {name: {p["name"] for p in m["params"] if p.get("search")} for name, m in methods.items()}
    from . import model_runner
    # a device torch cannot use: refused before the model is fetched and anything is written
    device = None if args.aggregate_only or args.shard_plan else model_runner.check_device(args.device)
    ctx = model_runner.model_context(cfg["model"])  # ModelError for a model the loaders cannot read
    tasks.check_lengths(cfg, ctx, args.config)
    own = []
    if "cases" in cfg:  # every line checked (and tokenized: the tokenizer only) before any model work
        path = user_cases.cases_path(cfg, args.config)
        parsed = user_cases.parse(path)
        tok, vocab, stop_ids = model_runner.load_tokenizer(cfg["model"])
        own = user_cases.build(parsed, path, tok, vocab, ctx, bool(cfg.get("allow_beyond_context", False)), stop_ids)
        log(f"{len(own)} case(s) from {path}")
    if args.shard_plan:
        print_shard_plan(cfg, args, runs, own)
        return 0
    res = ResultsDir(args.results, cfg["name"], args.resume, args.force)
    if device is not None:
        check_same_device(res, args.device)
    resolved = {"runs": [{k: r[k] for k in ("id", "method", "params", "label")} for r in runs],
                "dense_layers": cfg.get("dense_layers", 0), "storage": cfg.get("storage", "f16")}
    manifest = res.start_session(cfg, resolved, args.command)
    status = "failed"
    if args.aggregate_only:
        try:
            if "cases" not in manifest:
                raise ConfigError(f"{res.dir}: the manifest lists no cases yet (no session got past loading the model)")
            records = aggregate(res, cfg, runs, manifest["cases"], manifest["model"]["name"])
            print_table(records)
            if cfg.get("open_loop") and os.path.isdir(os.path.join(res.dir, "traces")):
                from . import offline_online
                ol = offline_online.run(cfg, manifest["cases"], res.dir, args.results, records, args.retro_bin)
                if ol:
                    offline_online.print_table(ol)
            status = "complete" if all(r.get("complete", True) for r in records) and \
                len(records) == len(runs) + 1 else "partial"
            return 0
        finally:
            res.end_session(manifest, status, wall_s=round(time.time() - t_start, 1))
    try:
        t0 = time.time()
        lm = model_runner.LoadedModel(cfg["model"], threads=int(cfg.get("threads", 0)), seed=int(cfg.get("seed", 0)),
                                      device=args.device)
        load_s = time.time() - t0
        log(f"{lm.name}: {lm.n_layers} layers, {lm.nq} q / {lm.nkv} kv heads, head_dim {lm.d}, "
            f"q/k to methods in {lm.layout} order; loaded in {load_s:.1f} s")
        cases = tasks.fidelity_cases(cfg, lm.tok, lm.vocab) + tasks.niah_cases(cfg, lm.tok) + own
        manifest["cases"] = [{k: c[k] for k in ("id", "kind", "desc", "answer")} | {"prompt_len": len(c["ids"])}
                             for c in cases]
        manifest["model"] = dict(name=lm.name, source=lm.source, layers=lm.n_layers, q_heads=lm.nq,
                                 kv_heads=lm.nkv, head_dim=lm.d, layout=lm.layout, versions=lm.versions,
                                 device=device)
        res.save_manifest(manifest)
        pdir = os.path.join(res.dir, "prompts")
        for c in cases:  # the prompts' token ids: the open-loop traces are dumped from these (--prompt-ids)
            write_text(os.path.join(pdir, c["id"] + ".json"), json.dumps(c["ids"]))
        order = sharding.case_order(cases)
        mine = sharding.case_shard(order, *parse_case_shard(args.case_shard), int(cfg.get("prefill_chunk", 1024))) \
            if args.case_shard else None
        if args.resume:  # damaged parts of this session's units are moved aside, so recomputed below
            res.set_aside_damaged(session_units(args, runs, cases, mine, search_params),
                                 lambda msg: log(msg, always=True))
        if args.worker:
            # a worker takes every N-th group of runs that share a build (build_key: a budget sweep of one
            # index) and completes it on every case before the next one (the prefills and references come
            # from disk: run stage "prefill + reference" first)
            i_w, n_w = (int(x) for x in args.worker.split("/"))
            for group in build_groups(runs, search_params)[i_w::n_w]:
                for case in cases:
                    todo = [r for r in group if not case_done(res, cfg, r["id"], case["id"])]
                    if todo and (not args.only_kind or case["kind"] == args.only_kind):
                        run_case(lm, rb, cfg, case, todo, res, lm.tok, search_params, cases)
        for i, case in order:
            if args.worker or (args.only_kind and case["kind"] != args.only_kind) or \
                    (mine is not None and case["id"] not in mine):
                continue
            todo = [r for r in runs if not case_done(res, cfg, r["id"], case["id"])]
            if not todo and res.has_part(REFERENCE, case["id"]):
                continue
            log(f"case {i + 1}/{len(cases)}: {len(todo)} run(s) to do")
            run_case(lm, rb, cfg, case, todo, res, lm.tok, search_params, cases)
        if args.worker or args.only_kind:
            status = "partial"
            return 0
        if args.case_shard and not all(case_done(res, cfg, r["id"], c["id"]) for r in runs + [{"id": REFERENCE}] for c in cases):
            status = "partial"
            log(f"shard {args.case_shard} done; other shards' cases remain (the last shard writes runs.jsonl)")
            return 0
        records = aggregate(res, cfg, runs, cases, lm.name)
        print_table(records)
        if cfg.get("open_loop") and not args.only_kind and not args.case_shard:
            from . import offline_online
            del lm  # the model's memory back before the dump and the replay
            ol = offline_online.run(cfg, cases, res.dir, args.results, records, args.retro_bin)
            if ol:
                offline_online.print_table(ol)
        status = "complete"
        print(f"\nresults: {res.dir}/ (runs.jsonl, cases.csv, manifest.json); {time.time() - t_start:.0f} s")
        return 0
    except KeyboardInterrupt:
        status = "interrupted"
        opts = "" if args.results == "results" else f" --results {shlex.quote(args.results)}"
        # the same selection of cases (a shard, one kind) continues where it stopped
        opts += f" --shard {args.case_shard}" if args.case_shard else ""
        opts += f" --only-kind {args.only_kind}" if args.only_kind else ""
        opts += f" --device {args.device}" if args.device != "cpu" else ""
        print(f"interrupted; continue with: retro-bench run {shlex.quote(args.config)}{opts} --resume",
              file=sys.stderr)
        return 130
    finally:
        res.end_session(manifest, status, wall_s=round(time.time() - t_start, 1))


if __name__ == "__main__":
    sys.exit(main())
