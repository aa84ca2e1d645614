"""How a closed-loop grid's cases are ordered and dealt out to shards (`retro-bench run --shard I/N`), and
the plan `--shard-plan N` prints: which cases each shard holds and what of them is still to do, read from
the results directory without writing to it (docs/closed-loop.md "Sharded")."""
from statistics import median

from .results import REFERENCE


def case_order(cases):
    """[(index, case)] in the order a session runs them: shorter prompts first (in 1024-token buckets: an
    interrupted long grid has its cheap cases done), then in the order of their token ids, so that prompts
    sharing a prefix (one haystack, several questions) come one after the other and each prefill reuses the
    previous one's (LoadedModel.prefill)."""
    return sorted(enumerate(cases), key=lambda ic: (len(ic[1]["ids"]) // 1024, ic[1]["ids"]))


def case_groups(order, chunk):
    """{case id: group number}: the cases of `order` whose prompts share their first `chunk` tokens form a
    group (a haystack's cases: their prefills reuse each other's), numbered in order of first appearance."""
    group = {}  # first chunk -> its group's number
    for _, c in order:
        group.setdefault(tuple(c["ids"][:chunk]), len(group))
    return {c["id"]: group[tuple(c["ids"][:chunk])] for _, c in order}


def case_shard(order, i, n, chunk):
    """The ids of the cases shard i of n runs: the groups of case_groups dealt out in turn."""
    return {cid for cid, g in case_groups(order, chunk).items() if g % n == i}


def shard_plan(order, n, chunk, run_ids, done, keep=lambda case: True, kept=lambda case_id: False):
    """The plan of `n` shards: one dict a shard {shard, groups, cases: [{id, desc, prompt_len, reference,
    runs_done, runs, missing, prefill_kept}], to_do} with `done(run_id, case_id)` telling which parts are on
    disk (`run_ids`: the method runs' ids; the reference is REFERENCE; `missing` the run ids not done) and
    `kept(case_id)` whether the case's prefill is kept on disk. The groups are those of every case in
    `order` (a session's); only the cases `keep` accepts are listed (--only-kind)."""
    groups = case_groups(order, chunk)
    listed = [c for _, c in order if keep(c)]
    plan = [{"shard": i, "groups": sorted({groups[c["id"]] for c in listed if groups[c["id"]] % n == i}),
             "cases": [], "to_do": 0} for i in range(n)]
    for c in listed:
        s = plan[groups[c["id"]] % n]
        ref = done(REFERENCE, c["id"])
        missing = [r for r in run_ids if not done(r, c["id"])]
        runs_done = len(run_ids) - len(missing)
        s["cases"].append({"id": c["id"], "desc": c.get("desc", ""), "prompt_len": len(c["ids"]), "reference": ref,
                           "runs_done": runs_done, "runs": len(run_ids), "missing": missing,
                           "prefill_kept": bool(kept(c["id"]))})
        s["to_do"] += (not ref) + len(run_ids) - runs_done
    return plan


def recorded_rates(parts):
    """What the parts on disk say a unit costs, for estimate(): {"runs": {run_id: median seconds of its
    parts (index build + decode steps)}, "reference": median seconds of the reference's decode, "prefill":
    median seconds of a prefill that reused no tokens (or None)}; `parts` yields (run_id, part dict)."""
    per_run, ref, prefill = {}, [], []
    for run_id, p in parts:
        gen = p.get("gen") or {}
        steps = sum(gen.get("step_ms") or []) / 1000.0
        if run_id == REFERENCE:
            ref.append(steps)
            if p.get("prefill_s") is not None and not p.get("prefill_reused_tokens"):
                prefill.append(float(p["prefill_s"]))
        else:
            per_run.setdefault(run_id, []).append(float(gen.get("build_s") or 0.0) + steps)
    return {"runs": {r: median(v) for r, v in per_run.items()}, "reference": median(ref) if ref else 0.0,
            "prefill": median(prefill) if prefill else None}


def estimate(shard, rates):
    """(seconds of method runs and references, prefills needed) of a shard's parts to do at `rates`
    (recorded_rates; a run with no part yet counts the median of the others). A case needs a prefill when
    its reference is to do, or its runs are and its prefill is not kept; a case whose prompt shares most of
    the previous one's reuses its cache and costs less: the prefills are an upper bound."""
    runs = rates["runs"]
    fallback = median(list(runs.values())) if runs else 0.0
    seconds, prefills = 0.0, 0
    for c in shard["cases"]:
        seconds += sum(runs.get(r, fallback) for r in c["missing"]) + (0.0 if c["reference"] else rates["reference"])
        prefills += (not c["reference"]) or (bool(c["missing"]) and not c["prefill_kept"])
    return seconds, prefills


def hours(seconds):
    return f"{seconds / 3600:.1f} h" if seconds >= 5400 else f"{seconds / 60:.0f} min"


def format_plan(name, plan, n_runs, rates=None):
    """The plan as the lines `retro-bench run CONFIG --shard-plan N` prints; with `rates`, each shard's
    estimate at the rates its parts recorded."""
    n_cases = sum(len(s["cases"]) for s in plan)
    n_groups = sum(len(s["groups"]) for s in plan)
    lines = [f"{name}: {n_cases} case(s) in {n_groups} group(s) of cases sharing their first prefill chunk, "
             f"{n_runs} run(s) + the full-attention reference each; {len(plan)} shard(s), a group's cases in one"]
    for s in plan:
        tokens = sum(c["prompt_len"] for c in s["cases"])
        todo = [c for c in s["cases"] if not c["reference"] or c["runs_done"] < c["runs"]]
        line = (f"  shard {s['shard']}/{len(plan)}: {len(s['groups'])} group(s), {len(s['cases'])} case(s), "
                f"{tokens} prompt tokens; to do: {s['to_do']} part(s) on {len(todo)} case(s)")
        if rates and todo:
            seconds, prefills = estimate(s, rates)
            line += f"; ~{hours(seconds)} of runs"
            if prefills:
                line += f" + {prefills} prefill(s)" + (f" of up to ~{hours(rates['prefill'])} each"
                                                        if rates["prefill"] else "")
        lines.append(line)
        for c in todo:
            lines.append(f"    {c['id']} ({c['desc']}): reference {'done' if c['reference'] else 'to do'}, "
                         f"runs {c['runs_done']}/{c['runs']} done" + ("" if c["prefill_kept"] else ", prefill not kept"))
    if rates and any(s["to_do"] for s in plan):
        lines.append("estimates: the medians of the parts on disk (each run's index build and decode steps, the "
                     "reference's decode, a prefill that reused nothing), in the time of the sessions that wrote them")
    return "\n".join(lines)
