from hpcqa.rank.train import synth


def test_deterministic_and_spans_are_real():
    a, b = synth.squad_json(50, seed=3), synth.squad_json(50, seed=3)
    assert a == b and a != synth.squad_json(50, seed=4)
    for para in a["data"][0]["paragraphs"]:
        for qa in para["qas"]:
            for ans in qa["answers"]:
                assert para["context"][ans["answer_start"]:][:len(ans["text"])] == ans["text"]


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
