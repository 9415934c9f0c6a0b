"""SQuAD EM/F1 and post-processing against hand-computed cases."""

import numpy as np
import pytest

from hpcqa.train import metrics, postprocess


@pytest.mark.parametrize("text,norm", [
    ("The  Quick, brown fox!", "quick brown fox"),
    ("an apple a day", "apple day"),
    ("Theater", "theater"),           # 'the' only as a word
    ("  1,000  ", "1000"),
])
def test_normalize(text, norm):
    assert metrics.normalize_answer(text) == norm


def test_f1_hand_computed():
    # gold [cat, sat], pred [cat, sat, on, mat]: P = 2/4, R = 2/2 -> F1 = 2/3
    assert metrics.f1("the cat sat", "cat sat on mat") == pytest.approx(2 / 3)
    assert metrics.f1("a b c", "x y") == 0.0
    assert metrics.f1("", "") == 1.0 and metrics.f1("x", "") == 0.0
    # repeated tokens count once each: gold [a, a, b], pred [a, b, b]: common a:1 b:1 -> P=R=2/3
    assert metrics.f1("a a b", "a b b") == pytest.approx(2 / 3)


def test_squad_v1_scores():
    golds = {"q1": ["Denver Broncos", "Broncos"], "q2": ["1999"], "q3": ["x"]}
    preds = {"q1": "the Broncos", "q2": "in 1999"}            # q3 unanswered -> 0
    s = metrics.squad_scores(golds, preds)
    assert s["exact_match"] == pytest.approx(100 / 3)
    assert s["f1"] == pytest.approx(100 * (1 + 2 / 3 + 0) / 3)
    assert s["count"] == 3 and "HasAns_exact" not in s


def test_squad_v2_scores_split_has_and_no_answer():
    golds = {"a": ["x y"], "b": [], "c": [""], "d": ["z"]}
    preds = {"a": "", "b": "", "c": "something", "d": "z"}
    s = metrics.squad_scores(golds, preds)
    # a: 0/0, b: 1/1, c: 0/0, d: 1/1
    assert s["exact_match"] == 50.0 and s["f1"] == 50.0
    assert (s["HasAns_exact"], s["HasAns_total"]) == (50.0, 2)
    assert (s["NoAns_exact"], s["NoAns_total"]) == (50.0, 2)


CTX = "Paris is the capital of France"
#          0     1      2     3    4        5       6       7     8      9
OFFSETS = [None, None, None, (0, 5), (6, 8), (9, 12), (13, 20), (21, 23), (24, 30), None]


def logits(peaks, n=10, base=0.0):
    a = np.full(n, base)
    for i, v in peaks.items():
        a[i] = v
    return a


def run(features, starts, ends, **kw):
    ex = [{"id": "e", "context": CTX}]
    return postprocess.best_answers(ex, features, np.array(starts), np.array(ends), **kw)["e"]


def test_best_span():
    f = [{"example_id": "e", "offset_mapping": OFFSETS}]
    assert run(f, [logits({8: 5})], [logits({8: 5})]) == "France"
    assert run(f, [logits({3: 5})], [logits({6: 4})]) == "Paris is the capital"


def test_end_before_start_and_question_tokens_are_skipped():
    f = [{"example_id": "e", "offset_mapping": OFFSETS}]
    # best start 6 (capital), best end 3 (Paris): invalid; next: start 6 end 8 (score 5+1)
    # vs start 1 (question token, None offset) end 3: skipped
    s = logits({6: 5, 1: 9})
    e = logits({3: 6, 8: 1})
    assert run(f, [s], [e]) == "capital of France"


def test_max_answer_length():
    f = [{"example_id": "e", "offset_mapping": OFFSETS}]
    s, e = logits({3: 5, 8: 1}), logits({8: 5, 3: 1})
    assert run(f, [s], [e], max_answer_length=6) == "Paris is the capital of France"
    assert run(f, [s], [e], max_answer_length=2) in ("Paris", "France")


def test_best_over_several_features_of_one_example():
    f = [{"example_id": "e", "offset_mapping": OFFSETS}, {"example_id": "e", "offset_mapping": OFFSETS}]
    starts = [logits({3: 1}), logits({8: 7})]
    ends = [logits({3: 1}), logits({8: 7})]
    assert run(f, starts, ends) == "France"


def test_v2_null_answer_threshold():
    f = [{"example_id": "e", "offset_mapping": OFFSETS}]
    s, e = logits({0: 4, 8: 3}), logits({0: 4, 8: 3})   # null 8, best span 6
    assert run(f, [s], [e], version_2_with_negative=True) == ""
    assert run(f, [s], [e], version_2_with_negative=True, null_score_diff_threshold=2.5) == "France"
    assert run(f, [s], [e], version_2_with_negative=False) == "France"


def test_mismatched_rows_are_an_error():
    with pytest.raises(ValueError):
        postprocess.best_answers([], [{"example_id": "e", "offset_mapping": OFFSETS}], np.zeros((2, 10)),
                                 np.zeros((2, 10)))
