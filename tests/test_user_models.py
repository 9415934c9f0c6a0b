"""What users bring (issue 70): their own model folders and data, checked on the submit host before anything is
queued, each refusal one `error:` line naming the key and one `fix:` line, exit 2, nothing queued. The models are
real: tiny random ones of two families (BERT with a WordPiece tokenizer, RoBERTa with a byte-level BPE one, each
trained by `tokenizers` here), saved with save_pretrained as a user saves them."""

import json
import shutil
from pathlib import Path

import pytest

from hpcqa.rank.train import synth
from tests.test_local_e2e import job_dirs

pytestmark = pytest.mark.slow

SMALL = [
    "--set",
    "data.synthetic_train_examples=120",
    "--set",
    "data.synthetic_eval_examples=30",
    "--set",
    "train.num_train_epochs=1",
    "--set",
    "train.bf16=false",
    "--set",
    "train.max_seq_length=128",
    "--set",
    "train.doc_stride=32",
]


def _bert(folder: Path, positions: int = 512) -> Path:
    from transformers import BertConfig, BertForQuestionAnswering

    from hpcqa.rank.train.model import tiny_tokenizer

    tok = tiny_tokenizer()
    cfg = BertConfig(
        vocab_size=len(tok),
        hidden_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=128,
        max_position_embeddings=positions,
    )
    BertForQuestionAnswering(cfg).save_pretrained(str(folder))
    tok.save_pretrained(str(folder))
    return folder


def _roberta(folder: Path, positions: int) -> Path:
    """A byte-level BPE trained here, with RoBERTa's <s> A </s></s> B </s> (a tokenizer built from vocab.json and
    merges.txt alone came out empty under transformers 5: every text 0 tokens, which submit refuses too)."""
    from tokenizers import ByteLevelBPETokenizer, processors
    from transformers import RobertaConfig, RobertaForQuestionAnswering, RobertaTokenizerFast

    bpe = ByteLevelBPETokenizer(trim_offsets=True)
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    bpe.train_from_iterator(synth.corpus(200), vocab_size=600, special_tokens=specials)
    inner = bpe._tokenizer
    inner.post_processor = processors.RobertaProcessing(
        ("</s>", inner.token_to_id("</s>")), ("<s>", inner.token_to_id("<s>")), trim_offsets=True
    )
    tok = RobertaTokenizerFast(
        tokenizer_object=inner,
        bos_token="<s>",
        eos_token="</s>",
        sep_token="</s>",
        cls_token="<s>",
        unk_token="<unk>",
        pad_token="<pad>",
        mask_token="<mask>",
    )
    cfg = RobertaConfig(
        vocab_size=len(tok),
        hidden_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=128,
        max_position_embeddings=positions,
        pad_token_id=tok.pad_token_id,
    )
    assert tok.pad_token_id == 1
    RobertaForQuestionAnswering(cfg).save_pretrained(str(folder))
    tok.save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("user-models")
    return {
        "bert": _bert(root / "bert"),
        "bert64": _bert(root / "bert64", positions=64),
        "roberta": _roberta(root / "roberta", positions=130),
    }


def _data(path: Path, n: int = 40, edit=None) -> Path:
    data = synth.squad_json(n, 5)
    if edit:
        edit(data["data"][0]["paragraphs"])
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def submit(cli, tmp_path, model, *sets, dry=False, train=None, env=None):
    train = train or _data(tmp_path / "train.json")
    args = [
        "submit",
        "configs/quickstart.toml",
        *SMALL,
        "--set",
        f"model.name_or_path={json.dumps(str(model))}",
        "--set",
        'data.dataset=""',
        "--set",
        f"data.train_file={json.dumps(str(train))}",
        "--set",
        f"data.validation_file={json.dumps(str(_data(tmp_path / 'dev.json', 20)))}",
        "--set",
        f"job.output_dir={json.dumps(str(tmp_path / 'out'))}",
    ]
    for s in sets:
        args += ["--set", s]
    return cli(*args, *(["--dry-run"] if dry else []), env=env)


def refused(r, *words):
    """exit 2, an error line and a fix line, no traceback, every word in the answer; nothing was started."""
    text = " ".join(r.stderr.split())
    assert "local job" not in r.stdout + r.stderr
    assert r.returncode == 2, r.stdout + r.stderr
    assert "error:" in r.stderr and "fix:" in r.stderr and "Traceback" not in r.stderr, r.stderr
    for w in words:
        assert w in text, (w, text)
    return text


def test_a_model_folder_without_tokenizer_files_is_refused(cli, tmp_path, models):
    bare = tmp_path / "bare"
    shutil.copytree(models["bert"], bare)
    for f in bare.iterdir():
        if f.name.startswith(("tokenizer", "vocab", "special_tokens")):
            f.unlink()
    refused(
        submit(cli, tmp_path, bare),
        "model.name_or_path",
        "has no tokenizer files",
        "5-token tokenizer",
        "tokenizer.save_pretrained",
    )


def test_max_seq_length_past_the_positions_is_refused_roberta_counts_its_offset(
    cli, tmp_path, models
):
    refused(
        submit(cli, tmp_path, models["bert64"]),
        "train.max_seq_length",
        "128 tokens",
        "(64: max_position_embeddings 64)",
        "at most 64",
    )
    # RoBERTa numbers positions from pad_token_id + 1: 130 positions take 128 tokens, not 130
    refused(
        submit(cli, tmp_path, models["roberta"], "train.max_seq_length=129"),
        "(128: max_position_embeddings 130, less 2",
    )
    ok = submit(cli, tmp_path, models["roberta"], dry=True)
    assert ok.returncode == 0 and "would refuse" not in ok.stderr, ok.stderr


def test_blank_contexts_and_overlong_questions_are_refused_with_their_ids(cli, tmp_path, models):
    def blank(paragraphs):
        paragraphs[0]["context"] = "  \n\t "

    def long_question(paragraphs):
        paragraphs[1]["qas"][0]["question"] = "what " * 200

    ids = [q["id"] for p in synth.squad_json(40, 5)["data"][0]["paragraphs"] for q in p["qas"]]
    refused(
        submit(cli, tmp_path, models["bert"], train=_data(tmp_path / "b.json", edit=blank)),
        "data.train_file",
        "only whitespace",
        repr(ids[0]),
    )
    refused(
        submit(cli, tmp_path, models["bert"], train=_data(tmp_path / "q.json", edit=long_question)),
        "data.train_file",
        "1 question(s) longer than",
        repr(ids[1]),
        "raise train.max_seq_length",
    )


def test_data_in_a_script_the_vocabulary_lacks_is_refused_unless_allowed(cli, tmp_path, models):
    """The tiny English WordPiece vocabulary on Chinese text: nearly every token is [UNK]."""

    def chinese(paragraphs):
        for p in paragraphs:
            p["context"] = "北京是中国的首都。上海是一个大城市。" * 3
            for q in p["qas"]:
                q["question"] = "中国的首都是哪里？"
                q["answers"] = [{"text": "北京", "answer_start": 0}]

    train = _data(tmp_path / "zh.json", edit=chinese)
    refused(
        submit(cli, tmp_path, models["bert"], train=train),
        "data.train_file",
        "are unknown to the model's tokenizer ([UNK])",
        "data.max_unknown_token_share (now 0.05)",
    )
    ok = submit(
        cli, tmp_path, models["bert"], "data.max_unknown_token_share=1", train=train, dry=True
    )
    assert ok.returncode == 0 and "would refuse" not in ok.stderr, ok.stderr


def test_a_roberta_of_the_users_own_trains_and_its_model_loads_back(cli, tmp_path, models):
    """A byte-level BPE RoBERTa, through `hpcqa submit` on the local executor, to a model that loads back."""
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer

    r = submit(cli, tmp_path, models["roberta"], "train.max_steps=3")
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    (job,) = job_dirs(tmp_path / "out")
    res = json.loads((job / "results.json").read_text())
    model = AutoModelForQuestionAnswering.from_pretrained(res["model_dir"])
    tok = AutoTokenizer.from_pretrained(res["model_dir"])
    assert type(model).__name__ == "RobertaForQuestionAnswering" and tok.is_fast
    assert len(tok) == len(AutoTokenizer.from_pretrained(str(models["roberta"])))


def _rows(n: int = 40) -> list[dict]:
    from hpcqa.core import squadfile

    _, raw = squadfile.parse(json.dumps(synth.squad_json(n, 5)))
    return [squadfile.normalise(r) for r in raw]


def test_csv_with_its_own_column_names_is_mapped_and_trains(cli, tmp_path, models):
    """A CSV of query/passage/answer_text (no offsets: found in the passage), as users keep data in a spreadsheet:
    refused naming the columns found and the keys to map them; mapped, it trains and scores."""
    import csv

    def write(path: Path, rows: list[dict]) -> Path:
        with path.open("w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(["id", "query", "passage", "answer_text"])
            for r in rows:
                w.writerow([r["id"], r["question"], r["context"], r["answers"]["text"][0]])
        return path

    rows = _rows(60)
    train, dev = write(tmp_path / "train.csv", rows[:40]), write(tmp_path / "dev.csv", rows[40:])
    text = refused(
        submit(cli, tmp_path, models["bert"], train=train),
        "data.train_file",
        "no column 'question', 'context'",
        "found id, query, passage, answer_text",
        "data.question_column",
    )
    assert "Expecting value" not in text
    mapped = [
        "data.question_column=query",
        "data.context_column=passage",
        "data.answer_column=answer_text",
        f"data.validation_file={json.dumps(str(dev))}",
        "train.max_steps=2",
    ]
    r = submit(cli, tmp_path, models["bert"], *mapped, train=train)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    (job,) = job_dirs(tmp_path / "out")
    res = json.loads((job / "results.json").read_text())
    assert res["train_examples"] == 40 and res["eval_examples"] == 20 and res["count"] == 20
