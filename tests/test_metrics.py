"""SQuAD EM/F1 and post-processing against hand-computed cases."""

import numpy as np
import pytest

from hpcqa.rank.train import metrics, postprocess


@pytest.mark.parametrize(
    "text,norm",
    [
        ("The  Quick, brown fox!", "quick brown fox"),
        ("an apple a day", "apple day"),
        ("Theater", "theater"),  # 'the' only as a word
        ("  1,000  ", "1000"),
    ],
)
def test_normalize(text, norm):
    assert metrics.normalize_answer(text) == norm


def test_f1_hand_computed():
    # gold [cat, sat], pred [cat, sat, on, mat]: P = 2/4, R = 2/2 -> F1 = 2/3
    for f1 in (metrics.f1_v1, metrics.f1_v2):
        assert f1("the cat sat", "cat sat on mat") == pytest.approx(2 / 3)
        assert f1("a b c", "x y") == 0.0
        # repeated tokens count once each: gold [a, a, b], pred [a, b, b]: common a:1 b:1 -> P=R=2/3
        assert f1("a a b", "a b b") == pytest.approx(2 / 3)
    assert metrics.f1_v2("", "") == 1.0 and metrics.f1_v2("x", "") == 0.0
    assert (
        metrics.f1_v1("", "") == 0.0 and metrics.f1_v1(".", ".") == 0.0
    )  # v1.1: no shared token -> 0


def test_squad_v1_scores():
    golds = {"q1": ["Denver Broncos", "Broncos"], "q2": ["1999"], "q3": ["x"]}
    preds = {"q1": "the Broncos", "q2": "in 1999"}  # q3 unanswered -> 0
    s = metrics.squad_scores(golds, preds)
    assert s["exact_match"] == pytest.approx(100 / 3)
    assert s["f1"] == pytest.approx(100 * (1 + 2 / 3 + 0) / 3)
    assert s["count"] == 3 and "HasAns_exact" not in s and s["rules"] == "squad-v1.1"


def test_the_issue_cases_v1_rules_on_v1_data():
    # gold ["cat", "the"], prediction "": v1.1 EM 100 ("the" normalises to "" == "")
    assert metrics.squad_scores({"q": ["cat", "the"]}, {"q": ""})["exact_match"] == 100.0
    # gold ["."], prediction ".": v1.1 F1 0 (no token shared), EM 100
    s = metrics.squad_scores({"q": ["."]}, {"q": "."})
    assert (s["exact_match"], s["f1"]) == (100.0, 0.0)
    # the same under v2.0's rules: the golds normalising to '' are dropped -> gold ''
    s = metrics.squad_scores({"q": ["."]}, {"q": "."}, version_2=True)
    assert (s["exact_match"], s["f1"]) == (100.0, 100.0)


def test_v2_has_answer_from_the_raw_list_and_splits_always_reported():
    # {q1: ["the"]} is a HasAns question for v2.0 (its raw answer list is not empty)
    s = metrics.squad_scores(
        {"q1": ["the"], "q2": ["cat"]}, {"q1": "", "q2": "cat"}, version_2=True
    )
    assert (s["HasAns_total"], "NoAns_total" in s) == (2, False)
    assert s["HasAns_exact"] == 100.0 and s["rules"] == "squad-v2.0"


def test_squad_v2_scores_split_has_and_no_answer():
    golds = {"a": ["x y"], "b": [], "c": [""], "d": ["z"]}
    preds = {"a": "", "b": "", "c": "something", "d": "z"}
    s = metrics.squad_scores(golds, preds, version_2=True)
    # a: 0/0, b: 1/1, c: 0/0 (HasAns: its raw list [""] is not empty), d: 1/1
    assert s["exact_match"] == 50.0 and s["f1"] == 50.0
    assert (s["HasAns_exact"], s["HasAns_total"]) == (pytest.approx(100 / 3), 3)
    assert (s["NoAns_exact"], s["NoAns_total"]) == (100.0, 1)


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
    return postprocess.postprocess(ex, features, np.array(starts), np.array(ends), **kw).answers[
        "e"
    ]


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
    f = [
        {"example_id": "e", "offset_mapping": OFFSETS},
        {"example_id": "e", "offset_mapping": OFFSETS},
    ]
    starts = [logits({3: 1}), logits({8: 7})]
    ends = [logits({3: 1}), logits({8: 7})]
    assert run(f, starts, ends) == "France"


def test_v2_null_answer_threshold():
    f = [{"example_id": "e", "offset_mapping": OFFSETS}]
    s, e = logits({0: 4, 8: 3}), logits({0: 4, 8: 3})  # null 8, best span 6
    assert run(f, [s], [e], version_2_with_negative=True) == ""
    assert run(f, [s], [e], version_2_with_negative=True, null_score_diff_threshold=2.5) == "France"
    assert run(f, [s], [e], version_2_with_negative=False) == "France"


def test_mismatched_rows_are_an_error():
    with pytest.raises(ValueError):
        postprocess.postprocess(
            [],
            [{"example_id": "e", "offset_mapping": OFFSETS}],
            np.zeros((2, 10)),
            np.zeros((2, 10)),
        )


def test_nbest_lists_and_null_odds_as_run_qa_writes_them():
    f = [{"example_id": "e", "offset_mapping": OFFSETS}]
    s, e = (
        logits({0: 4, 8: 3, 3: 1}),
        logits({0: 4, 8: 3, 6: 1}),
    )  # null 8; France 6; Paris..capital 2
    ex = [{"id": "e", "context": CTX}]
    out = postprocess.postprocess(
        ex, f, np.array([s]), np.array([e]), n_best_size=3, version_2_with_negative=True
    )
    nbest = out.nbest["e"]
    assert [p["text"] for p in nbest][:2] == ["", "France"]  # the null answer competes in the list
    assert abs(sum(p["probability"] for p in nbest) - 1) < 1e-9
    assert [p["probability"] for p in nbest] == sorted(
        (p["probability"] for p in nbest), reverse=True
    )
    assert out.null_odds["e"] == 8.0 - 6.0 and out.answers["e"] == ""
    assert set(nbest[0]) == {"text", "probability", "start_logit", "end_logit"}
    v1 = postprocess.postprocess(ex, f, np.array([s]), np.array([e]), n_best_size=3)
    assert (
        v1.answers["e"] == "France"
        and v1.null_odds == {}
        and "" not in [p["text"] for p in v1.nbest["e"]]
    )


def test_no_valid_span_lists_runqa_placeholder_but_answers_nothing():
    only_question = [None] * 10
    f = [{"example_id": "e", "offset_mapping": only_question}]
    ex = [{"id": "e", "context": CTX}]
    s, e = logits({0: 2}), logits({0: 1})
    v1 = postprocess.postprocess(ex, f, np.array([s]), np.array([e]))
    assert v1.answers["e"] == "" and v1.nbest["e"][0]["text"] == postprocess.EMPTY
    v2 = postprocess.postprocess(
        ex,
        f,
        np.array([s]),
        np.array([e]),
        version_2_with_negative=True,
        null_score_diff_threshold=10.0,
    )
    assert v2.answers["e"] == "" and v2.null_odds["e"] == 3.0  # run_qa's odds: null score - 0
