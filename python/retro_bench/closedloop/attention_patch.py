"""The attention patch: every Llama-family attention module of the model gets a forward that
- computes q, k, v and RoPE with the module's own weights and functions, appends k, v to the
  transformers cache (so dense layers and the reference keep working),
- records the post-RoPE queries of the last prompt positions during prefill (query-aware methods build
  on them, as the dumper records `prefill_queries`),
- on a decode step (one query position) in a sparse layer, hands the new token's k/v and the step's
  queries to the method of every KV head (rb.HeadMethod, one per (layer, KV head); the GQA group's
  queries together) and uses the method's attention output,
- otherwise computes exact eager attention: the same operations as transformers' LlamaAttention
  (eager), so the reference run is the unpatched model's computation.

q/k reach the methods in the channel order the open-loop traces store (`layout_perm`: GGUF models in
llama.cpp's adjacent-pair order, docs/trace-format.md), so a method sees the same vectors in the closed
and the open loop; values and outputs are in the model's order (no permutation there)."""

import importlib
import math
import time

import numpy as np


class PatchError(Exception):
    pass


class AttentionPatch:
    """Install with `install(model)`. Attributes the driver sets between runs:
    heads: None (exact attention everywhere) or a list over layers of None (dense layer) or a list of
           nkv HeadMethods; `step`: the decode step index passed to attend();
    record: None or (first_position, {layer: np.ndarray [nq, n, d]}) filled during prefill."""

    def __init__(self, model, torch, layout_perm=None):
        self.torch = torch
        cfg = model.config
        self.nq, self.nkv = cfg.num_attention_heads, cfg.num_key_value_heads
        self.d = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.nq
        self.group = self.nq // self.nkv
        self.perm = layout_perm
        self.heads = None
        self.step = 0
        self.record = None
        self.fast_exact = True  # False: prefill chunks by the eager operations too (the comparison's baseline)
        self.stats = []  # one dict per (layer, KV head) attend call of the current step
        self.method_s = 0.0  # seconds spent in append + attend this run
        self._install(model)

    def _install(self, model):
        torch = self.torch
        for layer in model.model.layers:
            attn = layer.self_attn
            mod = importlib.import_module(type(attn).__module__)
            for fn in ("apply_rotary_pos_emb", "repeat_kv"):
                if not hasattr(mod, fn):
                    raise PatchError(f"{type(attn).__name__} ({mod.__name__}) has no {fn}: only Llama-family "
                                     "attention is supported")
            if getattr(attn.config, "pretraining_tp", 1) > 1:
                raise PatchError("pretraining_tp > 1 is not supported")

            def forward(hidden_states, attention_mask=None, position_ids=None, past_key_value=None,
                        output_attentions=False, use_cache=False, cache_position=None,
                        position_embeddings=None, _attn=attn, _mod=mod, **kwargs):
                return self._forward(_attn, _mod, hidden_states, attention_mask, position_ids,
                                     past_key_value, cache_position, position_embeddings)
            attn.forward = forward
        self.torch_no_grad = torch.no_grad

    def _forward(self, attn, mod, x, attention_mask, position_ids, cache, cache_position, pos_emb):
        torch = self.torch
        bsz, T, _ = x.size()
        nq, nkv, d = self.nq, self.nkv, self.d
        q = attn.q_proj(x).view(bsz, T, nq, d).transpose(1, 2)
        k = attn.k_proj(x).view(bsz, T, nkv, d).transpose(1, 2)
        v = attn.v_proj(x).view(bsz, T, nkv, d).transpose(1, 2)
        cos, sin = pos_emb if pos_emb is not None else attn.rotary_emb(v, position_ids)
        q, k = mod.apply_rotary_pos_emb(q, k, cos, sin)
        l = attn.layer_idx
        if self.record is not None:
            self._record(l, q, cache_position)
        k_new, v_new = k, v
        if cache is not None:
            k, v = cache.update(k, v, l, {"sin": sin, "cos": cos, "cache_position": cache_position})
        heads = self.heads[l] if (self.heads is not None and T == 1) else None
        if heads is not None:
            if bsz != 1:
                raise PatchError("the closed loop decodes one sequence (batch 1)")
            out = self._attend_methods(heads, q[0, :, 0], k_new[0, :, 0], v_new[0, :, 0])
            attn_output = torch.from_numpy(out).to(device=x.device, dtype=x.dtype).reshape(1, 1, nq * d)
        elif T > 1 and bsz == 1 and self.fast_exact:  # a prefill chunk (a decode step: the eager path below;
            # per-head products were no faster for one query on this machine's BLAS, docs/closed-loop.md)
            attn_output = self._exact_attention(q, k, v, attention_mask)
        else:
            kr, vr = mod.repeat_kv(k, self.group), mod.repeat_kv(v, self.group)
            w = torch.matmul(q, kr.transpose(2, 3)) / math.sqrt(d)
            if attention_mask is not None:
                w = w + attention_mask[:, :, :, :kr.shape[-2]]
            w = torch.nn.functional.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
            attn_output = torch.matmul(w, vr).transpose(1, 2).contiguous().reshape(bsz, T, nq * d)
        return attn.o_proj(attn_output), None, cache

    def _exact_attention(self, q, k, v, attention_mask, block=256):
        """Exact attention of a prefill chunk, q: [1, nq, T, d] over k, v: [1, nkv, S, d] (S >= T, the
        chunk's keys last). The eager path's operations rearranged for a 32K prompt on a few cores: per KV
        head its group's queries in one matrix product (no repeat_kv copies of K and V), q scaled before
        the product (one pass over [T, d] instead of [T, S]), the causal mask added only where it is not
        zero (the chunk's own S - T.. S columns: keys before the chunk are visible to every query; batch
        1, no padding), query blocks of `block` rows so that a score matrix stays ~0.2 GB at 32K. 1.4x
        faster than the eager path for a chunk at 32K (docs/closed-loop.md "Long prompts on a 2-core
        machine"); equal to it
        up to float rounding (bit-equal when 1/sqrt(d) is a power of two, head_dim 64). Returns
        [1, T, nq*d]."""
        torch = self.torch
        _, nq, T, d = q.shape
        S = k.shape[2]
        g = self.group
        s0 = S - T
        if attention_mask is not None:
            mask = attention_mask[0, 0, :, s0:S]
        else:  # the causal mask of the chunk's own columns
            mask = torch.full((T, T), float("-inf"), dtype=q.dtype, device=q.device).triu(1)
        qs = q[0] * (1.0 / math.sqrt(d))
        out = torch.empty((T, nq, d), dtype=q.dtype, device=q.device)
        for h in range(self.nkv):
            kt, vh = k[0, h].transpose(0, 1), v[0, h]
            for j in range(0, T, block):
                e = min(T, j + block)
                w = torch.matmul(qs[h * g:(h + 1) * g, j:e].reshape(-1, d), kt).view(g, e - j, S)
                w[:, :, s0:] += mask[j:e]
                w = torch.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
                out[j:e, h * g:(h + 1) * g] = torch.matmul(w.view(-1, S), vh).view(g, e - j, d).transpose(0, 1)
        return out.reshape(1, T, nq * d)

    def _record(self, l, q, cache_position):
        first, store = self.record
        n = next(iter(store.values())).shape[1] if store else 0
        pos = cache_position.tolist()
        sel = [j for j, p in enumerate(pos) if first <= p < first + n]
        if sel and l in store:
            arr = q[0, :, sel[0]:sel[-1] + 1].detach().float().cpu().numpy()
            store[l][:, pos[sel[0]] - first:pos[sel[-1]] - first + 1] = arr

    def to_trace_layout(self, a):
        """q/k rows [..., d] in the open-loop trace's channel order (float32, C-contiguous)."""
        a = np.ascontiguousarray(a, dtype=np.float32)
        return np.ascontiguousarray(a[..., self.perm]) if self.perm is not None else a

    def _attend_methods(self, heads, q, k, v):
        """q: [nq, d], k, v: [nkv, d] (this step's token). Returns the attention output [nq, d]."""
        t0 = time.perf_counter()
        g, d = self.group, self.d
        # one transfer for the step's q, k, v of this layer (a device model: the methods run on the host)
        qkv = self.torch.cat([q, k, v]).detach().float().cpu().numpy()
        nq, nkv = self.nq, self.nkv
        qn = self.to_trace_layout(qkv[:nq])
        kn = self.to_trace_layout(qkv[nq:nq + nkv])
        vn = np.ascontiguousarray(qkv[nq + nkv:])
        out = np.empty((self.nq, d), dtype=np.float32)
        for h, m in enumerate(heads):
            m.append(kn[h:h + 1], vn[h:h + 1])
            r = m.attend(qn[h * g:(h + 1) * g], self.step)
            out[h * g:(h + 1) * g] = r["out"]
            self.stats.append((float(np.mean(r["exact_frac"])), float(np.mean(r["est_frac"])),
                               float(r.get("h2d_bytes", 0))))
        self.method_s += time.perf_counter() - t0
        return out
