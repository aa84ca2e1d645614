"""Bring your own cases (issue 27 #7): a closed-loop config's `"cases": "FILE.jsonl"` (relative to the
config file's directory), one case a line, checked completely — every line parsed, every prompt
tokenized and measured against the model's context — before any model work (only the tokenizer is
loaded); every refusal names FILE:LINE.

A task case (greedy generation, scored):
  {"prompt": "raw text, no template", "answers": ["42"], "scoring": "contains", "max_new_tokens": 16}
  {"messages": [{"role": "system", "content": "..."}, {"role": "user", "content": "..."}],
   "assistant_prefix": "The answer is", "answer": "42", "scoring": "exact", "max_new_tokens": 8}
  {"prompt_ids": [1, 2, 3], "answers": ["7 8"], "max_new_tokens": 4}       (token ids: any model)
A fidelity case (teacher-forced on the text's continuation; KL, top-1, perplexity):
  {"text": "raw text", "continuation": "what follows it", "greedy_tokens": 0}
  {"prompt_ids": [...], "continuation_ids": [...]}

A line is a fidelity case when it has "text", "continuation" or "continuation_ids"; every other line is a
task case. Keys: "id" (optional: a non-empty string naming the case, unique in the file, kept in the case's
description), exactly one of "prompt" / "messages" / "text" / "prompt_ids"; "answers" (a non-empty list of
non-empty strings) or "answer" (one string); "scoring": "contains" (default: some answer occurs in the
generated text) or "exact" (the generated text equals some answer, stripped) — both on the text up to the
first end-of-turn token (the tokenizer's end-of-sequence and end-of-turn ids), so that nothing the model
says after its turn counts; "max_new_tokens" (default 32). "messages" (roles: system, user, assistant,
tool) get the model's chat template, with the generation prompt unless the last message is the
assistant's (its turn is then continued), then "assistant_prefix" (optional, only with "messages");
"prompt" and "text" are used as they are. "continuation_ids" need at least 2 ids: the first follows the
prompt (the prefill predicts it), each later one is a scored prediction. Without a tokenizer (the tiny
random Llama) only token ids are accepted, and generated tokens are decoded as space-separated ids.
Refused, by line (FILE:LINE): malformed JSON, a line that is not an object, unknown keys, no or two prompt
kinds, an empty prompt, a bad or repeated "id", missing or empty answers (for a task), answers on a
fidelity case, an unknown scoring, a non-positive max_new_tokens, token ids outside the vocabulary,
messages on a tokenizer without a chat template, and a prompt + the tokens decoded after it beyond the
model's context — unless the config (not a line) sets "allow_beyond_context": true."""

import hashlib
import json
import os

TASK_KEYS = {"id", "prompt", "messages", "prompt_ids", "assistant_prefix", "answers", "answer", "scoring",
             "max_new_tokens"}
FIDELITY_KEYS = {"id", "text", "continuation", "prompt_ids", "continuation_ids", "greedy_tokens"}
PROMPT_KINDS = ("prompt", "messages", "text", "prompt_ids")
SCORING = ("contains", "exact")
ROLES = ("system", "user", "assistant", "tool")


class CasesError(Exception):
    pass


def cases_path(cfg, config_path):
    p = cfg["cases"]
    if not isinstance(p, str) or not p:
        raise CasesError(f"{config_path}: \"cases\" must be the path of a JSONL file")
    return p if os.path.isabs(p) else os.path.join(os.path.dirname(os.path.abspath(config_path)), p)


def parse(path):
    """Every line checked without a tokenizer: [(line number, dict)]. Blank lines are skipped."""
    if not os.path.isfile(path):
        raise CasesError(f"cases file not found: {path}")
    out, ids = [], {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{n}"
            try:
                c = json.loads(line)
            except json.JSONDecodeError as e:
                raise CasesError(f"{where}: not valid JSON ({e.msg} at column {e.colno})")
            if not isinstance(c, dict):
                raise CasesError(f"{where}: expected a JSON object, got {type(c).__name__}")
            kinds = [k for k in PROMPT_KINDS if k in c]
            if len(kinds) != 1:
                raise CasesError(f"{where}: give exactly one of " + ", ".join(f'"{k}"' for k in PROMPT_KINDS)
                                 + (f" (got {', '.join(kinds)})" if kinds else ""))
            fidelity = "text" in c or "continuation_ids" in c or "continuation" in c
            allowed = FIDELITY_KEYS if fidelity else TASK_KEYS
            bad = sorted(set(c) - allowed)
            if bad:
                raise CasesError(f"{where}: unknown key '{bad[0]}' for a {'fidelity' if fidelity else 'task'} case "
                                 f"(known: {', '.join(sorted(allowed))})")
            if "id" in c:
                if not isinstance(c["id"], str) or not c["id"].strip():
                    raise CasesError(f"{where}: \"id\" must be a non-empty string")
                if c["id"] in ids:
                    raise CasesError(f"{where}: \"id\" '{c['id']}' is already line {ids[c['id']]}'s")
                ids[c["id"]] = n
            _check_prompt(c, kinds[0], where)
            if fidelity:
                _check_fidelity(c, where)
            else:
                _check_task(c, where)
            out.append((n, c))
    if not out:
        raise CasesError(f"{path}: no cases (an empty file)")
    return out


def _check_prompt(c, kind, where):
    v = c[kind]
    if kind in ("prompt", "text"):
        if not isinstance(v, str) or not v.strip():
            raise CasesError(f"{where}: \"{kind}\" must be a non-empty string")
    elif kind == "prompt_ids":
        if not (isinstance(v, list) and v and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in v)):
            raise CasesError(f"{where}: \"prompt_ids\" must be a non-empty list of token ids (integers >= 0)")
    else:
        if not (isinstance(v, list) and v):
            raise CasesError(f"{where}: \"messages\" must be a non-empty list of {{\"role\", \"content\"}} objects")
        for i, m in enumerate(v):
            if not (isinstance(m, dict) and set(m) == {"role", "content"} and m["role"] in ROLES
                    and isinstance(m["content"], str)):
                raise CasesError(f"{where}: messages[{i}] must be {{\"role\": one of {', '.join(ROLES)}, "
                                 "\"content\": a string}")
        if not any(m["content"].strip() for m in v):
            raise CasesError(f"{where}: every message is empty")
    if "assistant_prefix" in c and (kind != "messages" or not isinstance(c["assistant_prefix"], str)):
        raise CasesError(f"{where}: \"assistant_prefix\" (a string) goes with \"messages\"")


def _check_fidelity(c, where):
    if "text" in c:
        if not isinstance(c.get("continuation"), str) or not c["continuation"].strip():
            raise CasesError(f"{where}: a fidelity case needs a non-empty \"continuation\" after its \"text\"")
        if "continuation_ids" in c:
            raise CasesError(f"{where}: \"text\" goes with \"continuation\", \"prompt_ids\" with \"continuation_ids\"")
    else:
        v = c.get("continuation_ids")
        if "continuation" in c or not (isinstance(v, list) and len(v) >= 2 and
                                       all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in v)):
            raise CasesError(f"{where}: \"prompt_ids\" of a fidelity case go with \"continuation_ids\" (a list of "
                             "at least 2 token ids)")
    g = c.get("greedy_tokens", 0)
    if not (isinstance(g, int) and not isinstance(g, bool) and g >= 0):
        raise CasesError(f"{where}: \"greedy_tokens\" must be an integer >= 0")


def _check_task(c, where):
    if "answers" in c and "answer" in c:
        raise CasesError(f"{where}: give \"answers\" or \"answer\", not both")
    if "answers" not in c and "answer" not in c:
        raise CasesError(f"{where}: a task case needs \"answers\" (or \"answer\"); a fidelity case \"text\" + "
                         "\"continuation\"")
    a = c["answers"] if "answers" in c else [c["answer"]]
    if not (isinstance(a, list) and a and all(isinstance(x, str) for x in a)):
        raise CasesError(f"{where}: \"answers\" must be a non-empty list of strings")
    if any(not x.strip() for x in a):
        raise CasesError(f"{where}: empty answer (every answer must have a non-blank character)")
    if c.get("scoring", "contains") not in SCORING:
        raise CasesError(f"{where}: unknown scoring '{c.get('scoring')}' ({', '.join(SCORING)})")
    m = c.get("max_new_tokens", 32)
    if not (isinstance(m, int) and not isinstance(m, bool) and m >= 1):
        raise CasesError(f"{where}: \"max_new_tokens\" must be an integer >= 1")


def build(parsed, path, tok, vocab, context, allow_beyond_context=False, stop_ids=()):
    """Token ids of every parsed case, then the context check, by line. Returns the runner's case dicts."""
    enc = (lambda s: tok(s, add_special_tokens=False)["input_ids"]) if tok is not None else None  # noqa: E731
    cases = []
    for n, c in parsed:
        where = f"{path}:{n}"
        kind = next(k for k in PROMPT_KINDS if k in c)
        if kind != "prompt_ids" and tok is None:
            raise CasesError(f"{where}: \"{kind}\" needs a tokenizer and this model has none: give \"prompt_ids\"")
        if kind == "prompt_ids":
            ids = list(c["prompt_ids"])
        elif kind == "messages":
            if not getattr(tok, "chat_template", None):
                raise CasesError(f"{where}: \"messages\" need the model's chat template and its tokenizer has none: "
                                 "give \"prompt\" (raw text)")
            gen = c["messages"][-1]["role"] != "assistant"
            text = tok.apply_chat_template(c["messages"], tokenize=False, add_generation_prompt=gen)
            ids = enc(text + c.get("assistant_prefix", ""))
        else:
            ids = enc(c[kind])
        fidelity = kind == "text" or "continuation_ids" in c
        if fidelity:
            cont = list(c["continuation_ids"]) if "continuation_ids" in c else enc(c["continuation"])
            if len(cont) < 2:
                raise CasesError(f"{where}: the continuation is {len(cont)} token(s): at least 2 are needed (the "
                                 "first follows the prompt, each later one is a scored prediction)")
            after = max(len(cont) - 1, int(c.get("greedy_tokens", 0))) + 1
        else:
            cont = []
            after = int(c.get("max_new_tokens", 32)) + 1
        bad = [i for i in ids + cont if i >= vocab]
        if bad:
            raise CasesError(f"{where}: token id {bad[0]} outside the vocabulary [0, {vocab})")
        if not ids:
            raise CasesError(f"{where}: the prompt is empty after tokenization")
        if context and len(ids) + after > context and not allow_beyond_context:
            raise CasesError(f"{where}: the prompt is {len(ids)} tokens + {after} decoded = {len(ids) + after}, beyond "
                             f"the model's context ({context} tokens); shorten it or set \"allow_beyond_context\": true")
        h = hashlib.sha1(json.dumps([c, ids], sort_keys=True).encode()).hexdigest()[:10]
        name = str(c.get("id", f"line {n}"))
        if fidelity:
            cases.append(dict(id=f"user-fidelity-{h}", kind="fidelity", ids=ids, continuation=cont,
                              greedy_tokens=int(c.get("greedy_tokens", 0)), answer=None,
                              desc=f"{os.path.basename(path)}:{n} {name} {len(ids)}+{len(cont) - 1}"))
        else:
            answers = c["answers"] if "answers" in c else [c["answer"]]
            cases.append(dict(id=f"user-task-{h}", kind="task", ids=ids, continuation=[],
                              greedy_tokens=int(c.get("max_new_tokens", 32)), answer=answers[0], answers=answers,
                              scoring=c.get("scoring", "contains"), stop_ids=list(stop_ids),
                              desc=f"{os.path.basename(path)}:{n} {name} {len(ids)} {c.get('scoring', 'contains')}"))
    return cases


def score(case, tokens, decode):
    """Whether a generation answers the case, judged on the text up to the first stop token (the end of the
    turn; a user case's stop_ids, none for the builtin NIAH, which has no turn to end): "contains" (and the
    builtin NIAH): some answer occurs in it; "exact": stripped, it equals some answer."""
    answers = case.get("answers") or ([case["answer"]] if case.get("answer") is not None else [])
    if not answers:
        return False
    stop = set(case.get("stop_ids", ()))
    cut = next((i for i, t in enumerate(tokens) if t in stop), len(tokens))
    text = decode(tokens[:cut])
    if case.get("scoring", "contains") == "exact":
        return any(text.strip() == a.strip() for a in answers)
    return any(a in text for a in answers)
