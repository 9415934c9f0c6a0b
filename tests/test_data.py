"""The QA data pipeline on real (tiny) tokenizers and real files: SQuAD JSON, JSON lines, the features."""

import json

import pytest

from hpcqa.core import squadfile
from hpcqa.rank.train import data, model, synth
from hpcqa.record.caches import Caches
from tests.conftest import ROOT

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


def test_the_tiny_model_is_the_same_wherever_it_is_built(tmp_path):
    """Two builds (two nodes with caches of their own) write the same bytes: the tokenizer too. It was trained at each
    build, and tokenizers' trainer breaks ties in hash order: three builds gave three tokenizer.json, one in four
    another vocabulary, so ranks on two nodes could read one text as different ids."""
    import hashlib

    built = [model.build_tiny_bert(tmp_path / f"node{k}" / "tiny") for k in (1, 2)]
    for name in model.TINY_FILES:
        a, b = (hashlib.sha256((d / name).read_bytes()).hexdigest() for d in built)
        assert a == b, name
    vocab = json.loads((built[0] / "tokenizer.json").read_text())["model"]["vocab"]
    assert len(vocab) == 2000 and [t for t, i in sorted(vocab.items(), key=lambda kv: kv[1])][
        :5
    ] == list(model.SPECIAL_TOKENS)


def test_nested_json_and_jsonl_load_the_same_rows(tmp_path):
    nested = synth.write(tmp_path / "d.json", 20, seed=5)
    rows = [
        {
            "id": qa["id"],
            "title": "t",
            "context": p["context"],
            "question": qa["question"],
            "answers": qa["answers"],
        }
        for p in json.loads(nested.read_text())["data"][0]["paragraphs"]
        for qa in p["qas"]
    ]
    jl = tmp_path / "d.jsonl"
    jl.write_text("\n".join(json.dumps(r) for r in rows))
    a = data.load_local({"train": str(nested)}, str(tmp_path / "c"))["train"]
    b = data.load_local({"train": str(jl)}, str(tmp_path / "c"))["train"]
    assert len(a) == len(b) == 20
    assert list(a["answers"]) == list(b["answers"]) and list(a["context"]) == list(b["context"])


def test_files_saved_with_a_byte_order_mark_read_as_without(tmp_path):
    """Excel's "CSV UTF-8" and Windows editors start a file with U+FEFF: the CSV's first column was named
    "\ufeffid" (every example "without an id"), the JSON reader stopped at it."""
    rows = [
        {"id": f"q{i}", "context": "Киев -- столица.", "question": "Что?", "answers": "Киев"}
        for i in range(3)
    ]
    csv_text = "id,context,question,answers\n" + "".join(
        f"{r['id']},{r['context']},{r['question']},{r['answers']}\n" for r in rows
    )
    jsonl = "\n".join(json.dumps(r, ensure_ascii=False) for r in rows)
    for name, text in (("d.csv", csv_text), ("d.jsonl", jsonl)):
        plain, marked = tmp_path / f"plain-{name}", tmp_path / f"bom-{name}"
        plain.write_text(text, encoding="utf-8")
        marked.write_text(text, encoding="utf-8-sig")
        assert marked.read_bytes().startswith(b"\xef\xbb\xbf")
        assert squadfile.read(marked, squadfile.DEFAULT_COLUMNS, "train") == squadfile.read(
            plain, squadfile.DEFAULT_COLUMNS, "train"
        )
        assert [r["id"] for r in squadfile.read(marked, squadfile.DEFAULT_COLUMNS, "train")[1]] == [
            "q0",
            "q1",
            "q2",
        ]


def test_missing_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.json"):
        data.load_local({"train": str(tmp_path / "nope.json")}, None)


def test_train_features_point_at_the_answer(tmp_path, tokenizer):
    ds = data.load_local(
        {"train": str(synth.write(tmp_path / "d.json", 60, seed=9))}, str(tmp_path / "c")
    )["train"]
    # short windows force overflow: some windows miss the answer and must point at CLS
    feats = data.prepare_train(ds[:60], tokenizer, max_len=48, stride=16)
    assert len(feats["input_ids"]) > 60
    enc = tokenizer(
        [q.lstrip() for q in ds["question"]],
        list(ds["context"]),
        truncation="only_second",
        max_length=48,
        stride=16,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
        padding="max_length",
    )
    hits = cls = 0
    for i, (s, e) in enumerate(zip(feats["start_positions"], feats["end_positions"])):
        ex = enc["overflow_to_sample_mapping"][i]
        if s == 0 and e == 0:
            cls += 1
            continue
        off = enc["offset_mapping"][i]
        text = ds[ex]["context"][off[s][0] : off[e][1]]
        assert text == ds[ex]["answers"]["text"][0]
        hits += 1
    assert hits >= 60 * 0.9 and cls > 0


def test_eval_features_keep_ids_and_context_offsets(tmp_path, tokenizer):
    ds = data.load_local({"validation": str(synth.write(tmp_path / "d.json", 10, seed=2))}, None)[
        "validation"
    ]
    feats = data.prepare_eval(ds[:10], tokenizer, max_len=48, stride=16)
    assert set(feats["example_id"]) == set(ds["id"])
    for i, offs in enumerate(feats["offset_mapping"]):
        seq = feats.sequence_ids(i)
        assert all((o is None) == (seq[k] != 1) for k, o in enumerate(offs))


def test_features_are_cached_by_key(tmp_path, tokenizer):
    ds = data.load_local(
        {"train": str(synth.write(tmp_path / "d.json", 30, seed=1))}, str(tmp_path / "c")
    )["train"]
    a = data.featurize(ds, tokenizer, "train", 64, 16, Caches(tmp_path))
    files = sorted((tmp_path / "features").iterdir())
    b = data.featurize(ds, tokenizer, "train", 64, 16, Caches(tmp_path))
    assert sorted((tmp_path / "features").iterdir()) == files and len(a) == len(b)
    data.featurize(
        ds, tokenizer, "train", 96, 16, Caches(tmp_path)
    )  # other length: another cache entry
    assert len(list((tmp_path / "features").glob("train-*.arrow"))) == 2


def test_bf16_choice():
    from hpcqa.core.plan import bf16_choice

    assert bf16_choice("auto", {"amx_bf16"})[0] and bf16_choice("auto", {"avx512_bf16"})[0]
    assert not bf16_choice("auto", {"avx2"})[0] and not bf16_choice("false", {"amx_bf16"})[0]


def test_ccl_planned_without_bindings_is_a_clear_error():
    """On this machine (no oneccl_bind_pt on PyPI) a plan that says ccl stops the rank, with the fix."""
    import pytest

    from hpcqa.core import plan
    from hpcqa.errors import RankError
    from hpcqa.rank.train.facts import verify_backend

    with pytest.raises(RankError) as e:
        verify_backend(plan.resolve_backend("ccl", ccl_bindings=False))
    assert "oneccl_bindings_for_pytorch" in e.value.message and "gloo" in e.value.hint
    assert verify_backend(plan.resolve_backend("auto", ccl_bindings=False)).startswith(
        "gloo as planned"
    )


# ------------------------------------------------------------------ formats, decided by parsing

ROWS = [  # v2: q3 has no answer
    {
        "id": "q1",
        "title": "Paris",
        "context": "Paris is the capital of France.",
        "question": "Capital of France?",
        "answers": {"text": ["Paris"], "answer_start": [0]},
    },
    {
        "id": "q2",
        "title": "Paris",
        "context": "Paris is the capital of France.",
        "question": "Which country?",
        "answers": {"text": ["France", "France."], "answer_start": [24, 24]},
    },
    {
        "id": "q3",
        "title": "Rome",
        "context": "Rome is old.",
        "question": "Who founded it?",
        "answers": {"text": [], "answer_start": []},
    },
]


def as_list(a):
    return [{"text": t, "answer_start": s} for t, s in zip(a["text"], a["answer_start"])]


def write_formats(tmp_path, titles: bool):
    """The same questions as nested SQuAD (v2 is_impossible), flat `data` (columnar answers, as
    transformers' sample), and JSON lines (answer lists) -- with or without titles."""

    def t(r):
        return {"title": r["title"]} if titles else {}

    arts = {}
    for r in ROWS:
        art = arts.setdefault(r["title"], {**t(r), "paragraphs": []})
        qa = {"id": r["id"], "question": r["question"], "answers": as_list(r["answers"])}
        if not r["answers"]["text"]:
            qa["is_impossible"] = True
        art["paragraphs"].append({"context": r["context"], "qas": [qa]})
    paths = {
        "squad": tmp_path / "nested.json",
        "flat": tmp_path / "flat.json",
        "jsonl": tmp_path / "rows.jsonl",
    }
    paths["squad"].write_text(json.dumps({"version": "v2.0", "data": list(arts.values())}))
    flat = [{k: v for k, v in r.items() if titles or k != "title"} for r in ROWS]
    paths["flat"].write_text(json.dumps({"version": "0.1.0", "data": flat}))
    paths["jsonl"].write_text(
        "\n".join(
            json.dumps(
                {
                    **{k: v for k, v in r.items() if titles or k != "title"},
                    "answers": as_list(r["answers"]),
                }
            )
            for r in ROWS
        )
        + "\n"
    )
    return paths


@pytest.mark.parametrize("titles", [True, False])
def test_every_format_loads_the_same_rows(tmp_path, titles):
    paths = write_formats(tmp_path, titles)
    for fmt, path in paths.items():
        got_fmt, rows = squadfile.read(path)
        assert got_fmt == fmt
        ds = data.load_file(str(path), "train")
        assert list(ds["id"]) == ["q1", "q2", "q3"]
        assert list(ds["answers"]) == [r["answers"] for r in ROWS]
        assert list(ds["title"]) == ([r["title"] for r in ROWS] if titles else ["", "", ""])
        assert list(ds["context"]) == [r["context"] for r in ROWS]


def test_the_fingerprint_follows_the_content_not_the_path(tmp_path):
    paths = write_formats(tmp_path, True)
    copy = tmp_path / "elsewhere.json"
    copy.write_bytes(paths["squad"].read_bytes())
    a, b = data.load_file(str(paths["squad"]), "train"), data.load_file(str(copy), "train")
    assert a._fingerprint == b._fingerprint
    assert data.load_file(str(paths["flat"]), "train")._fingerprint != a._fingerprint


def test_one_line_json_with_a_brace_at_byte_4096_is_still_squad(tmp_path):
    # the old loader sniffed the first 4 KiB and took a one-line file whose byte 4096 is '}' for JSON lines
    body = {
        "data": [
            {
                "title": "t",
                "paragraphs": [
                    {
                        "context": "Paris is here.",
                        "qas": [
                            {
                                "id": "a",
                                "question": "Where?",
                                "answers": [{"text": "Paris", "answer_start": 0}],
                            }
                        ],
                    }
                ],
            }
        ],
        "note": "",
    }
    body["note"] = "z" * (4096 - len(json.dumps(body)))
    line = json.dumps(body)
    assert len(line) == 4096 and line[4095] == "}" and "\n" not in line
    path = tmp_path / "one-line.json"
    path.write_text(line)
    assert squadfile.read(path)[0] == "squad"
    assert list(data.load_file(str(path), "train")["id"]) == ["a"]


@pytest.mark.parametrize("n", list(range(1, 11)) + [37])
def test_synthetic_data_loads_for_small_sizes_and_many_seeds(tmp_path, n):
    for seed in range(0, 60, 3):
        path = synth.write(tmp_path / f"s-{n}-{seed}.json", n, seed, negatives=bool(seed % 2))
        ds = data.load_file(str(path), "train")
        assert len(ds) == n and len(set(ds["id"])) == n


def test_synthetic_seed_36_at_the_default_size(tmp_path):
    ds = data.load_file(str(synth.write(tmp_path / "s.json", 2000, 36)), "train")
    assert len(ds) == 2000 and all(ds["id"])


def test_bad_rows_are_named(tmp_path):
    p = tmp_path / "dup.jsonl"
    p.write_text('{"id": "a", "context": "c", "question": "q", "answers": []}\n' * 2)
    with pytest.raises(ValueError, match="repeated id"):
        data.load_file(str(p), "train")
    p.write_text('{"id": "a", "context": "c", "question": "q"}\n{"id": "b", oops}\n')
    with pytest.raises(ValueError, match="line 2"):
        data.load_file(str(p), "train")


def test_max_seq_length_is_capped_at_what_the_model_takes(tokenizer):
    limit = tokenizer.model_max_length
    assert data.capped_length(limit, tokenizer) == (limit, None)
    length, warning = data.capped_length(limit + 100, tokenizer)
    assert length == limit and "train.max_seq_length" in warning and str(limit) in warning


def test_dynamic_padding_leaves_features_unpadded(tmp_path, tokenizer):
    ds = data.load_file(str(synth.write(tmp_path / "d.json", 10, seed=4)), "train")
    padded = data.prepare_train(ds[:10], tokenizer, max_len=128, stride=32)
    dynamic = data.prepare_train(ds[:10], tokenizer, max_len=128, stride=32, pad=False)
    assert {len(x) for x in padded["input_ids"]} == {128}
    assert (
        max(len(x) for x in dynamic["input_ids"]) <= 128
        and min(len(x) for x in dynamic["input_ids"]) < 128
    )
    assert padded["start_positions"] == dynamic["start_positions"]


def test_hub_path_with_a_dataset_config_name(tmp_path):
    """The hub code path (load_dataset(name, config)) on a dataset repository laid out as on the hub: a
    folder whose README declares two configurations; rows without titles get the common columns."""
    from hpcqa.core.config import DataConfig

    repo = tmp_path / "my-squad"
    for config, rows in (("plain_text", ROWS[:2]), ("with_negatives", ROWS)):
        for split in ("train", "validation"):
            d = repo / config
            d.mkdir(parents=True, exist_ok=True)
            (d / f"{split}.jsonl").write_text(
                "\n".join(json.dumps({k: v for k, v in r.items() if k != "title"}) for r in rows)
                + "\n"
            )
    (repo / "README.md").write_text(
        "---\nconfigs:\n"
        "- config_name: plain_text\n  default: true\n  data_files:\n"
        "  - split: train\n    path: plain_text/train.jsonl\n  - split: validation\n    path: plain_text/validation.jsonl\n"
        "- config_name: with_negatives\n  data_files:\n"
        "  - split: train\n    path: with_negatives/train.jsonl\n"
        "  - split: validation\n    path: with_negatives/validation.jsonl\n---\n"
    )
    for config, n in (("", 2), ("plain_text", 2), ("with_negatives", 3)):
        cfg = DataConfig(
            dataset=str(repo), dataset_config_name=config, cache_dir=str(tmp_path / "hf")
        )
        ds = data.load_raw(cfg, 0, Caches(tmp_path / "hpcqa"), allow_download=False)
        assert len(ds["train"]) == n and set(ds) == {"train", "validation"}
        assert (
            list(ds["train"]["title"]) == [""] * n
            and list(ds["validation"]["first_fact"]) == [""] * n
        )
        assert list(ds["train"]["answers"]) == [r["answers"] for r in ROWS[:n]]


# ------------------------------------------------------------------------------ the data's SQuAD version (issue 23)


def _v2_doc(version="v2.0"):
    return {
        "version": version,
        "data": [
            {
                "title": "t",
                "paragraphs": [
                    {
                        "context": "Paris is in France.",
                        "qas": [
                            {
                                "id": "a",
                                "question": "Where is Paris?",
                                "answers": [{"text": "France", "answer_start": 12}],
                                "is_impossible": False,
                            },
                            {
                                "id": "b",
                                "question": "Where is Rome?",
                                "answers": [],
                                "is_impossible": True,
                            },
                            {
                                "id": "c",
                                "question": "What is Paris in?",
                                "answers": [{"text": "France", "answer_start": 12}],
                                "is_impossible": True,
                            },
                        ],
                    }
                ],
            }
        ],
    }


def test_is_impossible_with_answers_is_answerable_as_the_official_script_scores_it(tmp_path):
    from hpcqa.core import squadfile
    from hpcqa.rank.train import metrics

    path = tmp_path / "dev.json"
    path.write_text(json.dumps(_v2_doc()))
    _, rows, facts = squadfile.read_with_facts(path)
    assert {r["id"]: r["answers"]["text"] for r in rows} == {
        "a": ["France"],
        "b": [],
        "c": ["France"],
    }
    assert facts == {
        "declared": "v2.0",
        "rows": 3,
        "unanswerable": 1,
        "impossible_with_answers": ["c"],
    }
    golds = {r["id"]: r["answers"]["text"] for r in rows}
    scores = metrics.squad_scores(golds, {"a": "France", "b": "", "c": "France"}, version_2=True)
    assert (
        scores["exact_match"] == 100.0
        and scores["HasAns_total"] == 2
        and scores["NoAns_total"] == 1
    )
    mismatch, warnings = squadfile.version_check(facts, True, str(path))
    assert (
        mismatch is None and "marked is_impossible still have answers (first: 'c')" in warnings[0]
    )


@pytest.mark.parametrize("declared", ["v2.0", None])
def test_v2_data_with_v1_rules_is_refused_at_submit(cli, tmp_path, declared):
    doc = _v2_doc(declared) if declared else _v2_doc()
    if not declared:
        del doc["version"]
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(doc))
    files = [
        "--set",
        f"data.validation_file={json.dumps(str(path))}",
        "--set",
        f"data.train_file={json.dumps(str(path))}",
        "--set",
        'data.dataset=""',
        "--set",
        f"job.output_dir={json.dumps(str(tmp_path / 'out'))}",
    ]
    r = cli(
        "submit",
        "configs/quickstart.toml",
        *files,
        "--set",
        "data.version_2_with_negative=false",
        env={"HPCQA_REGISTRY": str(tmp_path / "r.sqlite")},
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "data.version_2_with_negative" in r.stderr and "SQuAD v2 data" in r.stderr
    assert ("'v2.0'" in r.stderr) == bool(
        declared
    ) and "1 of 3 questions have no answer" in r.stderr
    assert not (tmp_path / "out").exists()  # refused before anything was made
    from hpcqa import preflight
    from hpcqa.core import config

    cfg = config.load(
        ROOT / "configs/quickstart.toml",
        [o for o in files if o != "--set"] + ["data.version_2_with_negative=true"],
    )
    notes = preflight.check(cfg)
    assert any("is_impossible still have answers" in n for n in notes)


def test_v1_data_with_v2_rules_warns():
    from hpcqa.core import squadfile

    mismatch, warnings = squadfile.version_check(
        {"declared": "1.1", "rows": 10, "unanswerable": 0, "impossible_with_answers": []},
        True,
        "train.json",
    )
    assert mismatch is None and "SQuAD v1.1 data" in warnings[0]


def test_model_flops_count_from_the_models_shapes(tmp_path):
    """The count against the closed form of a BERT encoder with a QA head: per layer 4 H^2 (Q, K, V, output) +
    2 H I (feed-forward) weights, the head's 2 H; attention 4 L S^2 H; training 3x the forward."""
    import torch
    from transformers import BertConfig, BertForQuestionAnswering

    from hpcqa.rank.train import efficiency

    H, I, L, S = 64, 256, 3, 96
    model = BertForQuestionAnswering(
        BertConfig(
            hidden_size=H,
            intermediate_size=I,
            num_hidden_layers=L,
            num_attention_heads=4,
            vocab_size=500,
        )
    )
    dense = L * (4 * H * H + 2 * H * I) + 2 * H
    got = efficiency.model_flops(model, S)
    assert got["dense_weights"] == dense and got["layers"] == L and got["hidden"] == H
    assert got["per_sample"] == 3 * (2 * dense * S + 4 * L * S * S * H)
    state = torch.get_rng_state()
    peak = efficiency.measure_peak("fp32", size=256, seconds=0.05)
    assert 1e8 < peak["flops"] < 1e13  # a CPU core's fp32 matmul rate, in FLOP/s
    assert 0 < peak["cpu_share"] <= 1
    # all the runs, unless one was busy (this machine shared): then it was the last
    runs = peak["runs"]
    assert len(runs) == efficiency.PEAK_RUNS or (
        len(runs) < efficiency.PEAK_RUNS and runs[-1]["cpu_share"] < efficiency.QUIET_CPU_SHARE
    ), runs
    assert torch.equal(
        torch.get_rng_state(), state
    )  # measured after the seed: the training's draws stay the same
    # the store keeps quiet measurements only (the measurement itself is tested under contention in test_peak.py)
    store = tmp_path / "peaks.json"
    quiet = lambda precision: {**peak, "flops": 5e10, "quiet": True}  # noqa: E731
    busy = lambda precision: {**peak, "flops": 1e9, "quiet": False, "cpu_share": 0.5}  # noqa: E731
    threads = torch.get_num_threads()
    first = efficiency.peak(store, 1, threads, "fp32", measure=busy)
    assert (
        first["flops"] == 1e9
        and "busy cores" in first["source"]
        and "not cached" in first["source"]
    )
    assert not efficiency.remember(store, 1, first, {"flops": 1e9}) and not store.exists()
    measured = efficiency.peak(store, 1, threads, "fp32", measure=quiet)
    # how it was taken; kept only once the end of training found it where it was
    assert (measured["flops"], measured["source"], measured["quiet"]) == (5e10, "measured", True)
    assert (
        measured["size"] == 256 and measured["threads"] == threads and measured["runs"] == len(runs)
    )
    assert not store.exists()
    assert not efficiency.remember(store, 1, measured, {"flops": 2e10})  # moved during the job
    assert not store.exists()
    # quiet and held, but the run beat it: no MFU against it, and not kept either
    held = {**measured, "measured_on": "node7", "end": {"flops": 4.6e10}}
    flops = {
        "method": "x",
        "dense_weights": 1,
        "layers": 1,
        "hidden": 1,
        "seq_len": 1,
        "per_sample": 1e9,
    }
    fast, slow = (
        efficiency.summary(flops, rate, [5e10], "fp32", "measured") for rate in (60.0, 40.0)
    )
    assert (
        "mfu_unreliable" in fast and not efficiency.keep(store, held, fast) and not store.exists()
    )
    assert "mfu_unreliable" not in slow and efficiency.keep(store, held, slow)
    store.unlink()
    assert efficiency.remember(store, 1, {**measured, "measured_on": "node7"}, {"flops": 4.6e10})
    cached = efficiency.peak(store, 1, threads, "fp32", measure=busy)
    assert (cached["flops"], cached["source"], cached["measured_on"]) == (5e10, "cached", "node7")
    assert cached["measured_at"] == measured["measured_at"] and cached["size"] == 256
    # an entry from before the quiet check (a bare number) is measured again
    key = efficiency.shape_key(1, torch.get_num_threads(), "fp32")
    store.write_text(json.dumps({key: 8.8e9}))
    again = efficiency.peak(store, 1, threads, "fp32", measure=quiet)
    assert (again["flops"], again["source"]) == (5e10, "measured")
    assert "flags" in key and "family" in key  # the silicon, not only its marketing name


def test_mfu_on_text_tokens_and_on_all_tokens_from_the_batches_counted():
    """Two padded batches counted as the ranks count them; FLOPs per sample are averaged over the samples' own
    lengths (S and S^2: attention is quadratic), and the two MFUs differ by what padding cost."""
    import torch

    from hpcqa.rank.train import efficiency

    flops = {
        "per_sample": 0,
        "dense_weights": 1000,
        "layers": 2,
        "hidden": 8,
        "seq_len": 16,
        "method": "m",
    }
    c = efficiency.new_counts()
    efficiency.count_batch(c, torch.zeros(2, 16), torch.tensor([[1] * 10 + [0] * 6, [1] * 16]))
    efficiency.count_batch(c, torch.zeros(1, 8), torch.tensor([[1] * 4 + [0] * 4]))
    assert c == {
        "samples": 3,
        "text": 30,
        "text_sq": 100 + 256 + 16,
        "all": 40,
        "all_sq": 2 * 256 + 64,
    }
    total = efficiency.add_counts([c, c])
    assert total["samples"] == 6 and total["text"] == 60
    f = lambda s: 3 * (2 * 1000 * s + 4 * 2 * s * s * 8)  # noqa: E731  one sample of s tokens
    assert efficiency.per_sample(flops, c, "text") == pytest.approx((f(10) + f(16) + f(4)) / 3)
    assert efficiency.per_sample(flops, c, "all") == pytest.approx((2 * f(16) + f(8)) / 3)
    out = efficiency.summary(flops, 10.0, [1e6, 1e6], "fp32", "measured", c)
    assert out["mfu"] == pytest.approx(out["model_flops_per_sample"] * 10 / 2e6)
    assert out["mfu"] < out["mfu_all_tokens"] and out["tokens"]["padding_share"] == pytest.approx(
        0.25
    )
    assert out["peak_method"].startswith("measured") and "mfu_unreliable" not in out
    # a peak below what the run achieved (taken on busy cores) gives no MFU over 100 %, only why and the fix
    low = efficiency.summary(
        flops, 10.0, [1e3, 1e3], "fp32", "measured", c, store="/c/hpcqa/peaks.json"
    )
    assert low["mfu"] is None and low["mfu_all_tokens"] is None
    assert (
        low["mfu_unreliable"]["mfu"] > 1 and "/c/hpcqa/peaks.json" in low["mfu_unreliable"]["fix"]
    )


def test_no_answer_column_is_named_and_all_unanswerable_is_doubted(tmp_path):
    """A train/validation file without the answer column is refused naming it (a test split's needs none); data
    where no question has an answer is doubted whichever rules score it: the likelier cause is the column."""
    from hpcqa.core import squadfile

    path = tmp_path / "t.csv"
    path.write_text("id,question,context,answer\n1,Q?,some text,text\n")
    with pytest.raises(
        ValueError, match="no column 'answers' .*found id, question, context, answer"
    ):
        squadfile.read(path)
    assert squadfile.read(path, split="test")[1][0]["answers"] == {"text": [], "answer_start": []}
    cols = (("question", "question"), ("context", "context"), ("answers", "answer"))
    assert squadfile.read(path, cols)[1][0]["answers"]["text"] == ["text"]
    none = {"declared": None, "rows": 4, "unanswerable": 4, "impossible_with_answers": []}
    mismatch, warnings = squadfile.version_check(none, False, "t.csv")
    assert "4 of 4 questions have no answer" in mismatch and not warnings
    mismatch, warnings = squadfile.version_check(none, True, "t.csv")
    assert mismatch is None and "none of its 4 questions has an answer" in warnings[0]
    some = {**none, "unanswerable": 3}
    assert squadfile.version_check(some, True, "t.csv") == (None, [])


def test_a_csv_separated_by_semicolons_is_said_so(tmp_path):
    """A spreadsheet's export in a locale that separates by ';': not 'no column', with a rename as the fix."""
    from hpcqa import preflight
    from hpcqa.core import config
    from hpcqa.errors import ConfigError

    path = tmp_path / "t.csv"
    path.write_text("id;question;context;answers\n1;Q?;some text;text\n")
    cfg = config.load(
        ROOT / "configs/quickstart.toml",
        ['data.dataset=""', f"data.train_file={json.dumps(str(path))}"],
    )
    with pytest.raises(ConfigError) as e:
        preflight.data_file(cfg, "data.train_file", str(path))
    said = e.value.render()
    assert "separated by ';', not by commas" in said and "save it with commas" in said, said
