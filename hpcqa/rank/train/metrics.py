"""SQuAD exact match and F1, by the official scripts' rules: v1.1 for v1 data, v2.0 for v2 data. Pure Python.

(`evaluate.load("squad")` fetches its script from the hub, which isn't reachable at run time.)

The two official scripts share the answer normalisation (lower case, drop ASCII punctuation, the
articles a/an/the, extra whitespace) and differ where a text normalises to '':

- v1.1 (`evaluate-v1.1.py`): EM compares the normalised texts, so a prediction '' matches a gold
  "the"; F1 is 0 whenever no token is shared, so a gold "." and a prediction "." give F1 0. Every
  question counts; one without a prediction scores 0.
- v2.0 (`evaluate-v2.0.py`): golds that normalise to '' are dropped, and a question left without golds
  has the one gold ''; F1 of two token-less texts is 1, of one token-less text 0. "Has answer" is
  decided from the raw answer list (`bool(qa["answers"])`), so a question whose only gold is "the"
  is a HasAns question. A question without a prediction is skipped (left out of the totals), as the
  script does. HasAns_* is reported whenever there are answerable questions, NoAns_* whenever there
  are unanswerable ones. With no-answer scores (`na_probs`, hpcqa's null odds), a question whose
  score exceeds `na_prob_thresh` counts as predicted no-answer, and best_exact/best_f1 with their
  thresholds are reported.

Scores are summed in the data's order, as the scripts do, so the floats are the scripts' floats.
"""

from __future__ import annotations

import collections
import re
import string
from typing import Any, Mapping, Sequence

_PUNCT = set(string.punctuation)


def normalize_answer(s: str) -> str:
    """Lower case, drop punctuation, articles (a, an, the) and extra whitespace."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def _shared(g: list[str], p: list[str]) -> float:
    same = sum((collections.Counter(g) & collections.Counter(p)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)


# ------------------------------------------------------------------------------------ v1.1


def exact_v1(gold: str, pred: str) -> float:
    return float(normalize_answer(pred) == normalize_answer(gold))


def f1_v1(gold: str, pred: str) -> float:
    """v1.1: 0 when no token is shared, also when both texts normalise to ''."""
    return _shared(normalize_answer(gold).split(), normalize_answer(pred).split())


def per_question_v1(golds: Mapping[str, Sequence[str]], preds: Mapping[str, str]):
    """-> ({id: em}, {id: f1}) for every question with a prediction (max over its golds; none -> 0)."""
    em, f1 = {}, {}
    for qid, answers in golds.items():
        if qid not in preds:
            continue
        pred = preds[qid]
        em[qid] = max((exact_v1(a, pred) for a in answers), default=0.0)
        f1[qid] = max((f1_v1(a, pred) for a in answers), default=0.0)
    return em, f1


def scores_v1(golds: Mapping[str, Sequence[str]], preds: Mapping[str, str]) -> dict[str, float]:
    """evaluate-v1.1.py: {exact_match, f1} over every question (no prediction: 0), plus count."""
    em, f1 = per_question_v1(golds, preds)
    total = len(golds)
    if not total:
        return {"exact_match": 0.0, "f1": 0.0, "count": 0}
    e = f = 0.0
    for qid in golds:  # the script's order of summation
        if qid in em:
            e += em[qid]
            f += f1[qid]
    return {"exact_match": 100.0 * e / total, "f1": 100.0 * f / total, "count": total}


# ------------------------------------------------------------------------------------ v2.0


def exact_v2(gold: str, pred: str) -> float:
    return float(normalize_answer(gold) == normalize_answer(pred))


def _tokens_v2(s: str) -> list[str]:
    return normalize_answer(s).split() if s else []


def f1_v2(gold: str, pred: str) -> float:
    """v2.0: when either text has no tokens, 1 if both have none, else 0."""
    g, p = _tokens_v2(gold), _tokens_v2(pred)
    if not g or not p:
        return float(g == p)
    return _shared(g, p)


def per_question_v2(golds: Mapping[str, Sequence[str]], preds: Mapping[str, str]):
    """-> ({id: em}, {id: f1}) for questions with a prediction, golds normalising to '' dropped."""
    em, f1 = {}, {}
    for qid, answers in golds.items():
        kept = [a for a in answers if normalize_answer(a)] or [""]
        if qid not in preds:
            continue
        pred = preds[qid]
        em[qid] = max(exact_v2(a, pred) for a in kept)
        f1[qid] = max(f1_v2(a, pred) for a in kept)
    return em, f1


def _apply_threshold(
    scores: dict[str, float],
    na_probs: Mapping[str, float],
    has_ans: Mapping[str, bool],
    thresh: float,
) -> dict[str, float]:
    return {q: (float(not has_ans[q]) if na_probs[q] > thresh else s) for q, s in scores.items()}


def _mean(scores: Mapping[str, float], ids: Sequence[str]) -> float:
    return (
        100.0 * sum(scores[q] for q in ids) / len(ids)
    )  # built-in sum, as the script (compensated on 3.12+)


def best_threshold(
    preds: Mapping[str, str],
    scores: Mapping[str, float],
    na_probs: Mapping[str, float],
    has_ans: Mapping[str, bool],
) -> tuple[float, float]:
    """The no-answer threshold that would have scored best, and that score (the script's sweep)."""
    cur = best = float(sum(1 for q in has_ans if not has_ans[q]))
    thresh = 0.0
    for qid in sorted(na_probs, key=lambda k: na_probs[k]):
        if qid not in scores:
            continue
        if has_ans[qid]:
            cur += scores[qid]
        elif preds[qid]:
            cur -= 1
        if cur > best:
            best, thresh = cur, na_probs[qid]
    return 100.0 * best / len(scores), thresh


def scores_v2(
    golds: Mapping[str, Sequence[str]],
    preds: Mapping[str, str],
    na_probs: Mapping[str, float] | None = None,
    na_prob_thresh: float = 1.0,
) -> dict[str, float]:
    """evaluate-v2.0.py [--na-prob-file] [--na-prob-thresh]: exact (as exact_match), f1, total (as count),
    HasAns_*, NoAns_*, and with na_probs best_exact/best_f1 and their thresholds."""
    has_ans = {q: bool(a) for q, a in golds.items()}
    em_raw, f1_raw = per_question_v2(golds, preds)
    probs = dict(na_probs) if na_probs is not None else {q: 0.0 for q in preds}
    em = _apply_threshold(em_raw, probs, has_ans, na_prob_thresh)
    f1 = _apply_threshold(f1_raw, probs, has_ans, na_prob_thresh)
    scored = list(em)
    if not scored:
        return {"exact_match": 0.0, "f1": 0.0, "count": 0}
    out: dict[str, float] = {
        "exact_match": _mean(em, scored),
        "f1": _mean(f1, scored),
        "count": len(scored),
    }
    for name, keep in (("HasAns", True), ("NoAns", False)):
        ids = [
            q for q in golds if has_ans[q] == keep and q in em
        ]  # the script's lists, minus unscored ids
        if any(has_ans[q] == keep for q in golds) and ids:
            out.update(
                {
                    f"{name}_exact": _mean(em, ids),
                    f"{name}_f1": _mean(f1, ids),
                    f"{name}_total": len(ids),
                }
            )
    if na_probs is not None:
        out["best_exact"], out["best_exact_thresh"] = best_threshold(preds, em_raw, probs, has_ans)
        out["best_f1"], out["best_f1_thresh"] = best_threshold(preds, f1_raw, probs, has_ans)
    return out


def squad_scores(
    golds: Mapping[str, Sequence[str]],
    preds: Mapping[str, str],
    version_2: bool = False,
    na_probs: Mapping[str, float] | None = None,
    na_prob_thresh: float = 1.0,
) -> dict[str, Any]:
    """golds: id -> the raw answer texts ([] = no answer); preds: id -> text ("" = no answer).

    Percentages by the official rules of the data's version: v1.1 (version_2 false) or v2.0.
    Returns exact_match, f1, count (+ the v2.0 splits and best_* thresholds) and `rules`.
    """
    if version_2:
        return {**scores_v2(golds, preds, na_probs, na_prob_thresh), "rules": "squad-v2.0"}
    return {**scores_v1(golds, preds), "rules": "squad-v1.1"}
