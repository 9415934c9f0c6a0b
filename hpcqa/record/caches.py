"""The cache layout: every name under the cache root, and the root itself. The only owner, as jobdir owns the
job folder: staging, the ranks and `tune` ask here and spell no folder name of their own.

    <root>/models/tiny-bert-v<N>/                   builtin:tiny-bert, built on first use
    <root>/data/synthetic-<v1|v2>-[squad<ver>-]<split>-<n>-<seed>.json   builtin:synthetic-squad, written on first use
    <root>/features/<split>-<key>.arrow             tokenised features (key: data, tokenizer, lengths)
    <root>/manifests/<key>.json                     what `hpcqa stage` put in place (key: what decides it)

The root is the ranks' own: $HPCQA_CACHE, else <data.cache_dir>/hpcqa, else ~/.cache/hpcqa. The tuned-layout
store (`hpcqa tune`) is per user, not per data set: $HPCQA_TUNE_STORE, else $HPCQA_CACHE/tuned.json, else
~/.cache/hpcqa/tuned.json; so is the link store (`hpcqa tune --comm`): $HPCQA_LINK_STORE, else links.json there. Hugging Face's own caches (model.cache_dir, data.cache_dir) are Hugging Face's.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from hpcqa import fsutil, text

SYNTH_SHAPE_VERSION = (
    "1"  # bumped when the "squad" shape's generator changes: a new cache file, never a stale one
)


def _home_cache(env: Mapping[str, str]) -> Path:
    return Path(env.get("HPCQA_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "hpcqa"))


@dataclass(frozen=True)
class Caches:
    root: Path

    @classmethod
    def for_data_cache(cls, data_cache_dir: str, env: Mapping[str, str] | None = None) -> "Caches":
        """The ranks' cache root for a config whose data.cache_dir is `data_cache_dir` ("" = unset)."""
        env = os.environ if env is None else env
        if env.get("HPCQA_CACHE"):
            return cls(Path(env["HPCQA_CACHE"]))
        return cls(Path(data_cache_dir) / "hpcqa" if data_cache_dir else _home_cache(env))

    def tiny_model(self, version: int) -> Path:
        return self.root / "models" / f"tiny-bert-v{version}"

    def synthetic_data(
        self, negatives: bool, split: str, examples: int, seed: int, shape: str = "short"
    ) -> Path:
        shaped = "" if shape == "short" else f"{shape}{SYNTH_SHAPE_VERSION}-"
        return (
            self.root
            / "data"
            / f"synthetic-{'v2' if negatives else 'v1'}-{shaped}{split}-{examples}-{seed}.json"
        )

    def features(self, split: str, key: str) -> Path:
        return self.root / "features" / f"{split}-{key}.arrow"

    def manifest(self, key: str) -> Path:
        return self.root / "manifests" / f"{key}.json"

    def peak_store(self) -> Path:
        """Each node shape's measured matmul peak (FLOP/s), for MFU (hpcqa.rank.train.efficiency)."""
        return self.root / "peaks.json"


def tune_store(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    if env.get("HPCQA_TUNE_STORE"):
        return Path(env["HPCQA_TUNE_STORE"])
    return _home_cache(env) / "tuned.json"


def kernel_dir(env: Mapping[str, str] | None = None) -> Path:
    """Compiled kernels (the fused attention), per user like the tuned layouts: $HPCQA_KERNEL_DIR, else
    $HPCQA_CACHE/kernels, else ~/.cache/hpcqa/kernels. Code this process loads: never a group's shared data
    cache."""
    env = os.environ if env is None else env
    if env.get("HPCQA_KERNEL_DIR"):
        return Path(env["HPCQA_KERNEL_DIR"])
    return _home_cache(env) / "kernels"


def link_store(env: Mapping[str, str] | None = None) -> Path:
    """The links `hpcqa tune --comm` measured (per user, like the tuned layouts): $HPCQA_LINK_STORE, else
    $HPCQA_CACHE/links.json, else ~/.cache/hpcqa/links.json."""
    env = os.environ if env is None else env
    if env.get("HPCQA_LINK_STORE"):
        return Path(env["HPCQA_LINK_STORE"])
    return _home_cache(env) / "links.json"


_said: set[str] = set()


def read_store(path: Path, what: str, fix: str) -> dict:
    """A per-user store (tuned layouts, measured links, a staging manifest, measured peaks) read through the one
    reader (fsutil.load_json: a regular file, never a link or a FIFO, bounded, depth-safe). A store only ever saves
    work, so a damaged one counts as missing: said once per process on stderr, naming it and the fix."""
    data, why = fsutil.load_json(path)
    if why is not None:
        read_store_damaged(path, what, why, fix)
    return data or {}


def read_store_damaged(path: Path, what: str, why: str, fix: str) -> None:
    """Say once per process that a store is damaged and not used."""
    if str(path) not in _said:
        _said.add(str(path))
        sys.stderr.write(
            f"hpcqa: {what} {text.shown(str(path))} is damaged ({why}): not used; {fix}\n"
        )
