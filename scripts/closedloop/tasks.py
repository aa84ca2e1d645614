"""The closed loop's cases, built from the config's "fidelity" and "niah" sections before any model
work (token ids only; the tokenizer is the model's).

fidelity: a book excerpt of exactly prompt_tokens tokens (no chat template, no instruction: plain text)
  and the continuation_tokens tokens that follow it in the book (teacher-forced; the scored next-token
  predictions); texts from scripts/dump/prompts.py (Debian packages). With "random_prompt": N (the tiny
  random Llama, which has no tokenizer) random token ids instead.
niah: RULER-style needle in a haystack: chat-wrapped book text of prompt_tokens tokens with needles
  "The special magic number for <key> is: <value>." inserted at sentence ends; "single" has one needle
  at the depth, "multikey" has num_keys needles with distinct keys (the asked one at the depth, the
  others spread over the text). The question asks for the number of one key and the assistant's answer
  starts with RULER's answer prefix; the greedy answer is scored by exact match of the value string.
  Every case has its own key and value (seeded)."""

import hashlib
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "dump"))

KEY_WORDS = ("amber", "basalt", "cobalt", "dune", "ember", "fjord", "garnet", "harbor", "indigo", "juniper",
             "kestrel", "lantern", "meadow", "nickel", "orchid", "pebble", "quartz", "raven", "saffron",
             "thistle", "umber", "violet", "willow", "zephyr")


class TaskError(Exception):
    pass


def _case_id(kind, spec):
    return f"{kind}-" + hashlib.sha1(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:10]


def count_cases(cfg):
    """(number of fidelity cases, number of niah cases) of a config, without a tokenizer."""
    f = cfg.get("fidelity") or {}
    n_f = len(f.get("texts", [])) + (1 if f.get("random_prompt") else 0)
    n = cfg.get("niah") or {}
    n_n = (len(n.get("texts", [])) * len(n.get("prompt_tokens", [])) * len(n.get("depths", []))
           * len(n.get("variants", ["single"]))) if n else 0
    return n_f, n_n


def check_lengths(cfg, context, origin):
    """Every prompt + the tokens decoded after it within the model's context (unless the config allows
    beyond-context positions). Needs no tokenizer: prompts are built to exactly prompt_tokens tokens."""
    if not context or cfg.get("allow_beyond_context", False):
        return
    f = cfg.get("fidelity") or {}
    after = max(int(f.get("continuation_tokens", 0)), int(f.get("greedy_tokens", 0))) + 1
    lens = []
    if f.get("texts"):
        lens.append(("fidelity.prompt_tokens", int(f.get("prompt_tokens", 0)), after))
    if f.get("random_prompt"):
        lens.append(("fidelity.random_prompt", int(f["random_prompt"]), after))
    n = cfg.get("niah") or {}
    for p in n.get("prompt_tokens", []):
        lens.append(("niah.prompt_tokens", int(p), int(n.get("max_new_tokens", 8)) + 1))
    for what, pl, extra in lens:
        if pl + extra > context:
            raise TaskError(f"{origin}: {what} {pl} + {extra} decoded tokens = {pl + extra} exceeds the model's "
                            f"context ({context} tokens, max_position_embeddings); shorten the prompt or set "
                            "\"allow_beyond_context\": true")


def fidelity_cases(cfg, tok, vocab):
    f = cfg.get("fidelity") or {}
    cases = []
    n_cont = int(f.get("continuation_tokens", 0))
    n_greedy = int(f.get("greedy_tokens", 0))
    if f.get("random_prompt"):
        n = int(f["random_prompt"])
        ids = np.random.default_rng(int(f.get("seed", 0))).integers(3, vocab, size=n + n_cont + 1).tolist()
        spec = {"random_prompt": n, "seed": int(f.get("seed", 0)), "cont": n_cont, "greedy": n_greedy}
        cases.append(dict(id=_case_id("fidelity", spec), kind="fidelity", ids=ids[:n], continuation=ids[n:],
                          greedy_tokens=n_greedy, answer=None, desc=f"random ids {n}"))
    if f.get("texts"):
        if tok is None:
            raise TaskError("fidelity.texts needs a tokenizer (the tiny random Llama has none: use random_prompt)")
        import prompts
        pl = int(f["prompt_tokens"])
        for t in f["texts"]:
            name, start = (t, 0.0) if isinstance(t, str) else (t["text"], float(t.get("start", 0.0)))
            full = prompts.load_text(name)
            s = int(start * len(full))
            while s < len(full) and not full[s].isspace():
                s += 1
            body = full[s:s + (pl + n_cont + 1) * 8].lstrip()
            ids = tok(body, add_special_tokens=False)["input_ids"]
            if len(ids) < pl + n_cont + 1:
                raise TaskError(f"fidelity: text '{name}' from {start} has only {len(ids)} tokens "
                                f"(need {pl + n_cont + 1})")
            spec = {"text": name, "start": start, "prompt_tokens": pl, "cont": n_cont, "greedy": n_greedy}
            cases.append(dict(id=_case_id("fidelity", spec), kind="fidelity", ids=ids[:pl],
                              continuation=ids[pl:pl + n_cont + 1], greedy_tokens=n_greedy, answer=None,
                              desc=f"{name}@{start} {pl}+{n_cont}"))
    return cases


def _chat_parts(tok):
    if getattr(tok, "chat_template", None):
        text = tok.apply_chat_template([{"role": "user", "content": "\x00"}], tokenize=False,
                                       add_generation_prompt=True)
        pre, post = text.split("\x00")
        return pre, post
    return "", "\n"


def niah_cases(cfg, tok):
    n = cfg.get("niah") or {}
    if not n:
        return []
    if tok is None:
        raise TaskError("niah needs a tokenizer (the tiny random Llama has none)")
    import prompts
    seed = int(n.get("seed", 1))
    num_keys = int(n.get("num_keys", 4))
    max_new = int(n.get("max_new_tokens", 8))
    pre, post = _chat_parts(tok)
    enc = lambda s: tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    cases = []
    idx = 0
    for text in n["texts"]:
        full = prompts.load_text(text)
        for pl in n["prompt_tokens"]:
            for depth in n["depths"]:
                for variant in n.get("variants", ["single"]):
                    if variant not in ("single", "multikey"):
                        raise TaskError(f"niah.variants: unknown variant '{variant}' (single, multikey)")
                    rng = np.random.default_rng([seed, idx])
                    words = rng.choice(len(KEY_WORDS), size=2 * num_keys, replace=False)
                    keys = [f"{KEY_WORDS[words[2 * i]]}-{KEY_WORDS[words[2 * i + 1]]}" for i in range(num_keys)]
                    values = [str(v) for v in rng.integers(100000, 999999, size=num_keys)]
                    k_n = 1 if variant == "single" else num_keys
                    # the needles: the asked one at `depth`, distractors evenly spread away from it
                    depths = [float(depth)] + [((i + 0.5) / (k_n - 1) if k_n > 1 else 0) for i in range(k_n - 1)]
                    head = enc(pre + "Read the text and answer the question after it.\n\n")
                    q = (f"\n\nQuestion: What is the special magic number for {keys[0]} mentioned in the text? "
                         f"Answer with the number only.{post}The special magic number for {keys[0]} "
                         "mentioned in the text is")
                    tail = enc(q)
                    needles = [enc(f" The special magic number for {keys[i]} is: {values[i]}.") for i in range(k_n)]
                    n_hay = pl - len(head) - len(tail) - sum(len(x) for x in needles)
                    if n_hay < 64:
                        raise TaskError(f"niah: prompt_tokens {pl} is too small for the question and needles")
                    start = int(rng.uniform(0.05, 0.6) * len(full))
                    while start < len(full) and not full[start].isspace():
                        start += 1
                    hay = enc(full[start:start + n_hay * 8].lstrip())
                    if len(hay) < n_hay:
                        raise TaskError(f"niah: text '{text}' too short for {pl} tokens")
                    hay = hay[:n_hay]
                    ends = [i + 1 for i, t in enumerate(hay[:-1]) if tok.decode([t]).rstrip().endswith((".", "!", "?"))]
                    if not ends:
                        ends = list(range(n_hay))
                    inserts = []
                    for j, dd in enumerate(depths):
                        want = int(dd * n_hay)
                        inserts.append((min(ends, key=lambda e: abs(e - want)), j))
                    ids = list(head)
                    last = 0
                    needle_pos = None
                    for pos, j in sorted(inserts):
                        ids += hay[last:pos]
                        if j == 0:
                            needle_pos = len(ids)
                        ids += needles[j]
                        last = pos
                    ids += hay[last:] + tail
                    spec = {"text": text, "prompt_tokens": pl, "depth": depth, "variant": variant, "seed": seed,
                            "num_keys": num_keys, "index": idx}
                    cases.append(dict(id=_case_id("niah", spec), kind="niah", ids=ids, continuation=[],
                                      greedy_tokens=max_new, answer=values[0], needle_token=needle_pos,
                                      desc=f"{text} {pl} d{depth} {variant}"))
                    idx += 1
    return cases
