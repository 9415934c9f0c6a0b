"""The staging manifest, read back: what `hpcqa stage` put in the shared caches for a config, and whether it is
still there. Light (no torch, no datasets): submit, the dry run and `doctor` read it; hpcqa.stage writes it.

    <cache root>/manifests/<key>.json     key: a digest of what decides the staged items (model, data,
                                          tokenisation), so a config that changes them needs a new stage
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from hpcqa.core.config import Config
from hpcqa.errors import HpcqaError
from hpcqa.record.caches import Caches, read_store, read_store_damaged

MANIFEST_VERSION = 1


class StageError(HpcqaError):
    exit_code = 2


def caches(cfg: Config) -> Caches:
    return Caches.for_data_cache(cfg.data.cache_dir)


def identity(cfg: Config) -> dict[str, Any]:
    """What decides the staged items."""
    m, t = cfg.model, cfg.train
    data = {
        k: v
        for k, v in cfg.to_dict()["data"].items()
        if k not in ("max_misaligned_answers", "preprocessing_num_workers")
    }
    return {
        "model": [m.name_or_path, m.cache_dir],
        "data": data,
        "seed": t.seed,
        "features": [t.max_seq_length, t.doc_stride, t.do_eval, t.do_predict, t.eval_strategy],
        "v": MANIFEST_VERSION,
    }


def manifest_path(cfg: Config) -> Path:
    key = hashlib.sha256(json.dumps(identity(cfg), sort_keys=True).encode()).hexdigest()[:16]
    return caches(cfg).manifest(key)


def _missing(files: list[dict[str, Any]]) -> list[str]:
    bad = []
    for f in files:
        p = Path(str(f["path"]))
        try:
            size = p.stat().st_size  # follows the hub cache's symlinks to their blobs
        except OSError:
            bad.append(f"{p} is missing")
            continue
        if size != f["size"]:
            bad.append(f"{p} has {size} bytes, {f['size']} when staged")
    return bad


def check(cfg: Config) -> dict[str, Any]:
    """-> {"manifest": path or None, "items": {model|data|features: (state, detail)}, "problems": [...]}.
    States: staged, missing (the manifest lists a file that is gone or changed), not staged. The manifest is read
    through the one reader (caches.read_store); one that is damaged, or not of the shape `stage` writes, counts as
    no manifest, said once."""
    path = manifest_path(cfg)
    fix = f"run `hpcqa stage {cfg.source or 'CONFIG'}` again"
    manifest = read_store(path, "the staging manifest", fix)
    try:
        got = _items(manifest) if manifest else None
    except (KeyError, TypeError, ValueError, AttributeError):
        read_store_damaged(path, "the staging manifest", "not what `hpcqa stage` writes", fix)
        got = None
    if got is None:
        return {
            "manifest": None,
            "problems": [],
            "items": {
                k: ("not staged", f"no manifest {path.name} in {path.parent}")
                for k in ("model", "data", "features")
            },
        }
    items, problems = got
    return {"manifest": str(path), "items": items, "problems": problems}


def _items(manifest: dict[str, Any]) -> tuple[dict[str, tuple[str, str]], list[str]]:
    model = manifest["model"]
    splits = manifest["dataset"]["splits"]
    groups = {
        "model": (
            _missing(model["files"]),
            f"{model['name']} ({model['kind']}"
            + (f", revision {model['revision'][:12]}" if model.get("revision") else "")
            + ")",
        ),
        "data": (
            [m for s in splits for m in _missing(s["files"])],
            ", ".join(f"{s['split']} {s['rows']} rows" for s in splits),
        ),
        "features": (
            [m for s in splits for m in _missing(s.get("features", {}).get("files", []))],
            ", ".join(f"{s['split']} {s['features']['rows']}" for s in splits if "features" in s),
        ),
    }
    items, problems = {}, []
    for key, (bad, detail) in groups.items():
        items[key] = (
            ("missing", bad[0] + (f" (+{len(bad) - 1} more)" if len(bad) > 1 else ""))
            if bad
            else ("staged", detail)
        )
        problems += [f"{key}: {b}" for b in bad]
    return items, problems


def require(cfg: Config) -> None:
    """submit: a manifest for this config whose files are gone fails here, before anything is queued."""
    got = check(cfg)
    if got["problems"]:
        shown = "; ".join(got["problems"][:3]) + (
            f" (+{len(got['problems']) - 3} more)" if len(got["problems"]) > 3 else ""
        )
        raise StageError(
            f"staged items are missing ({got['manifest']}): {shown}",
            f"run `hpcqa stage {cfg.source or 'CONFIG'}` again on a machine with network",
        )
