"""Closed-loop metrics (docs/closed-loop.md, docs/metrics.md), computed from the log-probabilities and
tokens the decode loop records.

Fidelity, teacher-forced on a text's true continuation c_0..c_N (c_0 follows the prompt): at each of
the N positions the model has read the prompt and c_0..c_{t-1} (its own method in every sparse layer)
and predicts c_{t+1}; p = full attention's distribution, q = the method's.
  kl        KL(p || q) = sum_v p_v (log p_v - log q_v), nats; per position, then mean and p90
  top1      argmax q == argmax p
  ppl       exp(mean_t -log q(c_{t+1})): perplexity of the true continuation (full's: ppl_full)
Task: greedy tokens after the prompt; `correct` when the answer string occurs in the decoded text;
`agreement`: tokens generated before the first one that differs from full attention's generation
(all of them when none differs)."""

import numpy as np


def kl_full_method(logp_full, logp_method):
    """logp_*: [T, vocab] log-probabilities. Returns KL(full || method) per position [T] (>= 0)."""
    p = np.exp(logp_full)
    kl = np.sum(p * (logp_full - logp_method), axis=-1)
    return np.maximum(kl, 0.0)


def fidelity(logp_full, logp_method, targets):
    """targets: [T] true next tokens. Returns per-position lists (kl, nll, top1) for the part file."""
    logp_full, logp_method = np.asarray(logp_full), np.asarray(logp_method)
    t = np.asarray(targets)
    kl = kl_full_method(logp_full, logp_method)
    nll = -logp_method[np.arange(len(t)), t]
    top1 = (logp_method.argmax(-1) == logp_full.argmax(-1)).astype(float)
    return dict(kl=kl.tolist(), nll=nll.tolist(), top1=top1.tolist())


def agreement(tokens, ref_tokens):
    """Tokens generated before the first divergence from the reference generation."""
    n = 0
    for a, b in zip(tokens, ref_tokens):
        if a != b:
            break
        n += 1
    return n


def exact_match(text, answer):
    return answer is not None and answer in text


def summarize_fidelity(parts):
    """parts: fidelity part dicts of one run. Pooled over every scored position of every case."""
    kl = np.concatenate([p["kl"] for p in parts]) if parts else np.zeros(0)
    if kl.size == 0:
        return None
    nll = np.concatenate([p["nll"] for p in parts])
    nll_full = np.concatenate([p["nll_full"] for p in parts])
    top1 = np.concatenate([p["top1"] for p in parts])
    return dict(kl_mean=float(kl.mean()), kl_p90=float(np.percentile(kl, 90)), kl_max=float(kl.max()),
                top1=float(top1.mean()), ppl=float(np.exp(nll.mean())), ppl_full=float(np.exp(nll_full.mean())),
                tokens=int(kl.size), cases=len(parts))


def summarize_task(parts):
    """parts: greedy-generation part dicts of one run (niah cases and fidelity greedy_tokens)."""
    if not parts:
        return None
    out = dict(cases=len(parts), agreement_mean=float(np.mean([p["agreement"] for p in parts])),
               agreement_full_frac=float(np.mean([p["agreement"] == len(p["tokens"]) for p in parts])))
    scored = [p for p in parts if p.get("answer") is not None]
    if scored:
        ok = [p for p in scored if p["correct_full"]]
        out.update(accuracy=float(np.mean([p["correct"] for p in scored])),
                   accuracy_full=float(np.mean([p["correct_full"] for p in scored])),
                   accuracy_on_full_correct=(float(np.mean([p["correct"] for p in ok])) if ok else None),
                   niah_cases=len(scored), full_correct_cases=len(ok))
    return out


def spearman(x, y):
    """Spearman rank correlation (average ranks for ties); None when either side is constant or n < 3."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) < 3:
        return None

    def ranks(a):
        order = np.argsort(a, kind="mergesort")
        r = np.empty(len(a))
        r[order] = np.arange(len(a), dtype=float)
        for v in np.unique(a):  # ties: the mean rank
            m = a == v
            r[m] = r[m].mean()
        return r
    rx, ry = ranks(x), ranks(y)
    if rx.std() == 0 or ry.std() == 0:
        return None
    return float(np.corrcoef(rx, ry)[0, 1])
