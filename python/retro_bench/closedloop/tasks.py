"""The closed loop's cases, built from the config's "fidelity" and "niah" sections before any model
work (token ids only; the tokenizer is the model's).

fidelity: a book excerpt of exactly prompt_tokens tokens (no chat template, no instruction: plain text)
  and the continuation_tokens tokens that follow it in the book (teacher-forced; the scored next-token
  predictions); texts from python/retro_bench/dump/prompts.py (Debian packages). With "random_prompt": N (the tiny
  random Llama, which has no tokenizer) random token ids instead.
niah: RULER-style needle in a haystack: chat-wrapped book text of prompt_tokens tokens with needles
  "The special magic number for <key> is: <value>." inserted at sentence ends; "single" has one needle
  at the depth, "multikey" has num_keys needles with distinct keys (the asked one at the depth, the
  others spread over the text). The question asks for the number of one key and the assistant's answer
  starts with RULER's answer prefix; the greedy answer is scored by exact match of the value string.
  "haystack": "per-case" (default): every case has its own haystack, keys and values (seeded);
  "shared": the cases of one (text, length) share a haystack with a needle at each depth and differ
  only in the question (multikey) or the needle kept (single), so their prefills share a prefix."""

import hashlib
import json

import numpy as np


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
        from ..dump import prompts
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


class _Niah:
    """The pieces every NIAH prompt is made of, for one tokenizer: the chat-wrapped head, needles,
    question and answer prefix (RULER's wording), book text as tokens, sentence ends."""

    def __init__(self, tok):
        self.tok = tok
        self.pre, self.post = _chat_parts(tok)
        self.head = self.enc(self.pre + "Read the text and answer the question after it.\n\n")

    def enc(self, s):
        return self.tok(s, add_special_tokens=False)["input_ids"]

    def tail(self, key):
        return self.enc(f"\n\nQuestion: What is the special magic number for {key} mentioned in the text? "
                        f"Answer with the number only.{self.post}The special magic number for {key} "
                        "mentioned in the text is")

    def needle(self, key, value):
        return self.enc(f" The special magic number for {key} is: {value}.")

    def haystack(self, full, rng, n, text):
        """n tokens of the book from a seeded start in its 5-60% (a word boundary)."""
        start = int(rng.uniform(0.05, 0.6) * len(full))
        while start < len(full) and not full[start].isspace():
            start += 1
        hay = self.enc(full[start:start + n * 8].lstrip())
        if len(hay) < n:
            raise TaskError(f"niah: text '{text}' too short for {n} haystack tokens")
        return hay[:n]

    def sentence_ends(self, hay):
        ends = [i + 1 for i, t in enumerate(hay[:-1]) if self.tok.decode([t]).rstrip().endswith((".", "!", "?"))]
        return ends or list(range(len(hay)))

    @staticmethod
    def keys_values(rng, n):
        if 2 * n > len(KEY_WORDS):
            raise TaskError(f"niah: {n} needles need {2 * n} distinct key words (there are {len(KEY_WORDS)})")
        words = rng.choice(len(KEY_WORDS), size=2 * n, replace=False)
        keys = [f"{KEY_WORDS[words[2 * i]]}-{KEY_WORDS[words[2 * i + 1]]}" for i in range(n)]
        return keys, [str(v) for v in rng.integers(100000, 999999, size=n)]

    def assemble(self, hay, inserts, needles, tail):
        """head + hay with needles[j] inserted before hay position pos for each (pos, j) + tail; returns
        (ids, position of needle 0)."""
        ids, last, needle_pos = list(self.head), 0, None
        for pos, j in sorted(inserts):
            ids += hay[last:pos]
            if j == 0:
                needle_pos = len(ids)
            ids += needles[j]
            last = pos
        return ids + hay[last:] + tail, needle_pos


def _niah_case(spec, ids, answer, needle_pos, max_new, desc):
    return dict(id=_case_id("niah", spec), kind="niah", ids=ids, continuation=[], greedy_tokens=max_new,
                answer=answer, needle_token=needle_pos, desc=desc)


def niah_cases(cfg, tok):
    n = cfg.get("niah") or {}
    if not n:
        return []
    if tok is None:
        raise TaskError("niah needs a tokenizer (the tiny random Llama has none)")
    mode = n.get("haystack", "per-case")
    if mode not in ("per-case", "shared"):
        raise TaskError(f"niah.haystack: unknown mode '{mode}' (per-case, shared)")
    for variant in n.get("variants", ["single"]):
        if variant not in ("single", "multikey"):
            raise TaskError(f"niah.variants: unknown variant '{variant}' (single, multikey)")
    return (_shared_haystack_cases if mode == "shared" else _per_case_cases)(n, _Niah(tok))


def _per_case_cases(n, nb):
    """Every case its own haystack (a seeded start in the text), keys and values."""
    from ..dump import prompts
    seed, num_keys, max_new = int(n.get("seed", 1)), int(n.get("num_keys", 4)), int(n.get("max_new_tokens", 8))
    cases = []
    idx = 0
    for text in n["texts"]:
        full = prompts.load_text(text)
        for pl in n["prompt_tokens"]:
            for depth in n["depths"]:
                for variant in n.get("variants", ["single"]):
                    rng = np.random.default_rng([seed, idx])
                    keys, values = nb.keys_values(rng, num_keys)
                    k_n = 1 if variant == "single" else num_keys
                    # the needles: the asked one at `depth`, distractors evenly spread away from it
                    depths = [float(depth)] + [((i + 0.5) / (k_n - 1) if k_n > 1 else 0) for i in range(k_n - 1)]
                    tail = nb.tail(keys[0])
                    needles = [nb.needle(keys[i], values[i]) for i in range(k_n)]
                    n_hay = pl - len(nb.head) - len(tail) - sum(len(x) for x in needles)
                    if n_hay < 64:
                        raise TaskError(f"niah: prompt_tokens {pl} is too small for the question and needles")
                    hay = nb.haystack(full, rng, n_hay, text)
                    ends = nb.sentence_ends(hay)
                    inserts = [(min(ends, key=lambda e: abs(e - int(dd * n_hay))), j) for j, dd in enumerate(depths)]
                    ids, needle_pos = nb.assemble(hay, inserts, needles, tail)
                    spec = {"text": text, "prompt_tokens": pl, "depth": depth, "variant": variant, "seed": seed,
                            "num_keys": num_keys, "index": idx}
                    cases.append(_niah_case(spec, ids, values[0], needle_pos, max_new, f"{text} {pl} d{depth} {variant}"))
                    idx += 1
    return cases


def _shared_haystack_cases(n, nb):
    """One haystack per (text, prompt length) shared by its cases, so that their prefills share a prefix
    (closed_loop.py runs cases in token order; LoadedModel.prefill reuses the common prefix):
    a needle at every depth of `depths` (distinct keys; num_keys > len(depths) adds distractors spread
    over the text); "multikey" cases have all the needles and ask for the one at their depth (RULER's
    MK-NIAH: the others are distractors; the cases of a haystack differ only in the question), "single"
    cases have only the needle at their depth (the same key and value). Every prompt is exactly
    prompt_tokens tokens: the haystack's end is trimmed to fit, never its start."""
    from ..dump import prompts
    seed, num_keys, max_new = int(n.get("seed", 1)), int(n.get("num_keys", 4)), int(n.get("max_new_tokens", 8))
    depths = [float(d) for d in n["depths"]]
    n_needles = max(num_keys, len(depths))
    spread = [(i + 0.5) / (n_needles - len(depths)) for i in range(n_needles - len(depths))]
    cases = []
    for ti, text in enumerate(n["texts"]):
        full = prompts.load_text(text)
        for pl in n["prompt_tokens"]:
            rng = np.random.default_rng([seed, ti, int(pl)])
            keys, values = nb.keys_values(rng, n_needles)
            needles = [nb.needle(keys[i], values[i]) for i in range(n_needles)]
            tails = [nb.tail(keys[i]) for i in range(len(depths))]
            # needle positions fixed on the shortest haystack any case of this (text, length) keeps
            n_ref = pl - len(nb.head) - max(len(t) for t in tails) - sum(len(x) for x in needles)
            if n_ref < 64:
                raise TaskError(f"niah: prompt_tokens {pl} is too small for the question and {n_needles} needles")
            hay = nb.haystack(full, rng, pl, text)
            ends = nb.sentence_ends(hay[:n_ref])
            at = [min(ends, key=lambda e: abs(e - int(dd * n_ref))) for dd in depths + spread]
            for j, depth in enumerate(depths):
                for variant in n.get("variants", ["single"]):
                    chosen = list(range(n_needles)) if variant == "multikey" else [j]
                    # needle j first: assemble() reports its position
                    order = [j] + [i for i in chosen if i != j]
                    n_hay = pl - len(nb.head) - len(tails[j]) - sum(len(needles[i]) for i in chosen)
                    ids, needle_pos = nb.assemble(hay[:n_hay], [(at[i], order.index(i)) for i in chosen],
                                                  [needles[i] for i in order], tails[j])
                    # everything the prompt depends on: the other needles (depths, their count), the
                    # text's place in the list (it seeds the haystack), so an edited config is new cases
                    spec = {"text": text, "prompt_tokens": pl, "depth": depth, "variant": variant, "seed": seed,
                            "num_keys": num_keys, "haystack": "shared", "depths": depths, "text_index": ti}
                    cases.append(_niah_case(spec, ids, values[j], needle_pos, max_new,
                                            f"{text} {pl} d{depth} {variant} shared"))
    return cases
