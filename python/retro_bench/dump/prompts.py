"""Prompts from real text for trace dumps (datasets/recipes/*.json).

Texts come from Debian packages (installed by scripts/setup.sh) and are cached as plain UTF-8 with "\n"
line ends under ${XDG_CACHE_HOME:-~/.cache}/retro-bench/texts/ (or $RETRO_TEXT_CACHE):

  mobydick            r-cran-tokenizers: Moby-Dick (Project Gutenberg; the licence header is skipped)
  austen:<novel>      r-cran-janeaustenr: prideprejudice, sensesensibility, emma, mansfieldpark,
                      northangerabbey, persuasion
  kjv                 bible-kjv-text + bible-kjv: the King James Bible, Genesis..Revelation (verse
                      references removed)

A recipe is a JSON object:

  {"kind": "excerpt" | "niah",
   "text": "mobydick",            one of the sources above
   "prompt_tokens": 8000,         target length of the whole prompt (chat template included), tokens
   "start": 0.0,                  where the excerpt starts, as a fraction of the text (default 0)
   "instruction": "...",          excerpt: the request after the text
   "needle": "...",               niah: the sentence inserted into the text
   "question": "...", "answer": "...",
   "depth": 0.5,                  niah: where the needle goes, fraction of the excerpt (0 = start)
   "question_first": false}       niah: the question before the text instead of after it

build_prompt() fits the excerpt to prompt_tokens with the model's tokenizer (binary search over the
excerpt length, cut at a word boundary, needle at the sentence boundary nearest the depth) and reports
where the needle's tokens are.
"""

import json
import os
import re
import subprocess

from ..atomic import write_text

AUSTEN = ("prideprejudice", "sensesensibility", "emma", "mansfieldpark", "northangerabbey",
          "persuasion")
RECIPE_KEYS = {"kind", "text", "prompt_tokens", "start", "instruction", "needle", "question", "answer",
               "depth", "question_first", "description"}


class PromptError(Exception):
    pass


def cache_dir():
    """$RETRO_TEXT_CACHE, else ${XDG_CACHE_HOME:-~/.cache}/retro-bench/texts (tests set the first to start
    from an empty text cache without moving the venv or the model caches)."""
    if os.environ.get("RETRO_TEXT_CACHE"):
        return os.environ["RETRO_TEXT_CACHE"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "retro-bench", "texts")


def _run(cmd, what, package):
    try:
        r = subprocess.run(cmd, capture_output=True, check=True)
    except FileNotFoundError:
        raise PromptError(f"text '{what}': {cmd[0]} not found (Debian package {package}; run "
                          f"scripts/setup.sh)")
    except subprocess.CalledProcessError as e:
        raise PromptError(f"text '{what}': {' '.join(cmd)} failed ({e.stderr.decode()[-300:].strip()}); "
                          f"is Debian package {package} installed? (scripts/setup.sh)")
    return r.stdout.decode("utf-8")


def _extract(name):
    if name == "mobydick":
        t = _run(["Rscript", "-e", 'data(mobydick, package="tokenizers"); cat(mobydick)'], name,
                 "r-cran-tokenizers")
        t = t.lstrip("\ufeff")
        m = re.search(r"CHAPTER 1\.? Loomings", t)
        m2 = [x for x in re.finditer(r"CHAPTER 1\.? Loomings", t)]
        if m2:  # the table of contents names chapter 1 too: start at the last occurrence
            t = t[m2[-1].start():]
        elif m:
            t = t[m.start():]
        end = t.find("End of Project Gutenberg")
        return t[:end] if end > 0 else t
    if name.startswith("austen:"):
        novel = name.split(":", 1)[1]
        if novel not in AUSTEN:
            raise PromptError(f"unknown text '{name}': Austen novels are {', '.join(AUSTEN)}")
        return _run(["Rscript", "-e", f'cat(janeaustenr::{novel}, sep="\\n")'], name, "r-cran-janeaustenr")
    if name == "kjv":
        t = _run(["bible", "-f", "-p", "/usr/lib", "gen1:1-rev22:21"], name, "bible-kjv bible-kjv-text")
        return re.sub(r"(?m)^\S+\d+:\d+ ", "", t)
    raise PromptError(f"unknown text '{name}' (known: mobydick, kjv, "
                      + ", ".join("austen:" + a for a in AUSTEN) + ")")


def _normalize_newlines(text):
    """One newline convention ("\n") whatever the source uses (Moby-Dick has "\r\n")."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def load_text(name):
    """The whole text of a source, cached. Fresh and cached reads return the same string: the text is
    normalized to "\n" line ends before it is used or cached, and the cache is written and read without
    newline translation (newline=""); caches written before that are normalized on reading."""
    path = os.path.join(cache_dir(), name.replace(":", "-") + ".txt")
    if os.path.exists(path):
        with open(path, encoding="utf-8", newline="") as f:
            return _normalize_newlines(f.read())
    text = _normalize_newlines(_extract(name))
    if len(text) < 10000:
        raise PromptError(f"text '{name}': only {len(text)} characters extracted")
    write_text(path, text, newline="")
    return text


def load_recipe(path, overrides=()):
    try:
        with open(path, encoding="utf-8") as f:
            r = json.load(f)
    except FileNotFoundError:
        raise PromptError(f"recipe file not found: {path}")
    except json.JSONDecodeError as e:
        raise PromptError(f"{path}: not valid JSON ({e})")
    for kv in overrides:
        if "=" not in kv:
            raise PromptError(f"--set {kv}: expected key=value")
        k, v = kv.split("=", 1)
        try:
            r[k] = json.loads(v)
        except json.JSONDecodeError:
            r[k] = v
    unknown = set(r) - RECIPE_KEYS
    if unknown:
        raise PromptError(f"{path}: unknown recipe keys {sorted(unknown)} (known: {sorted(RECIPE_KEYS)})")
    if r.get("kind") not in ("excerpt", "niah"):
        raise PromptError(f"{path}: 'kind' must be \"excerpt\" or \"niah\", got {r.get('kind')!r}")
    for k in ("text", "prompt_tokens"):
        if k not in r:
            raise PromptError(f"{path}: missing recipe key '{k}'")
    if r["kind"] == "niah":
        for k in ("needle", "question"):
            if k not in r:
                raise PromptError(f"{path}: a niah recipe needs '{k}'")
        d = r.get("depth", 0.5)
        if not (isinstance(d, (int, float)) and 0 <= d <= 1):
            raise PromptError(f"{path}: depth must be in [0, 1], got {d!r}")
    return r


def _render(recipe, hay):
    if recipe["kind"] == "excerpt":
        instr = recipe.get("instruction", "Summarize the text above in three sentences.")
        return f"{hay}\n\n{instr}"
    q = recipe["question"]
    if recipe.get("question_first", False):
        return (f"Answer this question about the text that follows: {q}\n\n{hay}\n\n"
                f"Answer the question asked before the text, in one short sentence.")
    return (f"Read the text and answer the question after it.\n\n{hay}\n\n"
            f"Question: {q} Answer in one short sentence.")


def build_prompt(recipe, tokenizer, chat=True):
    """Returns dict(text, ids, needle_tokens [a, b) or None, needle_chars, source, ...)."""
    full = load_text(recipe["text"])
    start = int(float(recipe.get("start", 0.0)) * len(full))
    m = re.search(r"\s", full[start:])
    if start and m:
        start += m.end()
    body = full[start:]
    target = int(recipe["prompt_tokens"])
    niah = recipe["kind"] == "niah"
    needle = " " + recipe["needle"].strip() + " " if niah else ""

    def assemble(n_chars):
        hay = body[:n_chars]
        cut = hay.rfind(" ")
        if cut > n_chars // 2:
            hay = hay[:cut]
        hay = hay.rstrip()
        pos = None
        if niah:
            want = int(float(recipe.get("depth", 0.5)) * len(hay))
            # the sentence end nearest the depth
            ends = [m.end() for m in re.finditer(r"[.!?][\"')]?\s", hay)]
            pos = min(ends, key=lambda e: abs(e - want)) if ends else want
            if float(recipe.get("depth", 0.5)) == 0:
                pos = 0
            elif float(recipe.get("depth", 0.5)) == 1:
                pos = len(hay)
            hay = hay[:pos].rstrip() + needle + hay[pos:].lstrip()
        user = _render(recipe, hay)
        if chat and getattr(tokenizer, "chat_template", None):
            text = tokenizer.apply_chat_template([{"role": "user", "content": user}], tokenize=False,
                                                 add_generation_prompt=True)
        else:
            text = user
        return text

    def count(n):
        return len(tokenizer(assemble(n), add_special_tokens=False)["input_ids"])

    lo, hi = 100, min(len(body), target * 12)
    if count(hi) < target and hi == len(body):
        raise PromptError(f"text '{recipe['text']}' from start {recipe.get('start', 0)} is too short for "
                          f"{target} prompt tokens ({count(hi)} available)")
    if count(lo) > target:
        raise PromptError(f"prompt_tokens {target} is too small for the recipe's fixed text")
    while hi - lo > 8:
        mid = (lo + hi) // 2
        if count(mid) <= target:
            lo = mid
        else:
            hi = mid
    text = assemble(lo)
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids = enc["input_ids"]
    out = dict(text=text, ids=ids, needle_tokens=None, needle_chars=None,
               source=f"{recipe['kind']}:{recipe['text']} (Debian; start {recipe.get('start', 0)}, "
                      f"{len(ids)} tokens)")
    if niah:
        s = needle.strip()
        c0 = text.find(s)
        if c0 < 0:
            raise PromptError("needle not found in the rendered prompt (tokenizer changed the text?)")
        c1 = c0 + len(s)
        toks = [i for i, (a, b) in enumerate(enc["offset_mapping"]) if b > c0 and a < c1]
        out["needle_tokens"] = (toks[0], toks[-1] + 1)
        out["needle_chars"] = (c0, c1)
        out["source"] = (f"niah:{recipe['text']} depth {recipe.get('depth', 0.5)}"
                         f"{' question-first' if recipe.get('question_first') else ''} (Debian; "
                         f"{len(ids)} tokens)")
    return out
