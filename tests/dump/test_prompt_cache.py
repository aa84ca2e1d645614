"""The same prompt recipe gives the same prompt on every run, whether its text is freshly extracted or
read back from the text cache (retro_bench/dump/prompts.py, docs/traces.md).

Regression test for issue 16 defect 1: on a machine with an empty cache the first dump built its prompt
from the freshly extracted text (Moby-Dick holds "\\r\\n" line ends) and every later dump from the cached
copy read back with universal newlines ("\\n"), so the GGUF and the HF dump of the dumper test got
different prompt_sha256 on a new machine's first run only.

Runs with an empty cache (XDG_CACHE_HOME in a temporary directory), builds each recipe's prompt twice
(fresh, then cached) and compares the prompt bytes. Needs only Debian's Rscript/bible (scripts/setup.sh)
and a stand-in word tokenizer: the text the model sees is what is compared, not token ids of a model.
"""

import hashlib
import os
import re
import shutil
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))  # the package's pure Python

from retro_bench.dump import prompts  # noqa: E402


class WordTokenizer:
    """Splits at whitespace; offsets like a Hugging Face fast tokenizer's. No chat template."""

    chat_template = None

    def __call__(self, text, add_special_tokens=False, return_offsets_mapping=False):
        spans = [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]
        out = {"input_ids": [hash(text[a:b]) & 0xFFFF for a, b in spans]}
        if return_offsets_mapping:
            out["offset_mapping"] = spans
        return out


def sha(s):
    return hashlib.sha256(s.encode("utf-8")).hexdigest()


class PromptCache(unittest.TestCase):
    def setUp(self):
        self.cache = tempfile.mkdtemp(prefix="retro-text-cache-")
        self.old = os.environ.get("XDG_CACHE_HOME")
        os.environ["XDG_CACHE_HOME"] = self.cache

    def tearDown(self):
        if self.old is None:
            os.environ.pop("XDG_CACHE_HOME", None)
        else:
            os.environ["XDG_CACHE_HOME"] = self.old
        shutil.rmtree(self.cache, ignore_errors=True)

    def check_recipe(self, recipe):
        cached = os.path.join(self.cache, "retro-bench", "texts", recipe["text"].replace(":", "-") + ".txt")
        self.assertFalse(os.path.exists(cached), "the cache must start empty")
        fresh = prompts.build_prompt(recipe, WordTokenizer(), chat=False)
        self.assertTrue(os.path.exists(cached), "the first build must cache the text")
        again = prompts.build_prompt(recipe, WordTokenizer(), chat=False)
        self.assertEqual(sha(fresh["text"]), sha(again["text"]),
                         f"{recipe['text']}: the prompt from the freshly extracted text differs from the one "
                         f"built from the cached copy")
        self.assertEqual(fresh["ids"], again["ids"])
        self.assertEqual(fresh["needle_tokens"], again["needle_tokens"])
        self.assertNotIn("\r", fresh["text"])  # one newline convention, whatever the source uses

    @unittest.skipUnless(shutil.which("Rscript"), "Rscript missing: run scripts/setup.sh")
    def test_mobydick_prompt_is_the_same_fresh_and_cached(self):
        # The recipe of the dumper test (datasets/recipes/niah-mobydick-1k.json), here in words.
        self.check_recipe({"kind": "niah", "text": "mobydick", "prompt_tokens": 1000, "depth": 0.5,
                           "needle": "The secret code to open the lighthouse vault is 7481.",
                           "question": "What is the secret code to open the lighthouse vault?"})

    @unittest.skipUnless(shutil.which("bible"), "bible missing: run scripts/setup.sh")
    def test_kjv_prompt_is_the_same_fresh_and_cached(self):
        self.check_recipe({"kind": "excerpt", "text": "kjv", "prompt_tokens": 800, "start": 0.3})


if __name__ == "__main__":
    unittest.main(verbosity=2)
