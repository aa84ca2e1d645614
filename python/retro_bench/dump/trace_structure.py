#!/usr/bin/env python3
"""Structure of a trace beyond `retro-bench inspect`: the numbers behind the smollm2 synth preset's sink
and recency model (docs/traces.md, "Key mean and sinks", "Where the attention goes").

1. Key mean and sinks. For each layer, averaged over its KV heads / query heads:

  |mu|        norm of the mean of the prompt keys (tokens >= 4), post-RoPE
  sd_mu       std of the keys' projection on mu/|mu| (how much the mean varies per token)
  k0_mu       token 0's key projected on mu/|mu| (a sink key lacking the mean: ~0)
  q_mu        decode queries projected on mu/|mu| (negative: queries point away from the mean)
  |q|         decode query norm
  dscore      std over tokens of the change of q.k/sqrt(d) between consecutive decode steps, divided by
              the std of q.k/sqrt(d) (how much a step reshuffles the scores)
  qcos        cosine of consecutive decode queries

Then the low-band share of the key mean: the fraction of |mu|^2 in RoPE pairs that turn <= 1 rad over
the trace (rope_layout and rope_theta from the trace's attributes).

2. Where the attention goes (every 8th decode step): the share of the exact top-100 tokens that are sinks
(tokens 0-3), within the last 64 / 137 tokens, or farther; the attention mass by distance band; and, for
the far top-100 tokens, the share whose neighbour (+-1) is also in the top-100.

3. Positional locality of keys: mean cosine of centered keys `distance` tokens apart (random pairs: ~0).

  trace_structure.py TRACE.h5 [--layers 0,5,10] [--stride 4]
"""
import argparse

import h5py
import numpy as np


def attr(f, name, default=None):
    v = f.attrs.get(name, default)
    return v.decode() if isinstance(v, bytes) else v


def pair_energy(x, layout, d):
    """|pair|^2 per RoPE pair of x [..., d]: [..., d/2]."""
    if layout == "interleaved":
        return x[..., 0::2] ** 2 + x[..., 1::2] ** 2
    return x[..., : d // 2] ** 2 + x[..., d // 2:] ** 2


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--layers", default=None, help="comma-separated layers (default: all in the file)")
    ap.add_argument("--stride", type=int, default=4, help="decode steps t, t+1 sampled every STRIDE steps")
    a = ap.parse_args()
    f = h5py.File(a.trace, "r")
    npl, d = int(f.attrs["prompt_len"]), int(f.attrs["head_dim"])
    layout, theta = attr(f, "rope_layout", "half_split"), float(f.attrs["rope_theta"])
    n = npl + int(f.attrs["num_decode_steps"])
    low = theta ** (-2.0 * np.arange(d // 2) / d) * n <= 1.0
    layers = sorted(f["layers"].keys(), key=int)
    if a.layers:
        want = set(a.layers.split(","))
        layers = [x for x in layers if x in want]
    print("layer   |mu|  sd_mu  k0_mu   q_mu    |q|  dscore  qcos  low-band share of |mu|^2")
    rows = []
    for name in layers:
        g = f["layers"][name]
        K, Q = g["keys"][:].astype(np.float64), g["queries"][:].astype(np.float64)
        G, H = K.shape[0], Q.shape[0]
        r = []
        for h in range(H):
            k = K[h // (H // G), 4:npl]
            mu = k.mean(0)
            m = np.linalg.norm(mu)
            u = mu / m
            q = Q[h]
            t0 = np.arange(0, q.shape[0] - 1, a.stride)
            s0, s1 = (q[t0] @ k.T) / np.sqrt(d), (q[t0 + 1] @ k.T) / np.sqrt(d)
            cos = (q[t0] * q[t0 + 1]).sum(1) / np.linalg.norm(q[t0], axis=1) / np.linalg.norm(q[t0 + 1], axis=1)
            e = pair_energy(mu, layout, d)
            r.append((m, (k @ u).std(), K[h // (H // G), 0] @ u, (q @ u).mean(), np.linalg.norm(q, axis=1).mean(),
                      ((s1 - s0).std(1) / s0.std(1)).mean(), cos.mean(), e[low].sum() / e.sum()))
        r = np.array(r).mean(0)
        rows.append(r)
        print(f"{int(name):5d} {r[0]:6.1f} {r[1]:6.2f} {r[2]:6.1f} {r[3]:6.1f} {r[4]:6.1f} {r[5]:7.3f} {r[6]:5.3f} {r[7]:8.2f}")
    r = np.array(rows).mean(0)
    print(f"  all {r[0]:6.1f} {r[1]:6.2f} {r[2]:6.1f} {r[3]:6.1f} {r[4]:6.1f} {r[5]:7.3f} {r[6]:5.3f} {r[7]:8.2f}")
    positions(f, layers, npl, d)
    locality(f, layers, npl)


def positions(f, layers, npl, d):
    acc = []
    for name in layers:
        K, Q = f["layers"][name]["keys"][:].astype(np.float32), f["layers"][name]["queries"][:].astype(np.float32)
        G, H = K.shape[0], Q.shape[0]
        for h in range(H):
            for t in range(0, Q.shape[1], 8):
                n = npl + t + 1
                s = K[h // (H // G), :n] @ Q[h, t] / np.sqrt(d)
                w = np.exp(s - s.max())
                w /= w.sum()
                top = np.argsort(-s)[:100]
                dist = n - 1 - top
                far = top[(top >= 4) & (dist >= 137)]
                st = set(top.tolist())
                nb = np.mean([(x - 1 in st) or (x + 1 in st) for x in far]) if len(far) else np.nan
                acc.append([np.mean(top < 4), np.mean(dist < 64), np.mean(dist < 137), np.mean((top >= 4) & (dist >= 137)),
                            w[:4].sum(), w[n - 8:].sum(), w[n - 64:n - 8].sum(), w[n - 512:n - 64].sum(), w[4:n - 512].sum(), nb])
    a = np.nanmean(np.array(acc), 0)
    print("\ntop-100 share: sinks  last64  last137  far | mass: sinks  last8  8-64  64-512  far | far top-100 with a top-100 neighbour")
    print(f"               {a[0]:5.3f}  {a[1]:6.3f}  {a[2]:7.3f}  {a[3]:4.3f} |       {a[4]:5.3f}  {a[5]:5.3f} {a[6]:5.3f}  {a[7]:6.3f}  {a[8]:4.3f} | {a[9]:.3f}")


def locality(f, layers, npl):
    dists = [1, 4, 16, 64, 256, 1024, 4096]
    acc = {x: [] for x in dists}
    for name in layers:
        K = f["layers"][name]["keys"][:].astype(np.float64)
        for g in range(K.shape[0]):
            k = K[g, 4:npl] - K[g, 4:npl].mean(0)
            k /= np.linalg.norm(k, axis=1, keepdims=True)
            for x in dists:
                if x < len(k):
                    acc[x].append((k[x:] * k[:-x]).sum(1).mean())
    print("\ncentered key cosine at distance " + "  ".join(f"{x}: {np.mean(v):.3f}" for x, v in acc.items() if v))


if __name__ == "__main__":
    main()
