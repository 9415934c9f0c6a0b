"""Staging for offline compute nodes: `hpcqa stage CONFIG` on a machine with network puts the config's model,
dataset and tokenised features into the shared caches the ranks read, and writes a manifest; `submit`, the
dry run and `doctor` read it back (hpcqa.record.manifest: no torch, no datasets). Heavy: imports the trainer's
model and data code (transformers, datasets).

    <cache root>/manifests/<key>.json     key: a digest of what decides the staged items (model, data,
                                          tokenisation), so a config that changes them needs a new stage

The cache root is the ranks' own: $HPCQA_CACHE, else <data.cache_dir>/hpcqa, else ~/.cache/hpcqa.
The model is fetched by huggingface_hub's `snapshot_download` into model.cache_dir (with HF_HUB_OFFLINE=1 it
answers from that cache, as on a compute node); the dataset by `datasets.load_dataset` into data.cache_dir;
the features by the ranks' own function, under the ranks' own cache keys.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Callable

from hpcqa.core.config import Config
from hpcqa.fsutil import atomic_write_text, file_sha256
from hpcqa.rank.train.data import prepare_data
from hpcqa.rank.train.model import resolve
from hpcqa.record.caches import Caches
from hpcqa.record.manifest import MANIFEST_VERSION, StageError, caches, identity, manifest_path

# What a QA fine-tune loads from a hub repository; other frameworks' weights stay behind.
IGNORE = [
    "*.h5",
    "*.msgpack",
    "*.ot",
    "*.onnx",
    "onnx/*",
    "*.tflite",
    "tf_model*",
    "flax_model*",
    "rust_model*",
    "coreml/*",
    "openvino/*",
]
DIGEST_LIMIT = 1 << 30  # files larger than this are listed with their size, not hashed


def describe_files(paths: list[Path]) -> list[dict[str, Any]]:
    out = []
    for p in paths:
        real = p.resolve()
        size = real.stat().st_size
        entry: dict[str, Any] = {"path": str(p), "size": size}
        if size <= DIGEST_LIMIT:
            entry["sha256"] = file_sha256(real)
        out.append(entry)
    return out


def _tree(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and ".no_exist" not in p.parts)


def stage_model(cfg: Config, croot: Caches, offline: bool) -> dict[str, Any]:
    """The model into model.cache_dir (hub ids) -> its manifest entry."""
    name = cfg.model.name_or_path
    path, kwargs = resolve(cfg.model, croot)
    if "local_files_only" not in kwargs:  # a built-in or a directory: recorded as it is
        return {
            "kind": "built-in" if name.startswith("builtin:") else "directory",
            "name": name,
            "path": str(path),
            "files": describe_files(_tree(Path(path))),
        }
    from huggingface_hub import snapshot_download

    try:
        snap = Path(
            snapshot_download(
                name,
                cache_dir=cfg.model.cache_dir or None,
                ignore_patterns=IGNORE,
                local_files_only=offline,
            )
        )
    except Exception as e:  # noqa: BLE001 - huggingface_hub's errors vary by version; the message is what matters
        raise StageError(
            f"model {name!r}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
            "run `hpcqa stage` where the hub is reachable (or the cache already has it); check "
            "model.name_or_path and model.cache_dir",
        ) from None
    return {
        "kind": "hub",
        "name": name,
        "revision": snap.name,
        "path": str(snap),
        "cache_dir": cfg.model.cache_dir,
        "files": describe_files(_tree(snap)),
    }


def _dataset_entry(cfg: Config, split: str, raw, features) -> dict[str, Any]:
    files = [Path(f["filename"]) for f in getattr(raw, "cache_files", [])]
    entry = {
        "split": split,
        "rows": len(raw),
        "fingerprint": raw._fingerprint,
        "files": describe_files(files),
    }
    if features is not None:
        entry["features"] = {
            "rows": len(features),
            "fingerprint": features._fingerprint,
            "files": describe_files([Path(f["filename"]) for f in features.cache_files]),
        }
    return entry


def stage(cfg: Config, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Stage everything; write and return the manifest. Heavy: imports transformers and datasets."""
    offline = os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0")
    croot = caches(cfg)
    t0 = time.time()
    log(f"model {cfg.model.name_or_path} -> {cfg.model.cache_dir or 'the HF default cache'}")
    model = stage_model(cfg, croot, offline)
    log(f"data and features -> {croot.root}")
    data, warnings = prepare_data(cfg, croot, allow_download=not offline)
    splits = [
        _dataset_entry(cfg, name, data[f"{name}_raw"], data[f"{name}_features"])
        for name in ("train", "eval", "test")
        if data[f"{name}_raw"] is not None
    ]
    import datasets
    import huggingface_hub
    import transformers

    manifest = {
        "version": MANIFEST_VERSION,
        "identity": identity(cfg),
        "config": cfg.source,
        "staged_at": time.time(),
        "seconds": round(time.time() - t0, 1),
        "cache_root": str(croot.root),
        "warnings": warnings,
        "versions": {
            "transformers": transformers.__version__,
            "datasets": datasets.__version__,
            "huggingface_hub": huggingface_hub.__version__,
        },
        "model": model,
        "dataset": {
            "name": cfg.data.dataset or "files",
            "config": cfg.data.dataset_config_name,
            "cache_dir": cfg.data.cache_dir,
            "splits": splits,
        },
    }
    path = manifest_path(cfg)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(manifest, indent=1, sort_keys=True))
    manifest["path"] = str(path)
    return manifest
