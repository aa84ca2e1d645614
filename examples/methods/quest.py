"""Quest's page selection in Python: pages of `page_size` tokens scored by the upper bound
sum_e max(q_e * min_e, q_e * max_e) of q.k over the page's channel-wise key min/max; each query head
attends its top pages under the token budget plus the last (partial) page.

The twin of the compiled `quest` (lib/methods/quest.cpp, docs/methods/quest.md) with gqa=per_head,
placement=offload, dense_layers=0; tests/python/test_py_methods.py checks that both select the same
tokens and report the same traffic.
    {"name": "py:examples/methods/quest.py:QuestPages", "params": {"k": 128}}
"""
import math

import numpy as np

from retro_bench import Method, Param


class QuestPages(Method):
    description = "Quest page selection in Python: min/max-key page bounds, top pages per query head + the last page"
    paper = "Tang et al., Quest: Query-Aware Sparsity for Efficient Long-Context LLM Inference (ICML 2024)"
    k = Param(2048, type="number", min=1e-9, max=1e9,
              description="token budget: >= 1 tokens, in (0,1) a fraction of visible tokens",
              source="Quest README: 2048-token budget")
    page_size = Param(16, min=1, max=1e6, description="tokens per page", source="Quest: page_size 16")

    def build(self, ctx, keys, values, prefill_queries):
        """keys, values: [prompt_len, d]. Page metadata mn, mx: [pages, d] channel-wise min/max of keys."""
        self.token_bytes = ctx.kv_token_bytes
        n, d, P = keys.shape[0], keys.shape[1], self.page_size
        pages = (n + P - 1) // P
        padded = np.full((pages * P, d), np.nan, np.float32)  # nan pads the last page; nanmin skips them
        padded[:n] = keys
        self.mn = np.nanmin(padded.reshape(pages, P, d), axis=1)
        self.mx = np.nanmax(padded.reshape(pages, P, d), axis=1)
        self.n = n

    def append(self, kv, pos):
        """kv.keys: [pos + 1, d]; token pos became visible: it opens a page or widens the last one."""
        k, j = kv.keys[pos], pos // self.page_size
        if pos % self.page_size == 0:
            self.mn = np.vstack([self.mn, k])
            self.mx = np.vstack([self.mx, k])
        else:
            np.minimum(self.mn[j], k, out=self.mn[j])
            np.maximum(self.mx[j], k, out=self.mx[j])
        self.n = pos + 1

    def select(self, queries, step, kv):
        """queries: [group, d] -> one id list per query head, page transfers as fetch units."""
        n, P, g = kv.n, self.page_size, queries.shape[0]
        pages = (n + P - 1) // P
        last = pages - 1  # the last (possibly partial) page holds the current token: always attended
        tokens = math.floor(self.k + 0.5) if self.k >= 1 else max(1, math.floor(self.k * n + 0.5))  # C's round()
        budget_pages = max(1, tokens // P)
        if pages <= budget_pages:  # everything fits: dense
            return {"exact": np.arange(n), "h2d_bytes": last * P * self.token_bytes,
                    "fetch_units": np.arange(last), "fetch_unit_tokens": np.full(last, P)}
        # bounds [g, last], accumulated channel by channel in float32 in the compiled method's order, so
        # equal-looking pages rank identically (a float64 or pairwise sum could swap near-ties)
        scores = np.zeros((g, last), np.float32)
        for e in range(queries.shape[1]):
            q = queries[:, e:e + 1]
            scores += np.maximum(q * self.mx[None, :last, e], q * self.mn[None, :last, e])
        r = budget_pages - 1
        tail = np.arange((n - 1) // P * P, n)
        exact, chosen = [], np.zeros(last, bool)
        for h in range(g):
            top = np.sort(np.argsort(-scores[h], kind="stable")[:r])  # ties to the lower page
            chosen[top] = True
            exact.append(np.concatenate([(top[:, None] * P + np.arange(P)).ravel(), tail]))
        sel = np.flatnonzero(chosen)
        order = sel[np.argsort(-scores[:, sel].max(0), kind="stable")]  # most important first
        return {"exact": exact, "scan_ops": 2.0 * last * g, "h2d_bytes": len(sel) * P * self.token_bytes,
                "fetch_units": order, "fetch_unit_tokens": np.full(len(order), P)}

    def footprint(self):
        pages = (self.n + self.page_size - 1) // self.page_size
        meta = pages * self.token_bytes  # a min and a max row per page, as one token's key + value
        return {"gpu_bytes": meta + (self.n - max(0, pages - 1) * self.page_size) * self.token_bytes}
