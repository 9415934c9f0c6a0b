"""SQuAD-format data -> model features, as run_qa.py does it.

Sources (one documented rule, see README): `data.dataset` is
  - `builtin:synthetic-squad`: generated SQuAD JSON (hpcqa.rank.train.synth), written to the cache and then
    read through the same local-file path as user data;
  - a hub dataset name (`squad`, `squad_v2`, ...) with `data.dataset_config_name`:
    `load_dataset(name, config, cache_dir=data.cache_dir)`, offline unless model.allow_download;
  - empty: `data.train_file` / `validation_file` / `test_file`, read by hpcqa.core.squadfile (official nested
    JSON, flat {"data": [...]} records or JSON lines, decided by parsing; title optional).
Every split has the columns id, title, context, question, answers, first_fact. Tokenised features are
cached under a key of (the data's identity, tokenizer, lengths, padding); rank 0 builds them first, the
other ranks load them.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from datasets import Dataset, DatasetDict, Features, Sequence, Value, load_dataset
from transformers import AutoConfig, AutoTokenizer

from hpcqa.core import modelfacts, squadfile
from hpcqa.errors import RankError
from hpcqa.fsutil import file_sha256
from hpcqa.rank.train import synth
from hpcqa.rank.train.model import resolve
from hpcqa.record.caches import Caches

if TYPE_CHECKING:
    from hpcqa.core.config import DataConfig

FEATURES_VERSION = "2"
SPLITS = ("train", "validation", "test")


def _features():
    return Features(
        {
            "id": Value("string"),
            "title": Value("string"),
            "context": Value("string"),
            "question": Value("string"),
            "answers": {
                "text": Sequence(Value("string")),
                "answer_start": Sequence(Value("int32")),
            },
            "first_fact": Value("string"),
        }
    )


def load_file(path: str, split: str, columns=squadfile.DEFAULT_COLUMNS):
    """One local SQuAD-format file -> Dataset. Its fingerprint is the file's content digest (with the reader's
    version and the column mapping), so the feature cache follows the data, not the path or the day."""

    if not os.path.exists(path):
        raise FileNotFoundError(f"data file for {split} not found: {path}")
    try:
        fmt, rows = squadfile.read(path, columns, split)
    except ValueError as e:
        raise ValueError(f"{path}: not a data file hpcqa reads: {e}") from None
    bad = squadfile.problems(rows)
    if bad:
        raise ValueError(f"{path} ({fmt}): {'; '.join(bad)}")
    ds = Dataset.from_list(rows, features=_features(), split=split)
    identity = hashlib.sha256(
        f"{_content_id(path, split)}/{squadfile.READER_VERSION}/{json.dumps(columns)}".encode()
    ).hexdigest()[:32]
    return Dataset(ds.data, info=ds.info, split=ds.split, fingerprint=identity)


def _content_id(path: str, split: str) -> str:
    """What names a data file's content: its digest; a save_to_disk folder's, its Arrow files' digests."""
    if not os.path.isdir(path):
        return file_sha256(path)
    folder = squadfile.saved_dataset(Path(path), split)
    return "+".join(file_sha256(p) for p in sorted(folder.glob("*.arrow")))


def load_local(
    files: dict[str, str], cache_dir: str | None = None, columns=squadfile.DEFAULT_COLUMNS
):
    """{split: path} -> DatasetDict. (cache_dir is unused: local files are read whole, not cached.)"""

    return DatasetDict({split: load_file(path, split, columns) for split, path in files.items()})


def _hub_columns(row: dict) -> dict:
    return {"title": row.get("title") or "", "first_fact": row.get("first_fact") or ""}


def load_raw(data_cfg: "DataConfig", seed: int, caches: Caches, allow_download: bool):
    """-> DatasetDict with the splits that exist among train/validation/test."""

    cache_dir = data_cfg.cache_dir or None
    name = data_cfg.dataset
    if name == "builtin:synthetic-squad":
        neg = data_cfg.version_2_with_negative
        files = {}
        for split, n, s in (
            ("train", data_cfg.synthetic_train_examples, seed),
            ("validation", data_cfg.synthetic_eval_examples, seed + 100003),
            ("test", data_cfg.synthetic_eval_examples, seed + 200003),
        ):
            path = caches.synthetic_data(neg, split, n, s, data_cfg.synthetic_shape)
            files[split] = str(synth.write(path, n, s, neg, data_cfg.synthetic_shape))
        return load_local(files)
    saved = squadfile.saved_splits(Path(name)) if name and os.path.isdir(name) else []
    if saved:  # save_to_disk: read as local files are, split by split
        return load_local({split: name for split in saved}, columns=squadfile.column_map(data_cfg))
    if name:
        if not allow_download:
            os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
        try:
            ds = load_dataset(name, data_cfg.dataset_config_name or None, cache_dir=cache_dir)
        except (
            ConnectionError,
            FileNotFoundError,
            OSError,
        ) as e:  # offline: huggingface_hub's are OSErrors
            raise RankError(
                f"dataset {name!r} could not be loaded here ({type(e).__name__}: {str(e)[:200]})",
                "`hpcqa stage CONFIG` on a machine with network fills data.cache_dir; or set "
                "model.allow_download = true",
            ) from None
        for split in list(ds):
            ds[split] = _mapped(ds[split], squadfile.column_map(data_cfg), f"{name} ({split})")
            missing = {"title", "first_fact"} - set(ds[split].column_names)
            if missing:
                ds[split] = ds[split].map(_hub_columns, desc=f"columns {split}")
        return ds
    files = {
        k: v
        for k, v in zip(SPLITS, (data_cfg.train_file, data_cfg.validation_file, data_cfg.test_file))
        if v
    }
    return load_local(files, columns=squadfile.column_map(data_cfg))


def _mapped(ds, columns, where: str):
    """A hub dataset's columns renamed to hpcqa's (data.question_column, ...); RankError naming the columns found
    when one is missing."""
    have = set(ds.column_names)
    for ours, theirs in columns:
        if theirs == ours:
            continue
        if ours in have:
            ds = ds.remove_columns(ours)
        if theirs in ds.column_names:
            ds = ds.rename_column(theirs, ours)
    missing = [
        theirs for ours, theirs in columns if ours not in ds.column_names and ours != "answers"
    ]
    if missing:
        raise RankError(
            f"{where} has no column {', '.join(map(repr, missing))} (found {', '.join(ds.column_names)})",
            "name your columns: data.question_column, data.context_column, data.answer_column",
        )
    return ds


def _tokenize(batch: dict[str, list], tokenizer, max_len: int, stride: int, pad: bool = True):
    """Question + context windows (context truncated, overflowing windows `stride` tokens apart), padded
    to max_len or (pad false) not at all: the data collator pads each batch.
    -> (encoding, which sequence id is the context)."""
    pad_right = tokenizer.padding_side == "right"
    questions = [q.lstrip() for q in batch["question"]]
    enc = tokenizer(
        questions if pad_right else batch["context"],
        batch["context"] if pad_right else questions,
        truncation="only_second" if pad_right else "only_first",
        max_length=max_len,
        stride=stride,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
        padding="max_length" if pad else False,
    )
    return enc, 1 if pad_right else 0


def prepare_train(
    batch: dict[str, list], tokenizer, max_len: int, stride: int, pad: bool = True
) -> dict[str, list]:
    enc, context_id = _tokenize(batch, tokenizer, max_len, stride, pad)
    sample_map = enc.pop("overflow_to_sample_mapping")
    offsets_all = enc.pop("offset_mapping")
    starts, ends = [], []
    for i, offsets in enumerate(offsets_all):
        ids = enc["input_ids"][i]
        cls = ids.index(tokenizer.cls_token_id) if tokenizer.cls_token_id in ids else 0
        seq = enc.sequence_ids(i)
        answers = batch["answers"][sample_map[i]]
        if not answers["answer_start"]:
            starts.append(cls)
            ends.append(cls)
            continue
        a0 = answers["answer_start"][0]
        a1 = a0 + len(answers["text"][0])
        t0 = seq.index(context_id)
        t1 = len(seq) - 1 - seq[::-1].index(context_id)
        if not (offsets[t0][0] <= a0 and offsets[t1][1] >= a1):
            starts.append(cls)  # the answer is not in this window
            ends.append(cls)
            continue
        while t0 < len(offsets) and seq[t0] == context_id and offsets[t0][0] <= a0:
            t0 += 1
        while seq[t1] == context_id and offsets[t1][1] >= a1:
            t1 -= 1
        starts.append(t0 - 1)
        ends.append(t1 + 1)
    enc["start_positions"], enc["end_positions"] = starts, ends
    return enc


def prepare_eval(
    batch: dict[str, list], tokenizer, max_len: int, stride: int, pad: bool = True
) -> dict[str, list]:
    enc, context_id = _tokenize(batch, tokenizer, max_len, stride, pad)
    sample_map = enc.pop("overflow_to_sample_mapping")
    enc["example_id"] = []
    for i in range(len(enc["input_ids"])):
        seq = enc.sequence_ids(i)
        enc["example_id"].append(batch["id"][sample_map[i]])
        enc["offset_mapping"][i] = [
            o if seq[k] == context_id else None for k, o in enumerate(enc["offset_mapping"][i])
        ]
    return enc


def feature_cache_key(
    ds, tokenizer, split: str, max_len: int, stride: int, pad: bool = True
) -> str:
    key = json.dumps(
        {
            "data": ds._fingerprint,
            "tok": tokenizer.name_or_path,
            "cls": type(tokenizer).__name__,
            "vocab": len(tokenizer),
            "side": tokenizer.padding_side,
            "split": split,
            "max_len": max_len,
            "stride": stride,
            "pad": pad,
            "v": FEATURES_VERSION,
        },
        sort_keys=True,
    )
    return hashlib.sha256(key.encode()).hexdigest()[:20]


def featurize(
    ds,
    tokenizer,
    split: str,
    max_len: int,
    stride: int,
    caches: Caches,
    pad: bool = True,
    num_proc: int | None = None,
):
    """Tokenised features of one split (train: with answer positions; others: with example ids and context
    offsets), through the feature cache. num_proc: datasets' worker processes (run_qa's
    preprocessing_num_workers)."""
    fn = prepare_train if split == "train" else prepare_eval
    key = feature_cache_key(
        ds, tokenizer, "train" if split == "train" else "eval", max_len, stride, pad
    )
    path = caches.features(split, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    return ds.map(
        fn,
        batched=True,
        remove_columns=ds.column_names,
        cache_file_name=str(path),
        load_from_cache_file=True,
        num_proc=num_proc or None,
        fn_kwargs={"tokenizer": tokenizer, "max_len": max_len, "stride": stride, "pad": pad},
        desc=f"tokenize {split}",
    )


def capped_length(wanted: int, tokenizer) -> tuple[int, str | None]:
    """run_qa.py: max_seq_length is capped at what the model takes. -> (length, warning or None)."""
    limit = getattr(tokenizer, "model_max_length", None)
    if isinstance(limit, int) and 0 < limit < wanted:
        return limit, (
            f"train.max_seq_length = {wanted} is longer than the model takes ({limit}, the tokenizer's "
            f"model_max_length): using {limit}"
        )
    return wanted, None


def prepare_data(cfg, croot: Caches, allow_download: bool | None = None) -> tuple[dict, list[str]]:
    """What load_data gives a rank, and what `hpcqa stage` puts in the caches beforehand (same code, same
    cache keys). allow_download None: model.allow_download decides."""
    tc, dc = cfg.train, cfg.data
    download = cfg.model.allow_download if allow_download is None else allow_download
    model_path, kwargs = resolve(cfg.model, croot)
    if download and "local_files_only" in kwargs:
        kwargs["local_files_only"] = False
    tokenizer = fast_tokenizer(cfg, model_path, kwargs)
    max_len, warning = capped_length(tc.max_seq_length, tokenizer)
    _check_lengths(cfg, tokenizer, max_len, model_path, kwargs)
    raw = checked_raw(cfg, croot, download, tokenizer, max_len)
    train_raw = _first(raw["train"], dc.max_train_samples)
    need_eval = tc.do_eval or tc.eval_strategy != "no"
    eval_raw = (
        _first(raw["validation"], dc.max_eval_samples)
        if "validation" in raw and need_eval
        else None
    )
    if tc.eval_strategy != "no" and eval_raw is None:
        raise RankError(
            f'train.eval_strategy = "{tc.eval_strategy}", but the data has no validation split',
            'set data.validation_file, or train.eval_strategy = "no"',
        )
    test_raw = (
        _first(raw["test"], dc.max_predict_samples) if "test" in raw and tc.do_predict else None
    )
    if tc.do_predict and test_raw is None:
        raise RankError(
            f"train.do_predict = true, but the data has no test split (splits: {', '.join(raw)})",
            "set data.test_file, or train.do_predict = false",
        )

    def features(ds, split):
        if ds is None:
            return None
        return featurize(
            ds,
            tokenizer,
            split,
            max_len,
            tc.doc_stride,
            croot,
            pad=dc.pad_to_max_length,
            num_proc=dc.preprocessing_num_workers,
        )

    return {
        "model_path": model_path,
        "model_kwargs": kwargs,
        "tokenizer": tokenizer,
        "max_seq_length": max_len,
        "train_raw": train_raw,
        "eval_raw": eval_raw,
        "test_raw": test_raw,
        "train_features": features(train_raw, "train"),
        "eval_features": features(eval_raw, "validation"),
        "test_features": features(test_raw, "test"),
    }, [warning] if warning else []


def fast_tokenizer(cfg, model_path: str, kwargs: dict):
    """The model's tokenizer, refused unless it is a fast one (run_qa.py's same limit)."""
    tokenizer = AutoTokenizer.from_pretrained(model_path, **kwargs)
    if not getattr(tokenizer, "is_fast", False):
        raise RankError(
            f"the tokenizer of {cfg.model.name_or_path} is a {type(tokenizer).__name__}, not a fast one: "
            + modelfacts.RUN_QA_SAYS,
            "use a model whose folder has a tokenizer.json (a fast tokenizer saved with save_pretrained)",
        )
    return tokenizer


def checked_raw(cfg, croot: Caches, download: bool, tokenizer, max_len: int):
    """The raw splits, checked: the SQuAD version against the config, blank and over-long questions."""
    raw = load_raw(cfg.data, cfg.train.seed, croot, download)
    _check_version(cfg.data, raw)
    _check_questions(cfg, tokenizer, raw, max_len)
    return raw


def _check_positions(model_path: str, kwargs: dict, max_len: int) -> None:
    """The usable length against the model's position embeddings (a tensor-size error at the first step otherwise)."""
    config = AutoConfig.from_pretrained(model_path, **kwargs).to_dict()
    limit, why = modelfacts.position_limit(config)
    if limit is not None and max_len > limit:
        raise RankError(
            f"train.max_seq_length {max_len} is more than the {config.get('model_type')} model's positions take "
            f"({limit}: {why})",
            f"set train.max_seq_length to at most {limit}",
        )


def _check_questions(cfg, tokenizer, raw, max_len: int) -> None:
    """Every question leaves more than doc_stride tokens of context in a window (the tokenizer panics otherwise),
    and the contexts and questions are not blank: refused with the first ids (submit checked local files)."""
    room = max_len - tokenizer.num_special_tokens_to_add(pair=True) - cfg.train.doc_stride - 1
    for split in raw:
        ds = raw[split]
        blank = [
            i
            for i, c, q in zip(ds["id"], ds["context"], ds["question"])
            if not c.strip() or not q.strip()
        ]
        lengths = [
            len(x)
            for x in tokenizer([q.lstrip() for q in ds["question"]], add_special_tokens=False)[
                "input_ids"
            ]
        ]
        over = [(i, n) for i, n in zip(ds["id"], lengths) if n > room]
        if blank or over:
            what = (
                f"{len(blank)} example(s) with a blank context or question (first: {blank[:3]})"
                if blank
                else f"{len(over)} question(s) longer than {room} tokens, what a window of {max_len} with "
                f"train.doc_stride {cfg.train.doc_stride} leaves (first: {over[:3]})"
            )
            raise RankError(
                f"the {split} split has {what}",
                "drop those examples, or raise train.max_seq_length / lower train.doc_stride",
            )
    if "train" in raw:
        _check_unknown(cfg, tokenizer, raw["train"])


def _check_unknown(cfg, tokenizer, ds) -> None:
    """The share of unknown tokens on the first 200 examples, as submit checks local files (a hub dataset is read
    only here)."""
    head = ds.select(range(min(200, len(ds))))
    texts = list(head["question"]) + [c[:4000] for c in head["context"]]
    ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
    share, counted = modelfacts.unknown_share(ids, tokenizer.unk_token_id)
    allowed = cfg.data.max_unknown_token_share
    if counted and share > allowed:
        raise RankError(
            f"{100 * share:.0f} % of the tokens of the first {len(head)} training examples are unknown to the "
            f"model's tokenizer ({tokenizer.unk_token}): its vocabulary does not cover this text",
            "use a model whose vocabulary covers the data's language, or raise "
            f"data.max_unknown_token_share (now {allowed:g})",
        )


def _check_lengths(cfg, tokenizer, max_len: int, model_path: str, kwargs: dict) -> None:
    """The usable sequence length against the model's positions, the padding multiple and the stride."""
    _check_positions(model_path, kwargs, max_len)
    tc, dc = cfg.train, cfg.data
    limit, multiple = getattr(tokenizer, "model_max_length", None), dc.pad_to_multiple_of
    if (
        not dc.pad_to_max_length
        and isinstance(limit, int)
        and -(-max_len // multiple) * multiple > limit
    ):
        raise RankError(
            f"data.pad_to_multiple_of = {multiple} pads a batch of {max_len} tokens to "
            f"{-(-max_len // multiple) * multiple}, more than the model takes ({limit})",
            f"set data.pad_to_multiple_of to a divisor of {max_len} (8 suits the CPU kernels)",
        )
    if tc.doc_stride >= max_len:
        raise RankError(
            f"train.doc_stride {tc.doc_stride} is not below the usable max_seq_length {max_len}",
            f"set train.doc_stride below {max_len}",
        )


def _check_version(dc, raw) -> None:
    """v2 data (unanswerable questions) scored by v1 rules would mis-score without a word: refused. Local files
    were checked at submit."""
    for split in ("train", "validation"):
        if split in raw and not dc.train_file and not dc.validation_file:
            facts = squadfile.facts([{"answers": a} for a in raw[split]["answers"]])
            mismatch, _ = squadfile.version_check(
                facts, dc.version_2_with_negative, f"{dc.dataset} ({split})"
            )
            if mismatch:
                raise RankError(mismatch, "set data.version_2_with_negative = true")


def _first(ds, n: int):
    return ds.select(range(min(n, len(ds)))) if n else ds
