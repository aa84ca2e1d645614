#!/usr/bin/env python3
"""Where the keys' mean sits and how queries use it: the numbers behind the smollm2 synth preset's sink
model (docs/traces.md, "Key mean and sinks"). For each layer, averaged over its KV heads / query heads:

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

  key_structure.py TRACE.h5 [--layers 0,5,10] [--stride 4]
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


if __name__ == "__main__":
    main()
