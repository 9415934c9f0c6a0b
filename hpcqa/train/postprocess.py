"""Start/end logits of the features of a QA model -> one answer text per example. numpy only.

Each example may have been cut into several features (long context, doc_stride). For each feature,
take the n_best start and end positions, keep spans that lie inside the context, end >= start and
are at most max_answer_length tokens, score them start+end logit, and keep the best over all the
example's features. For SQuAD v2 the null answer (CLS, position 0) of each feature competes too:
predict "" when min null score - best span score > null_score_diff_threshold.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np


def best_answers(
    examples: Sequence[Mapping[str, Any]],     # id, context
    features: Sequence[Mapping[str, Any]],     # example_id, offset_mapping (None outside the context)
    start_logits: np.ndarray,
    end_logits: np.ndarray,
    n_best_size: int = 20,
    max_answer_length: int = 30,
    version_2_with_negative: bool = False,
    null_score_diff_threshold: float = 0.0,
) -> dict[str, str]:
    if len(features) != len(start_logits) or len(features) != len(end_logits):
        raise ValueError(f"{len(features)} features but {len(start_logits)}/{len(end_logits)} logit rows")
    by_example: dict[str, list[int]] = {}
    for i, f in enumerate(features):
        by_example.setdefault(f["example_id"], []).append(i)
    out = {}
    for ex in examples:
        best_text, best_score = "", -np.inf
        min_null = np.inf
        for fi in by_example.get(ex["id"], []):
            s, e = np.asarray(start_logits[fi]), np.asarray(end_logits[fi])
            offsets = features[fi]["offset_mapping"]
            min_null = min(min_null, float(s[0] + e[0]))
            starts = np.argsort(s)[-1:-n_best_size - 1:-1]
            ends = np.argsort(e)[-1:-n_best_size - 1:-1]
            for a in starts:
                for b in ends:
                    if a >= len(offsets) or b >= len(offsets) or offsets[a] is None or offsets[b] is None:
                        continue
                    if len(offsets[a]) < 2 or len(offsets[b]) < 2:
                        continue
                    if b < a or b - a + 1 > max_answer_length:
                        continue
                    score = float(s[a] + e[b])
                    if score > best_score:
                        best_score = score
                        best_text = ex["context"][offsets[a][0]:offsets[b][1]]
        if version_2_with_negative and (best_score == -np.inf or min_null - best_score > null_score_diff_threshold):
            out[ex["id"]] = ""
        else:
            out[ex["id"]] = best_text
    return out
