"""A lease config (configs/gpu/lease-every-method-*.json) cut to the suite's size: the same methods, parameters
and cuda/system keys, its synthetic trace at 2K tokens and 12 decode steps (written to TRACE), batches 1 and 2,
2 warm steps. The suite runs scripts/gpu/lease-figure12.sh on it against the emulated retro-bench
(GpuChecks.LeaseFigure12Script), so the config a lease runs is the one tested, at a size this machine runs.
usage: tiny-lease-config.py CONFIG OUT TRACE
"""
import json
import sys

config, out, trace = sys.argv[1:4]
with open(config) as f:
    c = json.load(f)
(t,) = c["traces"]  # the lease configs hold one synthetic trace each
t["path"] = trace
t["synth"].update(prompt_len=2048, decode_steps=12)
c["cuda"].update(batch=[1, 2], warm_steps=2)
c["name"] = c["name"] + "-tiny"
with open(out, "w") as f:
    json.dump(c, f, indent=1)
print(" ".join(m["name"] for m in c["methods"]))
