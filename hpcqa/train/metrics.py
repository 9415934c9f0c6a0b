"""SQuAD v1.1 / v2.0 exact match and F1 with the official answer normalisation. Pure Python.

(`evaluate.load("squad")` fetches its script from the hub, which isn't reachable at run time.)
"""

from __future__ import annotations

import collections
import re
import string
from typing import Mapping, Sequence

_PUNCT = set(string.punctuation)


def normalize_answer(s: str) -> str:
    """Lower case, drop punctuation, articles (a, an, the) and extra whitespace."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def _tokens(s: str) -> list[str]:
    return normalize_answer(s).split() if s else []


def exact(gold: str, pred: str) -> float:
    return float(normalize_answer(gold) == normalize_answer(pred))


def f1(gold: str, pred: str) -> float:
    g, p = _tokens(gold), _tokens(pred)
    if not g or not p:
        return float(g == p)  # both empty (no-answer agreed) -> 1, else 0
    common = collections.Counter(g) & collections.Counter(p)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)


def squad_scores(golds: Mapping[str, Sequence[str]], preds: Mapping[str, str]) -> dict[str, float]:
    """golds: id -> acceptable answers ([] = no answer); preds: id -> text ("" = no answer).

    Returns percentages: exact_match, f1, count, and for v2 data the HasAns_/NoAns_ splits.
    A question without a prediction scores 0.
    """
    em_by, f1_by, has = {}, {}, {}
    for qid, answers in golds.items():
        answers = [a for a in answers if normalize_answer(a)] or [""]
        pred = preds.get(qid)
        has[qid] = answers != [""]
        if pred is None:
            em_by[qid] = f1_by[qid] = 0.0
            continue
        em_by[qid] = max(exact(a, pred) for a in answers)
        f1_by[qid] = max(f1(a, pred) for a in answers)
    out = _agg(list(golds), em_by, f1_by)
    out = {"exact_match": out["em"], "f1": out["f1"], "count": out["n"]}
    if any(not h for h in has.values()):
        for name, keep in (("HasAns", True), ("NoAns", False)):
            ids = [q for q in golds if has[q] == keep]
            agg = _agg(ids, em_by, f1_by)
            out.update({f"{name}_exact": agg["em"], f"{name}_f1": agg["f1"], f"{name}_total": agg["n"]})
    return out


def _agg(ids: Sequence[str], em_by: Mapping[str, float], f1_by: Mapping[str, float]) -> dict:
    n = len(ids)
    if n == 0:
        return {"em": 0.0, "f1": 0.0, "n": 0}
    return {"em": 100.0 * sum(em_by[i] for i in ids) / n, "f1": 100.0 * sum(f1_by[i] for i in ids) / n, "n": n}
