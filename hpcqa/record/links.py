"""The links `hpcqa tune --comm` measured between nodes, stored per cluster, partition and backend (the same
partition's nodes share an interconnect; another partition may not): one JSON file, written whole."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any, Mapping

from hpcqa.fsutil import atomic_write_text
from hpcqa.record import caches


def key(executor: str, partition: str, backend: str) -> str:
    """Where the measurement applies: the executor, the partition (its default when empty), the backend."""
    return f"{executor} | partition {partition or 'default'} | {backend}"


def load(path: Path | None = None) -> dict[str, Any]:
    return caches.read_store(
        path or caches.link_store(),
        "the link store",
        "remove it; `hpcqa tune --comm` measures again",
    )


def record(k: str, link: Mapping[str, Any], job_id: str, path: Path | None = None) -> dict:
    entry = {
        "bandwidth_Bps": link["bandwidth_Bps"],
        "latency_s": link["latency_s"],
        "nodes": link.get("nodes"),
        "points": link.get("points"),
        "job": job_id,
        "when": time.time(),
    }
    p = path or caches.link_store()
    data = load(p)
    data[k] = entry
    atomic_write_text(p, json.dumps(data, indent=2, sort_keys=True))
    return entry


def lookup(k: str, path: Path | None = None) -> dict | None:
    entry = load(path).get(k)
    if not isinstance(entry, dict):
        return None
    numbers = [entry.get("bandwidth_Bps"), entry.get("latency_s")]
    if not all(  # what `hpcqa tune --comm` writes: a hand-edited or damaged entry is passed over
        isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0
        for x in numbers
    ):
        return None
    return {**entry, "job": str(entry.get("job"))[:64]}
