"""Reading the JSON a job folder holds, as a careless program or a dying node may have left it: regular files only
(opened without following a link, without blocking), a size cap, numbers that are finite, an object at the top;
and the ranges of the numbers the views print from progress.json and results.json. A file that fails is damaged,
with one line saying why; it is never a traceback or a hang. hpcqa.record.jobdir names the files."""

from __future__ import annotations

import errno
import json
import math
import os
from pathlib import Path
from typing import Any, Sequence

from hpcqa.fsutil import open_regular

MAX_JSON_BYTES = (
    64 << 20
)  # hpcqa's own files are kilobytes; a worktree manifest of 100,000 files a few MB


class _NotFinite(ValueError):
    pass


def _finite(text: str) -> float:
    x = float(text)
    if not math.isfinite(x):
        raise _NotFinite(f"{text} is not a finite number")
    return x


def _no_constant(name: str) -> Any:
    raise _NotFinite(f"{name} is not JSON's")


def read_json(path: Path | str) -> dict | None:
    """The file's JSON object, or None when it is missing, half-written, not JSON, or not what hpcqa writes there:
    every reader of a job folder goes through this, and a job's program or a dying node can leave anything there.
    Only a regular file is read (opened without following a link and without blocking, then checked: a FIFO named
    results.json would hang `status`), at most MAX_JSON_BYTES of it; numbers must be finite; the top level must be
    an object."""
    return load_json(path)[0]


def load_json(path: Path | str) -> tuple[dict | None, str | None]:
    """read_json, with why a file that is there was not read: (object, None), (None, None) when there is no file,
    (None, reason) when there is one that is damaged."""
    try:
        fd = open_regular(path)
    except FileNotFoundError:
        return None, None
    except OSError as e:
        if e.errno == errno.EINVAL and e.strerror == "not a regular file":
            return None, "not a regular file"
        return None, "a link, or not readable" if e.errno in (
            errno.ELOOP,
            errno.EACCES,
            errno.EPERM,
        ) else f"not readable ({os.strerror(e.errno or 0)})"
    except ValueError:
        return None, "not a path"
    try:
        st = os.fstat(fd)
        if st.st_size > MAX_JSON_BYTES:
            return None, f"larger than {MAX_JSON_BYTES >> 20} MiB"
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(MAX_JSON_BYTES + 1)
        if len(data) > MAX_JSON_BYTES:
            return None, f"larger than {MAX_JSON_BYTES >> 20} MiB"
        if not data.strip():
            return None, "empty (being written, or cut short)"
        got = json.loads(data, parse_float=_finite, parse_constant=_no_constant)
    except OSError as e:
        return None, f"not readable ({os.strerror(e.errno or 0)})"
    except _NotFinite:
        return None, "a number that is not finite (NaN, Infinity or 1e999)"
    except (ValueError, RecursionError):
        return None, "not JSON (cut short, or not hpcqa's)"
    finally:
        os.close(fd)
    return (
        (got, None)
        if isinstance(got, dict)
        else (None, f"JSON, but a {type(got).__name__}, not an object")
    )


# progress.json's numbers, as rank 0 writes them; anything outside these is a damaged file, never a bar to draw
PROGRESS_COUNTS = ("step", "total_steps", "attempt")
PROGRESS_SECONDS = ("eta_s", "started", "updated")
MAX_STEPS = 10**12
MAX_SECONDS = 10**11  # an ETA or a Unix time: about 3,000 years


def progress_problem(d: dict) -> str | None:
    """Why progress.json's numbers are not ones a rank writes (None: they are): counts are whole numbers in
    0..MAX_STEPS, seconds and the epoch finite and in range, the loss a finite number or null."""
    for key in PROGRESS_COUNTS:
        v = d.get(key)
        if v is None:  # a user program's job has no steps until its trainer saves a state
            continue
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_STEPS:
            return f"{key} {_shown(v)} is not a step count (a whole number 0-{MAX_STEPS:.0e})"
    for key in (*PROGRESS_SECONDS, "epoch"):
        v = d.get(key)
        if v is not None and (
            isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= MAX_SECONDS
        ):
            return f"{key} {_shown(v)} is out of range"
    loss = d.get("loss")
    if loss is not None and (isinstance(loss, bool) or not isinstance(loss, (int, float))):
        return f"loss {_shown(loss)} is not a number"
    if not isinstance(d.get("phase", ""), str):
        return "phase is not text"
    return None


# results.json's numbers that the views print as numbers (EM/F1, rates, times): each, when there, a number (finite:
# the reader already refuses NaN and Infinity), never text or a list; anything else is a damaged file
RESULTS_NUMBERS = (
    "exact_match",
    "f1",
    "train_samples_per_second",
    "eval_samples_per_second",
    "wall_time_s",
    "train_runtime_s",
    "steady_samples_per_second",
    "step_time_s",
    "best_metric",
)


def results_problem(d: dict) -> str | None:
    """Why results.json's numbers are not ones a rank writes (None: they are)."""
    for key in RESULTS_NUMBERS:
        v = d.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            return f"{key} {_shown(v)} is not a number"
    return None


def usage_numbers(u: object, keys: Sequence[str]) -> dict[str, float] | None:
    """A rank report's `usage` (a file in the user's folder) as numbers: each of `keys` a finite number >= 0, never
    a bool or text (None: one is missing or is not). Every reader of a rank's usage asks here."""
    if not isinstance(u, dict):
        return None
    got = {k: u.get(k) for k in keys}
    ok = all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
        for v in got.values()
    )
    return got if ok else None  # type: ignore[return-value]


def number(v: object) -> int | float | None:
    """`v` when it is a number (an int or a float, never a bool), else None: a job file's field as read back
    (read_json has already refused NaN and Infinity)."""
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def count(v: object) -> int | None:
    """`v` when it is a whole number >= 0 (never a bool), else None: a count or a step from a job file."""
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def list_at(d: dict, key: str) -> list:
    """d[key] when it is a list, else [] (a job file's field that the program may have rewritten as anything)."""
    v = d.get(key)
    return v if isinstance(v, list) else []


def _shown(v: Any) -> str:
    text = json.dumps(v, default=str)
    return text if len(text) <= 24 else text[:23] + "…"
