"""How a closed-loop grid's cases are ordered and dealt out to shards (`retro-bench run --shard I/N`), and
the plan `--shard-plan N` prints: which cases each shard holds and what of them is still to do, read from
the results directory without writing to it (docs/closed-loop.md "Sharded")."""
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


def shard_plan(order, n, chunk, run_ids, done, keep=lambda case: True):
    """The plan of `n` shards: one dict a shard {shard, groups, cases: [{id, desc, prompt_len, reference,
    runs_done, runs}], to_do} with `done(run_id, case_id)` telling which parts are on disk (`run_ids`: the
    method runs' ids; the reference is REFERENCE). The groups are those of every case in `order` (a
    session's); only the cases `keep` accepts are listed (--only-kind)."""
    groups = case_groups(order, chunk)
    kept = [c for _, c in order if keep(c)]
    plan = [{"shard": i, "groups": sorted({groups[c["id"]] for c in kept if groups[c["id"]] % n == i}), "cases": [],
             "to_do": 0} for i in range(n)]
    for c in kept:
        s = plan[groups[c["id"]] % n]
        ref = done(REFERENCE, c["id"])
        runs_done = sum(bool(done(r, c["id"])) for r in run_ids)
        s["cases"].append({"id": c["id"], "desc": c.get("desc", ""), "prompt_len": len(c["ids"]), "reference": ref,
                           "runs_done": runs_done, "runs": len(run_ids)})
        s["to_do"] += (not ref) + len(run_ids) - runs_done
    return plan


def format_plan(name, plan, n_runs):
    """The plan as the lines `retro-bench run CONFIG --shard-plan N` prints."""
    n_cases = sum(len(s["cases"]) for s in plan)
    n_groups = sum(len(s["groups"]) for s in plan)
    lines = [f"{name}: {n_cases} case(s) in {n_groups} group(s) of cases sharing their first prefill chunk, "
             f"{n_runs} run(s) + the full-attention reference each; {len(plan)} shard(s), a group's cases in one"]
    for s in plan:
        tokens = sum(c["prompt_len"] for c in s["cases"])
        todo = [c for c in s["cases"] if not c["reference"] or c["runs_done"] < c["runs"]]
        lines.append(f"  shard {s['shard']}/{len(plan)}: {len(s['groups'])} group(s), {len(s['cases'])} case(s), "
                     f"{tokens} prompt tokens; to do: {s['to_do']} part(s) on {len(todo)} case(s)")
        for c in todo:
            lines.append(f"    {c['id']} ({c['desc']}): reference {'done' if c['reference'] else 'to do'}, "
                         f"runs {c['runs_done']}/{c['runs']} done")
    return "\n".join(lines)
