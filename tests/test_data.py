"""The QA data pipeline on real (tiny) tokenizers and real files: SQuAD JSON, JSON lines, the features."""

import json

import pytest

from hpcqa.train import data, model, synth

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer
    d = model.build_tiny_bert(tmp_path_factory.mktemp("m") / "tiny")
    return AutoTokenizer.from_pretrained(str(d))


def test_tiny_tokenizer_adds_cls_and_sep(tokenizer):
    ids = tokenizer("what is it?", "a context")["input_ids"]
    assert ids[0] == tokenizer.cls_token_id and ids.count(tokenizer.sep_token_id) == 2
    assert len(tokenizer) > 100


def test_nested_json_and_jsonl_load_the_same_rows(tmp_path):
    nested = synth.write(tmp_path / "d.json", 20, seed=5)
    rows = [{"id": qa["id"], "title": "t", "context": p["context"], "question": qa["question"],
             "answers": qa["answers"]} for p in json.loads(nested.read_text())["data"][0]["paragraphs"] for qa in p["qas"]]
    jl = tmp_path / "d.jsonl"
    jl.write_text("\n".join(json.dumps(r) for r in rows))
    a = data.load_local({"train": str(nested)}, str(tmp_path / "c"))["train"]
    b = data.load_local({"train": str(jl)}, str(tmp_path / "c"))["train"]
    assert len(a) == len(b) == 20
    assert list(a["answers"]) == list(b["answers"]) and list(a["context"]) == list(b["context"])


def test_missing_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.json"):
        data.load_local({"train": str(tmp_path / "nope.json")}, None)


def test_train_features_point_at_the_answer(tmp_path, tokenizer):
    ds = data.load_local({"train": str(synth.write(tmp_path / "d.json", 60, seed=9))}, str(tmp_path / "c"))["train"]
    # short windows force overflow: some windows miss the answer and must point at CLS
    feats = data.prepare_train(ds[:60], tokenizer, max_len=48, stride=16)
    assert len(feats["input_ids"]) > 60
    enc = tokenizer([q.lstrip() for q in ds["question"]], list(ds["context"]), truncation="only_second", max_length=48,
                    stride=16, return_overflowing_tokens=True, return_offsets_mapping=True, padding="max_length")
    hits = cls = 0
    for i, (s, e) in enumerate(zip(feats["start_positions"], feats["end_positions"])):
        ex = enc["overflow_to_sample_mapping"][i]
        if s == 0 and e == 0:
            cls += 1
            continue
        off = enc["offset_mapping"][i]
        text = ds[ex]["context"][off[s][0]:off[e][1]]
        assert text == ds[ex]["answers"]["text"][0]
        hits += 1
    assert hits >= 60 * 0.9 and cls > 0


def test_eval_features_keep_ids_and_context_offsets(tmp_path, tokenizer):
    ds = data.load_local({"validation": str(synth.write(tmp_path / "d.json", 10, seed=2))}, None)["validation"]
    feats = data.prepare_eval(ds[:10], tokenizer, max_len=48, stride=16)
    assert set(feats["example_id"]) == set(ds["id"])
    for i, offs in enumerate(feats["offset_mapping"]):
        seq = feats.sequence_ids(i)
        assert all((o is None) == (seq[k] != 1) for k, o in enumerate(offs))


def test_features_are_cached_by_key(tmp_path, tokenizer):
    ds = data.load_local({"train": str(synth.write(tmp_path / "d.json", 30, seed=1))}, str(tmp_path / "c"))["train"]
    a = data.featurize(ds, tokenizer, "train", 64, 16, tmp_path)
    files = sorted((tmp_path / "features").iterdir())
    b = data.featurize(ds, tokenizer, "train", 64, 16, tmp_path)
    assert sorted((tmp_path / "features").iterdir()) == files and len(a) == len(b)
    data.featurize(ds, tokenizer, "train", 96, 16, tmp_path)   # other length: another cache entry
    assert len(list((tmp_path / "features").glob("train-*.arrow"))) == 2


def test_bf16_choice():
    from hpcqa.train.run import bf16_choice
    assert bf16_choice("auto", {"amx_bf16"})[0] and bf16_choice("auto", {"avx512_bf16"})[0]
    assert not bf16_choice("auto", {"avx2"})[0] and not bf16_choice("false", {"amx_bf16"})[0]


def test_ccl_planned_without_bindings_is_a_clear_error():
    """On this machine (no oneccl_bind_pt on PyPI) a plan that says ccl stops the rank, with the fix."""
    import pytest
    from hpcqa import plan
    from hpcqa.errors import RankError
    from hpcqa.train.run import verify_backend
    with pytest.raises(RankError) as e:
        verify_backend(plan.resolve_backend("ccl", ccl_bindings=False))
    assert "oneccl_bindings_for_pytorch" in e.value.message and "gloo" in e.value.hint
    assert verify_backend(plan.resolve_backend("auto", ccl_bindings=False)).startswith("gloo as planned")
