"""Python methods that break the contract, one fault per `fault` value, at one (KV head, step), for
tests/python/test_py_methods.py: each must fail the run by name (file, class, layer, KV head, step)."""
import numpy as np

FAULTS = ["none", "raise", "out_of_range", "duplicate", "wrong_lists", "float_ids", "nan_log_weight",
          "nan_centroid", "centroid_shape", "short_log_weights", "bad_key", "keep_kv", "negative_bytes",
          "build_raises", "append_raises", "bad_footprint", "none_returned"]


class Faulty:
    """Streaming-like selection that misbehaves as `fault` says at KV head `head`, step `step`."""
    params = [
        {"name": "fault", "type": "string", "default": "none", "choices": FAULTS,
         "description": "what goes wrong", "source": "test"},
        {"name": "head", "type": "int", "default": 1, "min": 0, "max": 64, "description": "KV head it happens on",
         "source": "test"},
        {"name": "step", "type": "int", "default": 2, "min": 0, "max": 1e6, "description": "decode step it happens at",
         "source": "test"},
    ]

    def __init__(self, params):
        self.p = params

    def build(self, ctx, keys, values, prefill_queries):
        self.ctx = ctx
        if self.p["fault"] == "build_raises" and ctx.kv_head == self.p["head"]:
            raise RuntimeError("cannot index this head")

    def append(self, kv, pos):
        self.pos = pos
        if self.p["fault"] == "append_raises" and self._here(pos - self.ctx.prompt_len):
            raise KeyError("no such token")

    def footprint(self):
        if self.p["fault"] == "bad_footprint" and self._here(self.pos - self.ctx.prompt_len):
            return {"gpu": 1.0}
        return {"gpu_bytes": 1.0}

    def _here(self, step):
        return self.ctx.kv_head == self.p["head"] and step == self.p["step"]

    def select(self, queries, step, kv):
        ids = np.concatenate([np.arange(4), np.arange(kv.n - 16, kv.n)])
        if not self._here(step):
            return ids
        f = self.p["fault"]
        if f == "raise":
            raise ValueError("boom")
        if f == "out_of_range":
            return np.append(ids, kv.n)
        if f == "duplicate":
            return np.append(ids, 0)
        if f == "wrong_lists":  # two lists for a group of three
            return [ids, ids]
        if f == "float_ids":
            return ids.astype(np.float32)
        if f == "nan_log_weight":
            return {"exact": ids, "log_weights": np.full(len(ids), np.nan)}
        if f == "nan_centroid":
            c = np.full((1, kv.d), np.nan, np.float32)
            return {"exact": ids, "estimated": {"centroids": c, "sizes": np.ones(1), "value_sums": np.zeros((1, kv.d))}}
        if f == "centroid_shape":
            c = np.zeros((1, kv.d + 1), np.float32)
            return {"exact": ids, "estimated": {"centroids": c, "sizes": np.ones(1), "value_sums": np.zeros((1, kv.d))}}
        if f == "short_log_weights":
            return {"exact": ids, "log_weights": np.zeros(len(ids) - 1)}
        if f == "bad_key":
            return {"exact": ids, "h2d_byte": 3.0}
        if f == "keep_kv":
            self.kept = kv.keys[:10]
            return ids
        if f == "negative_bytes":
            return {"exact": ids, "h2d_bytes": -1.0}
        if f == "none_returned":
            return None
        return ids


class NotAMethod:
    """No select: refused at load."""

    def build(self, ctx, keys, values, prefill_queries):
        pass


class BadDeclaration:
    params = [{"name": "k", "type": "integer", "default": 4, "description": "", "source": ""}]

    def __init__(self, params):
        pass

    def build(self, ctx, keys, values, prefill_queries):
        pass

    def select(self, queries, step, kv):
        return np.arange(kv.n)


class Hangs:
    """Streaming-like selection whose select, while $RETRO_TEST_HANG names a file, creates that file and
    then spins in pure Python (up to 60 s): a method that a stop request must interrupt mid-call
    (tests/python/test_py_methods.py, Interrupt)."""
    params = []

    def __init__(self, params):
        pass

    def build(self, ctx, keys, values, prefill_queries):
        pass

    def select(self, queries, step, kv):
        import os
        import time
        marker = os.environ.get("RETRO_TEST_HANG")
        if marker and step == 1:
            open(marker, "a").close()
            end = time.time() + 60
            while time.time() < end:
                pass
        return np.concatenate([np.arange(4), np.arange(kv.n - 16, kv.n)])
