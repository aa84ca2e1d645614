"""Full-attention decode with PyTorch's scaled_dot_product_attention on the GPU: the peer a user's
framework already calls, timed on the same shapes as retro_gpu_check's wave run (one Llama-3-8B-shaped
layer: 32 query / 8 KV heads, head_dim 128, fp16, one query token per sequence), every SDPA backend.

    PYTHONPATH=python python3 -m retro_bench.gpu.sdpa_baseline OUT.json [--contexts 32768,131072] [--batches 1,8,32]
                                                  [--hbm BYTES_PER_S]

Prints one line per (context, batch, backend) and writes them to OUT.json. Random inputs (never zeros),
CUDA events, 3 warm-ups then the median of 20 single calls. Needs torch with CUDA (the GPU machines
have it); exits 77 without a device.
"""
import argparse
import json
import statistics
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--contexts", default="32768,131072")
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--hbm", type=float, default=0.0, help="device-memory ceiling (bytes/s) for fractions")
    a = ap.parse_args()
    try:
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError as e:
        print(f"sdpa_baseline: no torch ({e})", file=sys.stderr)
        return 77
    if not torch.cuda.is_available():
        print("sdpa_baseline: no CUDA device", file=sys.stderr)
        return 77
    hq, hkv, d = 32, 8, 128
    backends = [("flash", SDPBackend.FLASH_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION),
                ("cudnn", SDPBackend.CUDNN_ATTENTION)]
    rows = []
    for n in [int(x) for x in a.contexts.split(",")]:
        for b in [int(x) for x in a.batches.split(",")]:
            kv_bytes = 2.0 * b * hkv * n * d * 2
            if 1.5 * kv_bytes > torch.cuda.mem_get_info()[0]:
                rows.append(dict(context=n, batch=b, status="does not fit"))
                continue
            q = torch.randn(b, hq, 1, d, device="cuda", dtype=torch.float16)
            k = torch.randn(b, hkv, n, d, device="cuda", dtype=torch.float16)
            v = torch.randn(b, hkv, n, d, device="cuda", dtype=torch.float16)
            for name, be in backends:
                try:
                    with sdpa_kernel(be):
                        for _ in range(3):
                            F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
                        torch.cuda.synchronize()
                        times = []
                        for _ in range(20):
                            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                            s.record()
                            F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
                            e.record()
                            e.synchronize()
                            times.append(s.elapsed_time(e) * 1e3)
                except Exception as ex:  # a backend that does not take this shape
                    rows.append(dict(context=n, batch=b, backend=name, status=str(ex).splitlines()[0][:160]))
                    continue
                us = statistics.median(times)
                r = dict(context=n, batch=b, backend=name, status="ok", us=round(us, 2), kv_bytes=kv_bytes,
                         bytes_per_s=kv_bytes / (us * 1e-6))
                if a.hbm > 0:
                    r["hbm_frac"] = r["bytes_per_s"] / a.hbm
                rows.append(r)
                frac = f"  {100 * r['hbm_frac']:.0f}% of HBM" if a.hbm > 0 else ""
                print(f"sdpa {name:9s} N={n:7d} B={b:3d} {us:10.1f} us  {r['bytes_per_s'] / 1e9:7.0f} GB/s{frac}",
                      flush=True)
            del q, k, v
            torch.cuda.empty_cache()
    with open(a.out, "w") as f:
        json.dump(dict(device=torch.cuda.get_device_name(0), torch=torch.__version__, rows=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
