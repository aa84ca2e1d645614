"""retro_bench.closedloop.closed_loop's prefill_progress: the progress lines of a long prefill (no model; Debian's
/usr/bin/python3). A fake clock: a 32-chunk prefill at 100 s a chunk logs every 300 s with the positions done,
the minutes since the start and the rest at the rate since the first chunk; nothing at the last chunk (the case
line that follows says the total), nothing when the prefill is shorter than the interval. ~0.1 s."""

import contextlib
import io
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from retro_bench.closedloop import closed_loop  # noqa: E402


def lines(chunks, every_s, per_chunk_s=100.0, chunk=1024, total=32000):
    now = [0.0]
    on_chunk = closed_loop.prefill_progress({"id": "niah-x"}, 0.0, every_s=every_s, clock=lambda: now[0])
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        for i in range(chunks):
            now[0] = (i + 1) * per_chunk_s
            on_chunk(min((i + 1) * chunk, total), total)
    return err.getvalue().splitlines()


class PrefillProgressTest(unittest.TestCase):
    def test_a_line_every_interval_with_the_rest_at_the_rate(self):
        out = lines(32, 300.0)
        self.assertEqual(len(out), 10, out)  # at 300, 600, ..., 3000 s; not at the last chunk (3200 s)
        self.assertEqual(out[0], "[closed-loop] case niah-x: prefill 3072/32000 positions (5 min; ~47 min left)")
        self.assertEqual(out[-1], "[closed-loop] case niah-x: prefill 30720/32000 positions (50 min; ~2 min left)")

    def test_quiet_when_shorter_than_the_interval(self):
        self.assertEqual(lines(4, 300.0, per_chunk_s=50.0, total=4096), [])  # 200 s in all


if __name__ == "__main__":
    unittest.main()
