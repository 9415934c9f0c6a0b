"""`hpcqa tune`, the pure part: which layouts to try, the key a result is stored under, the store.

A tuned result answers "how many ranks per socket are fastest for *this* model, sequence length,
batch and precision on *this* node shape" -- the key is exactly that, so `ranks_per_socket = "auto"`
only reuses a measurement that applies. The store is one JSON file ($HPCQA_TUNE_STORE, else
$HPCQA_CACHE/tuned.json, else ~/.cache/hpcqa/tuned.json), written atomically.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from hpcqa.core import ranklayout
from hpcqa.core.config import Config
from hpcqa.errors import UsageError
from hpcqa.fsutil import atomic_write_text
from hpcqa.record import caches


def store_path() -> Path:
    return caches.tune_store()


def load_store(path: Path | None = None) -> dict[str, Any]:
    """The stored results; a damaged store counts as empty, said once (it only ever speeds things up)."""
    return caches.read_store(
        path or store_path(), "the tuned-layout store", "remove it; `hpcqa tune` measures again"
    )


def record(
    cfg: Config, measured: Mapping[int, float], host: str, when: float, path: Path | None = None
) -> dict:
    """Store the winner of `measured` (ranks per socket -> steady train samples/s) under cfg's key."""
    best = max(measured, key=lambda k: measured[k])
    per = cfg.cores_per_domain
    entry = {
        "ranks_per_socket": best,
        "samples_per_second": {str(k): v for k, v in sorted(measured.items())},
        "host": host,
        "when": when,
        "model": cfg.model.name_or_path,
        "summary": f"{best}x{per // best} fastest on {host}: "
        + ", ".join(f"{k}x{per // k} {v:.2f}" for k, v in sorted(measured.items()))
        + " samples/s",
    }
    p = path or store_path()
    data = load_store(p)
    data[ranklayout.shape_key(cfg)] = entry
    atomic_write_text(p, json.dumps(data, indent=2, sort_keys=True))
    return entry


def default_candidates(cores_per_domain: int, limit: int = 6) -> list[int]:
    """Ranks per socket worth trying: 1, powers of two, and one rank per core -- each a divisor of
    the socket's cores (equal slices), at most `limit` of them."""
    picks = {1, cores_per_domain}
    d = 2
    while d < cores_per_domain:
        if cores_per_domain % d == 0:
            picks.add(d)
        d *= 2
    out = sorted(picks)
    return out if len(out) <= limit else out[: limit - 1] + [out[-1]]


def parse_candidates(text: str, cores_per_domain: int) -> list[int]:
    try:
        values = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise UsageError(
            f"--candidates {text!r}: expected ranks per socket, e.g. 1,2,4", "write them as 1,2,4"
        ) from None
    bad = [v for v in values if not 1 <= v <= cores_per_domain]
    if not values or bad:
        raise UsageError(
            f"--candidates {text!r}: each must be 1..{cores_per_domain} (cores per socket)",
            f"pick divisors of {cores_per_domain}, e.g. {','.join(map(str, default_candidates(cores_per_domain)))}",
        )
    return values


def tune_overrides(rps: int, steps: int, warmup: int) -> list[str]:
    """What a tuning run changes in the config: the layout, a short run, no eval, no checkpoints."""
    return [
        f"launch.ranks_per_socket={rps}",
        f"train.max_steps={warmup + steps}",
        "train.do_eval=false",
        f"train.timing_warmup_steps={warmup}",
        "train.save_steps=1000000",
        "train.save_final_checkpoint=false",
        "cluster.nodes=1",
    ]


def table_rows(measured: Mapping[int, float | None], cores: int) -> list[Sequence[str]]:
    best = max((k for k, v in measured.items() if v), key=lambda k: measured[k] or 0, default=None)
    return [
        (f"{k}x{cores // k}", "-" if v is None else f"{v:.2f}", "fastest" if k == best else "")
        for k, v in sorted(measured.items())
    ]
