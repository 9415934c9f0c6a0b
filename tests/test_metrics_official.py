"""hpcqa's metrics equal the official SQuAD v1.1 and v2.0 scripts (tests/squad_reference.py, written from
their published behaviour), per question and aggregated, on thousands of generated and adversarial pairs."""

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from hpcqa.rank.train import metrics
from tests import squad_reference as ref

# Pieces chosen to hit every rule: articles in all cases and inside words, ASCII punctuation (dropped),
# non-ASCII punctuation and symbols (kept), unicode letters whose lower case changes length, odd whitespace.
PIECES = [
    "the",
    "The",
    "THE",
    "a",
    "A",
    "an",
    "An",
    "theater",
    "another",
    "cat",
    "Cat",
    "dog",
    "dogs",
    "1,000",
    "1000",
    ".",
    ",",
    "!",
    "?",
    "'s",
    "--",
    "(",
    ")",
    '"',
    "café",
    "CAFÉ",
    "naïve",
    "ß",
    "İstanbul",
    "Σ",
    "«",
    "»",
    "。",
    "—",
    "🙂",
    "x",
    "y",
    "z",
    "New York",
    "new-york",
    "",
    " ",
]
SEPS = [" ", "", "  ", "\t", "\n", "\u00a0", "\u2009", ", ", "-"]


def text(rng: random.Random) -> str:
    if rng.random() < 0.08:
        return ""
    n = rng.randint(1, 5)
    return "".join(rng.choice(PIECES) + rng.choice(SEPS) for _ in range(n)).strip(
        rng.choice(["", " ", None])
    )


def dataset(rng: random.Random, n: int, v2: bool):
    golds, preds = {}, {}
    for i in range(n):
        qid = f"q{i}"
        k = rng.choice([0, 0, 1, 1, 2, 3]) if v2 else rng.randint(1, 4)
        golds[qid] = [text(rng) for _ in range(k)]
        roll = rng.random()
        if roll < 0.3 and golds[qid]:
            preds[qid] = rng.choice(golds[qid])  # copy a gold
        elif roll < 0.45 and golds[qid]:
            preds[qid] = rng.choice(golds[qid]) + rng.choice(SEPS) + text(rng)  # overlapping
        else:
            preds[qid] = text(rng)
    return golds, preds


def check_v1(golds, preds):
    want, per = ref.v1_evaluate(ref.nested(golds), preds)
    em, f1 = metrics.per_question_v1(golds, preds)
    assert {q: (em[q], f1[q]) for q in em} == per
    got = metrics.squad_scores(golds, preds)
    assert (got["exact_match"], got["f1"]) == (want["exact_match"], want["f1"])
    assert got["count"] == len(golds)


def check_v2(golds, preds, na_probs=None, thresh=1.0):
    data = ref.nested(golds)
    want, _ = ref.v2_evaluate(data, preds, na_probs, thresh)
    raw_em, raw_f1 = ref._raw_scores(data, preds)
    em, f1 = metrics.per_question_v2(golds, preds)
    assert em == {q: float(v) for q, v in raw_em.items()} and f1 == {
        q: float(v) for q, v in raw_f1.items()
    }
    got = metrics.squad_scores(
        golds, preds, version_2=True, na_probs=na_probs, na_prob_thresh=thresh
    )
    mapped = {"exact": got.pop("exact_match"), "total": got.pop("count"), **got}
    mapped.pop("rules")
    assert mapped == dict(want)


def test_v1_thousands_of_generated_questions():
    rng = random.Random(11)
    for _ in range(20):
        golds, preds = dataset(rng, 250, v2=False)
        for q in rng.sample(sorted(preds), 10):  # unanswered questions score 0 and still count
            del preds[q]
        check_v1(golds, preds)


def test_v2_thousands_of_generated_questions_with_and_without_null_odds():
    rng = random.Random(12)
    for round_ in range(20):
        golds, preds = dataset(rng, 250, v2=True)
        check_v2(golds, preds)
        odds = {q: rng.choice([rng.uniform(-5, 5), 0.0, 1.0, 2.5]) for q in preds}  # ties included
        check_v2(golds, preds, odds, thresh=[1.0, 0.0, -1.0, 2.5][round_ % 4])


def test_v2_missing_predictions_are_left_out_of_the_totals_like_the_script():
    golds = {"a": ["x"], "b": ["y"], "c": []}
    preds = {"a": "x", "c": ""}
    want, _ = ref.v2_evaluate(
        ref.nested({"a": ["x"], "c": []}), preds
    )  # the script can't split with b missing
    got = metrics.squad_scores(golds, preds, version_2=True)
    assert (
        (got["exact_match"], got["f1"], got["count"])
        == (want["exact"], want["f1"], want["total"])
        == (100.0, 100.0, 2)
    )


answers = st.lists(
    st.text(alphabet=st.sampled_from(list("theaAn .,!'-xyzé\u00a0\tİß")), max_size=12), max_size=3
)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from([f"q{i}" for i in range(8)]),
        st.tuples(
            answers,
            st.text(alphabet=st.sampled_from(list("theaAn .,!'-xyzé\u00a0\tİß")), max_size=12),
        ),
        min_size=1,
    )
)
def test_hypothesis_adversarial_pairs(items):
    golds = {q: g for q, (g, _) in items.items()}
    preds = {q: p for q, (_, p) in items.items()}
    check_v2(golds, preds)
    v1 = {q: g for q, g in golds.items() if g}
    if v1:
        check_v1(v1, {q: preds[q] for q in v1})
