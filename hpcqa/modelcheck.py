"""The model against the job, on the submit host before anything is queued: its files read, never its weights
(the `tokenizers` library for tokenizer.json; transformers only for a folder without one). What the ranks would
otherwise find after the queue wait, as a raw exception or a COMPLETED job that learned nothing:

- no tokenizer files in the model's folder (transformers builds a 5-token tokenizer on the fly);
- a slow (Python-only) tokenizer, which run_qa.py refuses too (observed: transformers builds it from the folder
  when there is no tokenizer.json, as the ranks will);
- train.max_seq_length past the model's position embeddings (a tensor-size error at the first step);
- an attention the model cannot run (model.attention);
- a question too long for a window of max_seq_length with doc_stride tokens of overlap (the tokenizer panics);
- a data sample mostly made of the tokenizer's unknown token (a vocabulary that does not cover the language).

The rules are hpcqa.core.modelfacts'; the ranks apply the same ones to what transformers built.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from hpcqa import fsutil
from hpcqa.core import modelfacts
from hpcqa.core.config import Config
from hpcqa.errors import ConfigError
from hpcqa.record.jobfiles.reader import load_json

SAMPLE = 200  # examples of each data file whose tokens are counted
CONTEXT_CHARS = 4000  # of each sampled context
SHOW = 3


@dataclass(frozen=True)
class ModelFiles:
    """What a model folder says of itself: config.json, tokenizer_config.json, its file names."""

    folder: Path
    config: dict
    tokenizer_config: dict = field(default_factory=dict)
    names: frozenset[str] = frozenset()


def hub_cache_dirs(cfg: Config) -> list[Path]:
    env = os.environ
    dirs = [cfg.model.cache_dir] if cfg.model.cache_dir else []
    dirs += [
        env.get("HF_HUB_CACHE", ""),
        os.path.join(env["HF_HOME"], "hub") if env.get("HF_HOME") else "",
        os.path.join(os.path.expanduser("~"), ".cache", "huggingface", "hub"),
    ]
    return [Path(d) for d in dirs if d]


def model_folder(cfg: Config) -> Path | None:
    """The folder of the model's files here: a local directory, or a hub id's snapshot in the cache (the revision
    refs/main names, else the newest); None for the built-ins and what is not here (rank 0 downloads it)."""
    name = cfg.model.name_or_path
    if name.startswith("builtin:"):
        return None
    if os.path.isdir(name):
        return Path(name)
    repo = "models--" + name.replace("/", "--")
    for d in hub_cache_dirs(cfg):
        snapshots = d / repo / "snapshots"
        try:
            ref = fsutil.read_text(d / repo / "refs" / "main", 4096, follow=True).strip()
        except (OSError, UnicodeDecodeError):
            ref = ""
        if ref and re.fullmatch(r"[0-9a-f]{40}", ref) and (snapshots / ref).is_dir():
            return snapshots / ref
        try:
            found = sorted(snapshots.iterdir(), key=lambda p: p.stat().st_mtime)
        except OSError:
            continue
        if found:
            return found[-1]
    return None


def _target(path: Path) -> Path:
    """Where a link leads (the hub cache's snapshots are links to blobs); the path itself when it is none."""
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return path


def read(folder: Path, key: str, source: str) -> ModelFiles:
    """The folder's config.json (bounded, regular file) and file names; ConfigError when config.json is damaged."""
    # a hub cache's snapshot files are links to its blobs: followed here, the target read as a regular file
    config, why = load_json(_target(folder / "config.json"))
    if config is None:
        raise ConfigError(
            key,
            f"{folder}/config.json: {why or 'not there'}",
            "point it at a folder written by save_pretrained",
            source,
        )
    tok, _ = load_json(_target(folder / "tokenizer_config.json"))
    try:
        names = frozenset(os.listdir(folder))
    except OSError:
        names = frozenset()
    return ModelFiles(folder, config, tok or {}, names)


def check(cfg: Config, folder: Path, rows: dict[str, list[dict[str, Any]]]) -> list[str]:
    """ConfigError on the first problem; -> notes (what was predicted rather than seen). rows: a sample of each
    local data file, by its key."""
    src = cfg.source
    mf = read(folder, "model.name_or_path", src)
    notes: list[str] = []
    tok = _tokenizer(cfg, mf)
    # a tokenizer.json may keep the padding and truncation it was saved with (all-MiniLM-L6-v2's: pad to 128):
    # the checks count a text's own tokens, as the ranks' tokenizer calls do (they set both per call)
    tok.no_padding()
    tok.no_truncation()
    attention_check(cfg, mf.config.get("model_type"))
    length = _usable_length(cfg, mf)
    limit, why = modelfacts.position_limit(mf.config)
    if limit is not None and length > limit:
        raise ConfigError(
            "train.max_seq_length",
            f"{length} tokens, more than the {mf.config.get('model_type', '?')} model's positions take "
            f"({limit}: {why})",
            f"set train.max_seq_length to at most {limit}",
            src,
        )
    notes += _sample_checks(cfg, mf, tok, length, rows)
    return notes


def _tokenizer(cfg: Config, mf: ModelFiles) -> Any:
    """The model's fast tokenizer as the `tokenizers` library's object: read from tokenizer.json; without one, what
    transformers builds from the folder (observed, not predicted: vocab files may or may not make a fast one).
    ConfigError for a folder without a tokenizer and for a slow (Python-only) one, as run_qa.py refuses it."""
    kind, _ = modelfacts.tokenizer_kind(mf.names)
    named = isinstance(mf.tokenizer_config.get("tokenizer_class"), str)
    if kind == "none" and not named:
        raise ConfigError(
            "model.name_or_path",
            f"{mf.folder} has no tokenizer files (tokenizer.json, vocab.txt, vocab.json + merges.txt or a "
            "SentencePiece model): transformers would build a 5-token tokenizer on the fly, and the job would "
            "learn nothing",
            "save the tokenizer into that folder too (tokenizer.save_pretrained), or use a folder that has one",
            cfg.source,
        )
    try:
        if kind == "fast":
            from tokenizers import Tokenizer

            return Tokenizer.from_file(str(mf.folder / modelfacts.FAST_FILE))
        # heavy (transformers imports torch, 5-8 s): only for a folder without tokenizer.json
        from transformers import AutoTokenizer

        built = AutoTokenizer.from_pretrained(str(mf.folder), local_files_only=True)
    except Exception as e:  # the files are the user's: any failure to read them is one line
        raise ConfigError(
            "model.name_or_path",
            f"{mf.folder}: its tokenizer does not load ({type(e).__name__}: {str(e)[:160]})",
            "save the tokenizer again with save_pretrained",
            cfg.source,
        ) from None
    if not getattr(built, "is_fast", False):
        raise ConfigError(
            "model.name_or_path",
            f"{mf.folder}: its tokenizer is a {type(built).__name__}, a slow (Python-only) one: "
            + modelfacts.RUN_QA_SAYS,
            "use a model whose tokenizer has a fast version (a tokenizer.json, saved with save_pretrained)",
            cfg.source,
        )
    return built.backend_tokenizer


def _usable_length(cfg: Config, mf: ModelFiles) -> int:
    """max_seq_length as the ranks use it: capped at the tokenizer's model_max_length, as run_qa.py caps it."""
    most = mf.tokenizer_config.get("model_max_length")
    wanted = cfg.train.max_seq_length
    if isinstance(most, int) and not isinstance(most, bool) and 0 < most < wanted:
        return most
    return wanted


def _sample_checks(
    cfg: Config, mf: ModelFiles, tok: Any, length: int, rows: dict[str, list[dict[str, Any]]]
) -> list[str]:
    """Questions too long for a window (every question), and the share of unknown tokens (a sample), of each local
    data file, with the model's tokenizer (`tokenizers`' object)."""
    notes = []
    for key, sample in rows.items():
        if not sample:
            continue
        long_questions(cfg, tok, key, sample, length)
        notes += unknown_tokens(cfg, mf, tok, key, sample)
    return notes


def long_questions(cfg: Config, tok: Any, key: str, rows: Sequence[dict], length: int) -> None:
    """A question whose tokens leave no more than doc_stride tokens of context in a window: the tokenizer panics on
    it (run_qa.py's too). Every question of the file is counted, not a sample."""
    room = length - tok.num_special_tokens_to_add(True) - cfg.train.doc_stride - 1
    lengths = [
        len(e.ids)
        for e in tok.encode_batch([r["question"].lstrip() for r in rows], add_special_tokens=False)
    ]
    over = [(r["id"], n) for r, n in zip(rows, lengths) if n > room]
    if over:
        first = ", ".join(f"{i!r} ({n} tokens)" for i, n in over[:SHOW])
        raise ConfigError(
            key,
            f"{len(over)} question(s) longer than a window of train.max_seq_length = {length} takes with "
            f"train.doc_stride = {cfg.train.doc_stride} ({room} tokens at most; first: {first})",
            "raise train.max_seq_length, lower train.doc_stride, or drop those questions",
            cfg.source,
        )


def unknown_tokens(
    cfg: Config, mf: ModelFiles, tok: Any, key: str, sample: Sequence[dict]
) -> list[str]:
    """The share of unknown tokens on the first SAMPLE examples (questions and contexts) against
    data.max_unknown_token_share."""
    unk = mf.tokenizer_config.get("unk_token")
    unk = unk.get("content") if isinstance(unk, dict) else unk
    unk_id = tok.token_to_id(unk) if isinstance(unk, str) else None
    if unk_id is None:
        unk_id = getattr(tok.model, "unk_token", None) and tok.token_to_id(tok.model.unk_token)
    head = sample[:SAMPLE]
    texts = [r["question"] for r in head] + [r["context"][:CONTEXT_CHARS] for r in head]
    ids = [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
    share, counted = modelfacts.unknown_share(ids, unk_id)
    if not counted and any(t.strip() for t in texts):
        raise ConfigError(
            "model.name_or_path",
            f"{mf.folder}/{modelfacts.FAST_FILE} makes no tokens of the text of {key}: a tokenizer without a "
            "vocabulary (the job would learn nothing)",
            "save the tokenizer the model was trained with (tokenizer.save_pretrained) into that folder",
            cfg.source,
        )
    allowed = cfg.data.max_unknown_token_share
    if counted and share > allowed:
        raise ConfigError(
            key,
            f"{100 * share:.0f} % of the tokens of its first {len(head)} examples are unknown to the model's "
            f"tokenizer ({unk}): the vocabulary does not cover this text, and the job would learn little",
            "use a model (or a tokenizer) whose vocabulary covers the data's language, or raise "
            f"data.max_unknown_token_share (now {allowed:g}) to train anyway",
            cfg.source,
        )
    return []


def model_type(cfg: Config) -> str | None:
    """The model's type as its config.json says (the built-ins are BERTs), or None where it is not here to read."""
    name = cfg.model.name_or_path
    if name in modelfacts.BUILTIN_TYPES:
        return modelfacts.BUILTIN_TYPES[name]
    folder = model_folder(cfg)
    config, _ = load_json(_target(folder / "config.json")) if folder is not None else (None, None)
    kind = (config or {}).get("model_type")
    return kind if isinstance(kind, str) else None


def attention_check(cfg: Config, kind: Any) -> None:
    """model.attention that the model cannot run (hpcqa's or SDPA for a model with its own attention): refused."""
    setting = cfg.model.attention
    if kind in modelfacts.OWN_ATTENTION and setting in ("fused", "hpcqa", "sdpa"):
        raise ConfigError(
            "model.attention",
            f'"{setting}", but the {kind} model runs its own attention '
            f"({modelfacts.OWN_ATTENTION[kind]}) and takes no other",
            'set model.attention = "auto" (the model\'s own)',
            cfg.source,
        )
