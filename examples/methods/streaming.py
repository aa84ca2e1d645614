"""StreamingLLM in Python: the first `sink` tokens plus the last `window` (the current token included).

The twin of the compiled `streaming` method (lib/methods/streaming.cpp); tests/python/test_py_methods.py
checks that both select the same tokens. Run it like any method:
    {"name": "py:examples/methods/streaming.py:StreamingLLM", "params": {"sink": 4, "window": 64}}
"""
import numpy as np

from retro_bench import Method, Param


class StreamingLLM(Method):
    description = "StreamingLLM static pattern in Python: first `sink` tokens + last `window` tokens"
    paper = "Xiao et al., Efficient Streaming Language Models with Attention Sinks (ICLR 2024)"
    sink = Param(4, min=0, max=1e9, description="initial (attention-sink) tokens kept",
                 source="RetroInfer steady zone (4+64)")
    window = Param(64, min=1, max=1e9, description="most recent tokens kept, the current one included",
                   source="RetroInfer steady zone (4+64)")

    def build(self, ctx, keys, values, prefill_queries):
        """keys, values: [prompt_len, d]; nothing to index."""
        self.token_bytes = ctx.kv_token_bytes

    def select(self, queries, step, kv):
        """queries: [group, d]; kv.n visible tokens -> one id list shared by the group."""
        n = kv.n
        s = min(self.sink, n)
        # sink and window stay on the GPU (new tokens are produced there): no traffic, no scan
        return np.concatenate([np.arange(s), np.arange(max(s, n - self.window), n)])

    def footprint(self):
        return {"gpu_bytes": (self.sink + self.window) * self.token_bytes}
