"""Reference implementations of the official SQuAD evaluation scripts, written for the tests from their
published behaviour (evaluate-v1.1.py, evaluate-v2.0.py), over the official nested data layout.

Deliberately written the way the scripts are (nested loops over articles/paragraphs/qas, booleans summed,
`max` over golds), not the way hpcqa.rank.train.metrics is, so that the two can disagree.
"""

import collections
import re
import string


def _normalize(s):
    def remove_articles(text):
        return re.sub(r"\b(a|an|the)\b", " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    return white_space_fix(remove_articles(remove_punc(s.lower())))


# ---------------------------------------------------------------- v1.1


def v1_f1(prediction, ground_truth):
    p = _normalize(prediction).split()
    g = _normalize(ground_truth).split()
    common = collections.Counter(p) & collections.Counter(g)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(p)
    recall = 1.0 * num_same / len(g)
    return (2 * precision * recall) / (precision + recall)


def v1_em(prediction, ground_truth):
    return _normalize(prediction) == _normalize(ground_truth)


def v1_evaluate(dataset, predictions):
    """-> ({'exact_match', 'f1'}, per-question {qid: (em, f1)})."""
    f1 = exact_match = total = 0
    per = {}
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                total += 1
                if qa["id"] not in predictions:
                    continue
                ground_truths = [x["text"] for x in qa["answers"]]
                prediction = predictions[qa["id"]]
                em = max(v1_em(prediction, gt) for gt in ground_truths)
                f = max(v1_f1(prediction, gt) for gt in ground_truths)
                per[qa["id"]] = (float(em), float(f))
                exact_match += em
                f1 += f
    return {"exact_match": 100.0 * exact_match / total, "f1": 100.0 * f1 / total}, per


# ---------------------------------------------------------------- v2.0


def _get_tokens(s):
    if not s:
        return []
    return _normalize(s).split()


def v2_exact(a_gold, a_pred):
    return int(_normalize(a_gold) == _normalize(a_pred))


def v2_f1(a_gold, a_pred):
    gold_toks = _get_tokens(a_gold)
    pred_toks = _get_tokens(a_pred)
    common = collections.Counter(gold_toks) & collections.Counter(pred_toks)
    num_same = sum(common.values())
    if len(gold_toks) == 0 or len(pred_toks) == 0:
        return int(gold_toks == pred_toks)
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(pred_toks)
    recall = 1.0 * num_same / len(gold_toks)
    return (2 * precision * recall) / (precision + recall)


def _qid_to_has_ans(dataset):
    out = {}
    for article in dataset:
        for p in article["paragraphs"]:
            for qa in p["qas"]:
                out[qa["id"]] = bool(qa["answers"])
    return out


def _raw_scores(dataset, preds):
    exact_scores, f1_scores = {}, {}
    for article in dataset:
        for p in article["paragraphs"]:
            for qa in p["qas"]:
                qid = qa["id"]
                gold_answers = [a["text"] for a in qa["answers"] if _normalize(a["text"])]
                if not gold_answers:
                    gold_answers = [""]
                if qid not in preds:
                    continue
                a_pred = preds[qid]
                exact_scores[qid] = max(v2_exact(a, a_pred) for a in gold_answers)
                f1_scores[qid] = max(v2_f1(a, a_pred) for a in gold_answers)
    return exact_scores, f1_scores


def _apply_no_ans_threshold(scores, na_probs, qid_to_has_ans, na_prob_thresh):
    new_scores = {}
    for qid, s in scores.items():
        pred_na = na_probs[qid] > na_prob_thresh
        new_scores[qid] = float(not qid_to_has_ans[qid]) if pred_na else s
    return new_scores


def _make_eval_dict(exact_scores, f1_scores, qid_list=None):
    if not qid_list:
        total = len(exact_scores)
        return collections.OrderedDict(
            [
                ("exact", 100.0 * sum(exact_scores.values()) / total),
                ("f1", 100.0 * sum(f1_scores.values()) / total),
                ("total", total),
            ]
        )
    total = len(qid_list)
    return collections.OrderedDict(
        [
            ("exact", 100.0 * sum(exact_scores[k] for k in qid_list) / total),
            ("f1", 100.0 * sum(f1_scores[k] for k in qid_list) / total),
            ("total", total),
        ]
    )


def _find_best_thresh(preds, scores, na_probs, qid_to_has_ans):
    num_no_ans = sum(1 for k in qid_to_has_ans if not qid_to_has_ans[k])
    cur_score = num_no_ans
    best_score = cur_score
    best_thresh = 0.0
    qid_list = sorted(na_probs, key=lambda k: na_probs[k])
    for qid in qid_list:
        if qid not in scores:
            continue
        if qid_to_has_ans[qid]:
            diff = scores[qid]
        else:
            diff = -1 if preds[qid] else 0
        cur_score += diff
        if cur_score > best_score:
            best_score = cur_score
            best_thresh = na_probs[qid]
    return 100.0 * best_score / len(scores), best_thresh


def v2_evaluate(dataset, preds, na_probs=None, na_prob_thresh=1.0):
    """The script's main(): -> (out_eval, per-question {qid: (exact, f1)} after the threshold)."""
    given = na_probs is not None
    if not given:
        na_probs = {k: 0.0 for k in preds}
    has_ans = _qid_to_has_ans(dataset)
    has_ans_qids = [k for k, v in has_ans.items() if v]
    no_ans_qids = [k for k, v in has_ans.items() if not v]
    exact_raw, f1_raw = _raw_scores(dataset, preds)
    exact_thresh = _apply_no_ans_threshold(exact_raw, na_probs, has_ans, na_prob_thresh)
    f1_thresh = _apply_no_ans_threshold(f1_raw, na_probs, has_ans, na_prob_thresh)
    out = _make_eval_dict(exact_thresh, f1_thresh)
    if has_ans_qids:
        for k, v in _make_eval_dict(exact_thresh, f1_thresh, qid_list=has_ans_qids).items():
            out["HasAns_" + k] = v
    if no_ans_qids:
        for k, v in _make_eval_dict(exact_thresh, f1_thresh, qid_list=no_ans_qids).items():
            out["NoAns_" + k] = v
    if given:
        out["best_exact"], out["best_exact_thresh"] = _find_best_thresh(
            preds, exact_raw, na_probs, has_ans
        )
        out["best_f1"], out["best_f1_thresh"] = _find_best_thresh(preds, f1_raw, na_probs, has_ans)
    return out, {q: (exact_thresh[q], f1_thresh[q]) for q in exact_thresh}


def nested(golds):
    """{qid: [answer texts]} -> the official data layout (one article, one paragraph per question)."""
    return [
        {
            "title": "t",
            "paragraphs": [
                {
                    "context": "c",
                    "qas": [
                        {
                            "id": q,
                            "question": "?",
                            "answers": [{"text": t, "answer_start": 0} for t in answers],
                        }
                    ],
                }
                for q, answers in golds.items()
            ],
        }
    ]
