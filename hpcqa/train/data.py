"""SQuAD-format data -> model features, as run_qa.py does it.

Sources (one documented rule, see README): `data.dataset` is
  - `builtin:synthetic-squad`: generated SQuAD JSON (hpcqa.train.synth), written to the cache and then
    read through the same local-file path as user data;
  - a hub dataset name (`squad`, `squad_v2`, ...): `load_dataset(name, cache_dir=data.cache_dir)`,
    offline unless model.allow_download;
  - empty: `data.train_file` / `data.validation_file`, official nested SQuAD JSON (`{"data": [...]}`)
    or JSON lines (`.jsonl`: one flat record per line: id, title, context, question, answers).
Tokenised features are cached under a key of (data fingerprint, tokenizer, lengths); rank 0 builds
them first, the other ranks load them.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

if TYPE_CHECKING:
    from hpcqa.config import DataConfig

FEATURES_VERSION = "1"


def _flatten_nested(batch: dict[str, list]) -> dict[str, list]:
    out: dict[str, list] = {k: [] for k in ("id", "title", "context", "question", "answers", "first_fact")}
    for title, paragraphs in zip(batch["title"], batch["paragraphs"]):
        for para in paragraphs:
            for qa in para["qas"]:
                answers = qa.get("answers") or []
                if qa.get("is_impossible"):
                    answers = []
                out["id"].append(str(qa["id"]))
                out["title"].append(title or "")
                out["context"].append(para["context"])
                out["question"].append(qa["question"])
                out["answers"].append({"text": [a["text"] for a in answers],
                                       "answer_start": [int(a["answer_start"]) for a in answers]})
                out["first_fact"].append(qa.get("first_fact") or "")
    return out


def _normalise_flat(row: dict[str, Any]) -> dict[str, Any]:
    a = row.get("answers") or {"text": [], "answer_start": []}
    if isinstance(a, list):  # [{"text", "answer_start"}, ...]
        a = {"text": [x["text"] for x in a], "answer_start": [int(x["answer_start"]) for x in a]}
    return {"id": str(row["id"]), "title": row.get("title") or "", "context": row["context"],
            "question": row["question"], "answers": a, "first_fact": row.get("first_fact") or ""}


def _is_nested(path: str) -> bool:
    if path.endswith(".jsonl"):
        return False
    with open(path, "rb") as f:
        head = f.read(4096).lstrip()
    return head.startswith(b"{") and b'"data"' in head[:4096] and not head.split(b"\n", 1)[0].rstrip().endswith(b"}")


def load_local(files: dict[str, str], cache_dir: str | None):
    from datasets import DatasetDict, load_dataset

    out = {}
    for split, path in files.items():
        if not os.path.exists(path):
            raise FileNotFoundError(f"data file for {split} not found: {path}")
        if _is_nested(path):
            raw = load_dataset("json", data_files={split: path}, field="data", cache_dir=cache_dir)[split]
            ds = raw.map(_flatten_nested, batched=True, remove_columns=raw.column_names,
                         desc=f"flatten {split}")
        else:
            raw = load_dataset("json", data_files={split: path}, cache_dir=cache_dir)[split]
            ds = raw.map(_normalise_flat, remove_columns=raw.column_names, desc=f"normalise {split}")
        out[split] = ds
    return DatasetDict(out)


def load_raw(data_cfg: "DataConfig", seed: int, cache_root: Path, allow_download: bool):
    """-> DatasetDict with train/validation, columns id, title, context, question, answers, first_fact."""
    from datasets import load_dataset

    cache_dir = data_cfg.cache_dir or None
    name = data_cfg.dataset
    if name == "builtin:synthetic-squad":
        from hpcqa.train import synth
        neg = data_cfg.version_2_with_negative
        files = {}
        for split, n, s in (("train", data_cfg.synthetic_train_examples, seed),
                            ("validation", data_cfg.synthetic_eval_examples, seed + 100003)):
            path = cache_root / "data" / f"synthetic-{'v2' if neg else 'v1'}-{split}-{n}-{s}.json"
            files[split] = str(synth.write(path, n, s, neg))
        return load_local(files, cache_dir)
    if name:
        if not allow_download:
            os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
        ds = load_dataset(name, cache_dir=cache_dir)
        ds = ds.map(lambda r: {"first_fact": ""}) if "first_fact" not in ds["train"].column_names else ds
        return ds
    files = {k: v for k, v in (("train", data_cfg.train_file), ("validation", data_cfg.validation_file)) if v}
    return load_local(files, cache_dir)


def _tokenize(batch: dict[str, list], tokenizer, max_len: int, stride: int):
    """Question + context windows (context truncated, overflowing windows `stride` tokens apart).
    -> (encoding, which sequence id is the context)."""
    pad_right = tokenizer.padding_side == "right"
    questions = [q.lstrip() for q in batch["question"]]
    enc = tokenizer(questions if pad_right else batch["context"], batch["context"] if pad_right else questions,
                    truncation="only_second" if pad_right else "only_first", max_length=max_len, stride=stride,
                    return_overflowing_tokens=True, return_offsets_mapping=True, padding="max_length")
    return enc, 1 if pad_right else 0


def prepare_train(batch: dict[str, list], tokenizer, max_len: int, stride: int) -> dict[str, list]:
    enc, context_id = _tokenize(batch, tokenizer, max_len, stride)
    sample_map = enc.pop("overflow_to_sample_mapping")
    offsets_all = enc.pop("offset_mapping")
    starts, ends = [], []
    for i, offsets in enumerate(offsets_all):
        ids = enc["input_ids"][i]
        cls = ids.index(tokenizer.cls_token_id) if tokenizer.cls_token_id in ids else 0
        seq = enc.sequence_ids(i)
        answers = batch["answers"][sample_map[i]]
        if not answers["answer_start"]:
            starts.append(cls), ends.append(cls)
            continue
        a0 = answers["answer_start"][0]
        a1 = a0 + len(answers["text"][0])
        t0 = seq.index(context_id)
        t1 = len(seq) - 1 - seq[::-1].index(context_id)
        if not (offsets[t0][0] <= a0 and offsets[t1][1] >= a1):
            starts.append(cls), ends.append(cls)  # the answer is not in this window
            continue
        while t0 < len(offsets) and seq[t0] == context_id and offsets[t0][0] <= a0:
            t0 += 1
        while seq[t1] == context_id and offsets[t1][1] >= a1:
            t1 -= 1
        starts.append(t0 - 1), ends.append(t1 + 1)
    enc["start_positions"], enc["end_positions"] = starts, ends
    return enc


def prepare_eval(batch: dict[str, list], tokenizer, max_len: int, stride: int) -> dict[str, list]:
    enc, context_id = _tokenize(batch, tokenizer, max_len, stride)
    sample_map = enc.pop("overflow_to_sample_mapping")
    enc["example_id"] = []
    for i in range(len(enc["input_ids"])):
        seq = enc.sequence_ids(i)
        enc["example_id"].append(batch["id"][sample_map[i]])
        enc["offset_mapping"][i] = [o if seq[k] == context_id else None for k, o in enumerate(enc["offset_mapping"][i])]
    return enc


def feature_cache_key(ds, tokenizer, split: str, max_len: int, stride: int) -> str:
    key = json.dumps({"data": ds._fingerprint, "tok": tokenizer.name_or_path, "cls": type(tokenizer).__name__,
                      "vocab": len(tokenizer), "side": tokenizer.padding_side, "split": split,
                      "max_len": max_len, "stride": stride, "v": FEATURES_VERSION}, sort_keys=True)
    return hashlib.sha256(key.encode()).hexdigest()[:20]


def featurize(ds, tokenizer, split: str, max_len: int, stride: int, cache_root: Path):
    fn = prepare_train if split == "train" else prepare_eval
    key = feature_cache_key(ds, tokenizer, split, max_len, stride)
    path = cache_root / "features" / f"{split}-{key}.arrow"
    path.parent.mkdir(parents=True, exist_ok=True)
    return ds.map(fn, batched=True, remove_columns=ds.column_names, cache_file_name=str(path),
                  load_from_cache_file=True, fn_kwargs={"tokenizer": tokenizer, "max_len": max_len, "stride": stride},
                  desc=f"tokenize {split}")
