"""The module imports in the trace dumper's venv (~/.cache/retro-bench/dump-venv, a --system-site-packages
venv over /usr/bin/python3, the same ABI), where the closed-loop runner uses it next to torch, and a
method runs there. Exit 77 (ctest: skipped) when the venv has not been made (scripts/setup.sh)."""

import os
import subprocess
import sys

VENV = os.environ.get("RETRO_DUMP_VENV") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
    "retro-bench", "dump-venv")
VPY = os.path.join(VENV, "bin", "python")

if not os.path.exists(VPY):
    print(f"SKIPPED: the dump venv is missing ({VENV}); run scripts/setup.sh", flush=True)
    sys.exit(77)

CODE = """
import numpy as np, retro_bench as rb
rng = np.random.default_rng(0)
k = rng.standard_normal((200, 64), dtype=np.float32); v = rng.standard_normal((200, 64), dtype=np.float32)
q = rng.standard_normal((2, 64), dtype=np.float32)
m = rb.HeadMethod('oracle_topk', {'k': 1e9}, 64, 2)
m.build(k[:199], v[:199]); m.append(k[199:], v[199:])
r = m.attend(q, 0); out, lse = rb.full_attention(q, k, v)
assert np.abs(r['out'] - out).max() < 1e-5, 'oracle with k = all differs from full attention'
print('ok', rb.__file__)
"""
p = subprocess.run([VPY, "-c", CODE], capture_output=True, text=True, env=os.environ.copy())
print(p.stdout, p.stderr)
if p.returncode != 0 or not p.stdout.startswith("ok"):
    sys.exit(1)
