"""retro_bench.closedloop.sharding: how a closed-loop grid's cases are dealt to shards and what `--shard-plan N`
says of them (no model; Debian's /usr/bin/python3): a haystack's cases stay in one shard, the groups are
dealt in turn, the cases of another kind count in the grouping but are not listed, the parts still to do,
and the estimate at the rates the parts on disk recorded. ~0.1 s."""

import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from retro_bench.closedloop import sharding  # noqa: E402


def case(cid, ids, kind="niah"):
    return {"id": cid, "ids": ids, "kind": kind, "desc": cid + " desc"}


# a fidelity case (its own prefix), two haystacks of two cases each (sharing their first chunk of 4 ids)
CASES = [case("hay1-a", [1, 1, 1, 1, 5]), case("fid", [9, 9, 9, 9, 9, 9], "fidelity"), case("hay2-a", [2, 2, 2, 2, 7]),
         case("hay1-b", [1, 1, 1, 1, 6]), case("hay2-b", [2, 2, 2, 2, 8])]
RUNS = ["r1", "r2"]


class ShardingTest(unittest.TestCase):
    def setUp(self):
        self.order = sharding.case_order(CASES)

    def test_a_haystack_stays_in_one_shard_and_groups_are_dealt_in_turn(self):
        self.assertEqual([c["id"] for _, c in self.order], ["hay1-a", "hay1-b", "hay2-a", "hay2-b", "fid"])
        g = sharding.case_groups(self.order, 4)
        self.assertEqual(g["hay1-a"], g["hay1-b"])
        self.assertEqual(len(set(g.values())), 3)
        shards = [sharding.case_shard(self.order, i, 2, 4) for i in range(2)]
        self.assertEqual(shards[0] | shards[1], {c["id"] for c in CASES})
        self.assertFalse(shards[0] & shards[1])
        self.assertEqual(shards[0], {"hay1-a", "hay1-b", "fid"})  # groups 0 and 2
        self.assertEqual(shards[1], {"hay2-a", "hay2-b"})

    def test_the_plan_lists_what_is_left_and_estimates_it(self):
        on_disk = {("reference", "hay1-a"), ("r1", "hay1-a"), ("r2", "hay1-a"), ("reference", "hay1-b"),
                   ("r1", "hay1-b"), ("reference", "hay2-a")}
        plan = sharding.shard_plan(self.order, 2, 4, RUNS, lambda r, c: (r, c) in on_disk,
                                   keep=lambda c: c["kind"] == "niah", kept=lambda cid: cid == "hay2-a")
        self.assertEqual([[c["id"] for c in s["cases"]] for s in plan], [["hay1-a", "hay1-b"], ["hay2-a", "hay2-b"]])
        self.assertEqual([s["groups"] for s in plan], [[0], [1]])  # the fidelity case's group 2 not listed
        self.assertEqual([s["to_do"] for s in plan], [1, 5])  # hay1-b's r2; hay2-a's two runs, all of hay2-b
        b = plan[0]["cases"][1]
        self.assertEqual((b["reference"], b["runs_done"], b["missing"], b["prefill_kept"]), (True, 1, ["r2"], False))
        parts = [("reference", {"prefill_s": 600.0, "prefill_reused_tokens": 0, "gen": {"step_ms": [1000.0] * 10}}),
                 ("reference", {"prefill_s": 20.0, "prefill_reused_tokens": 31744, "gen": {"step_ms": [2000.0] * 10}}),
                 ("r1", {"gen": {"build_s": 100.0, "step_ms": [500.0] * 10}}),
                 ("r1", {"gen": {"build_s": 50.0, "step_ms": [500.0] * 10}}),
                 ("r2", {"gen": {"build_s": 0.5, "step_ms": [100.0] * 10}})]
        rates = sharding.recorded_rates(parts)
        self.assertEqual(rates["runs"], {"r1": 80.0, "r2": 1.5})  # median of 105 and 55; 0.5 + 1
        self.assertEqual(rates["reference"], 15.0)  # median of 10 and 20 s of decode
        self.assertEqual(rates["prefill"], 600.0)  # only the prefill that reused nothing
        # shard 0: hay1-b's r2 (1.5 s), its prefill not kept: one prefill
        self.assertEqual(sharding.estimate(plan[0], rates), (1.5, 1))
        # shard 1: hay2-a's r1 + r2 (its prefill kept: none), hay2-b's reference + r1 + r2 and its prefill
        self.assertEqual(sharding.estimate(plan[1], rates), (81.5 + 15.0 + 81.5, 1))
        text = sharding.format_plan("grid", plan, len(RUNS), rates)
        self.assertIn("shard 1/2: 1 group(s), 2 case(s), 10 prompt tokens; to do: 5 part(s) on 2 case(s); ~3 min of "
                      "runs + 1 prefill(s) of up to ~10 min each", text)
        self.assertIn("hay2-b (hay2-b desc): reference to do, runs 0/2 done, prefill not kept", text)
        self.assertNotIn("hay1-a (", text)  # nothing left to do there
        self.assertIn("estimates: the medians of the parts on disk", text)
        # a run with no part yet counts the median of the others
        self.assertEqual(sharding.estimate(plan[0], {"runs": {"r1": 10.0, "x": 30.0}, "reference": 0.0,
                                                     "prefill": None}), (20.0, 1))


if __name__ == "__main__":
    unittest.main(verbosity=2)
