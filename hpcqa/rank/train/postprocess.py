"""Start/end logits of the features of a QA model -> answers, n-best lists and null odds. numpy only.

The rule of transformers' utils_qa.postprocess_qa_predictions (what run_qa.py writes):
each example may have been cut into several features (long context, doc_stride). For each feature,
take the n_best start and end positions, keep spans inside the context (offset not None), end >= start
and at most max_answer_length tokens, scored start + end logit. The example's n-best list is the
n_best_size best spans over all its features. For SQuAD v2 the null answer (CLS, position 0) competes
too, with the *smallest* null score over the example's features; its null odds are that score minus
the best non-null span's, and the answer is '' when the odds exceed null_score_diff_threshold.
Probabilities are a softmax over the n-best scores.

One departure: where no span is valid at all, run_qa answers the literal text "empty" (and lists it
in the n-best with logits 0); hpcqa lists the same entry but answers '' (no answer), which is what
the text means. The null odds are run_qa's (null score - 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

EMPTY = "empty"  # run_qa's placeholder when no span is valid


@dataclass
class Predictions:
    answers: dict[str, str]  # id -> text ('' = no answer)
    nbest: dict[
        str, list[dict[str, Any]]
    ]  # id -> [{text, probability, start_logit, end_logit}], best first
    null_odds: dict[str, float]  # v2 only: id -> null score - best span score


def _spans(
    s: np.ndarray, e: np.ndarray, offsets: Sequence, n_best_size: int, max_answer_length: int
) -> list[dict]:
    out = []
    starts = np.argsort(s)[-1 : -n_best_size - 1 : -1].tolist()
    ends = np.argsort(e)[-1 : -n_best_size - 1 : -1].tolist()
    for a in starts:
        for b in ends:
            if a >= len(offsets) or b >= len(offsets) or offsets[a] is None or offsets[b] is None:
                continue
            if len(offsets[a]) < 2 or len(offsets[b]) < 2:
                continue
            if b < a or b - a + 1 > max_answer_length:
                continue
            out.append(
                {
                    "offsets": (offsets[a][0], offsets[b][1]),
                    "score": s[a] + e[b],
                    "start_logit": s[a],
                    "end_logit": e[b],
                }
            )
    return out


def _example(
    context: str,
    rows: list[tuple[np.ndarray, np.ndarray, Sequence]],
    n_best_size: int,
    max_answer_length: int,
    v2: bool,
) -> tuple[list[dict], float | None]:
    """-> (n-best entries with text and probability, best first; null score or None)."""
    null = None
    prelim: list[dict] = []
    for s, e, offsets in rows:
        if null is None or null["score"] > s[0] + e[0]:
            null = {"offsets": (0, 0), "score": s[0] + e[0], "start_logit": s[0], "end_logit": e[0]}
        prelim += _spans(s, e, offsets, n_best_size, max_answer_length)
    null_score = float(null["score"]) if v2 and null is not None else None
    if v2 and null is not None:
        prelim.append(null)
    best = sorted(prelim, key=lambda x: x["score"], reverse=True)[:n_best_size]
    if v2 and null is not None and not any(p["offsets"] == (0, 0) for p in best):
        best.append(null)
    for p in best:
        a, b = p.pop("offsets")
        p["text"] = context[a:b]
    if not best or (len(best) == 1 and best[0]["text"] == ""):
        best.insert(
            0,
            {
                "text": EMPTY,
                "start_logit": 0.0,
                "end_logit": 0.0,
                "score": 0.0,
                "placeholder": True,
            },
        )
    scores = np.array([p.pop("score") for p in best], dtype=np.float64)
    probs = np.exp(scores - scores.max())
    probs /= probs.sum()
    for p, prob in zip(best, probs):
        p["probability"] = prob
    return best, null_score


def _jsonable(entry: dict) -> dict:
    return {
        "text": entry["text"],
        "probability": float(entry["probability"]),
        "start_logit": float(entry["start_logit"]),
        "end_logit": float(entry["end_logit"]),
    }


def postprocess(
    examples: Sequence[Mapping[str, Any]],  # id, context
    features: Sequence[Mapping[str, Any]],  # example_id, offset_mapping (None outside the context)
    start_logits: np.ndarray,
    end_logits: np.ndarray,
    n_best_size: int = 20,
    max_answer_length: int = 30,
    version_2_with_negative: bool = False,
    null_score_diff_threshold: float = 0.0,
) -> Predictions:
    if len(features) != len(start_logits) or len(features) != len(end_logits):
        raise ValueError(
            f"{len(features)} features but {len(start_logits)}/{len(end_logits)} logit rows"
        )
    by_example: dict[str, list[int]] = {}
    for i, f in enumerate(features):
        by_example.setdefault(f["example_id"], []).append(i)
    out = Predictions({}, {}, {})
    for ex in examples:
        rows = [
            (np.asarray(start_logits[i]), np.asarray(end_logits[i]), features[i]["offset_mapping"])
            for i in by_example.get(ex["id"], [])
        ]
        best, null_score = _example(
            ex["context"], rows, n_best_size, max_answer_length, version_2_with_negative
        )
        qid = ex["id"]
        out.nbest[qid] = [_jsonable(p) for p in best]
        if not version_2_with_negative:
            out.answers[qid] = "" if best[0].get("placeholder") else best[0]["text"]
            continue
        top = next(p for p in best if p["text"] != "")
        odds = (
            (null_score if null_score is not None else 0.0)
            - float(top["start_logit"])
            - float(top["end_logit"])
        )
        out.null_odds[qid] = odds
        out.answers[qid] = (
            "" if odds > null_score_diff_threshold or top.get("placeholder") else top["text"]
        )
    return out
