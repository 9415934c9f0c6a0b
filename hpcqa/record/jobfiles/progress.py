"""progress.json: rank 0's step, loss and ETA, rewritten as it trains (a user program's job: from its trainer's
state). The bar, the list's progress column and `wait` read it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpcqa.fsutil import atomic_write_text
from hpcqa.record.jobfiles import fields, reader
from hpcqa.record.jobfiles.fields import Count, Damaged, Seconds


@dataclass(frozen=True)
class Progress:
    phase: str | None = None
    step: Count | None = (
        None  # None: a user program's job has no steps until its trainer saves a state
    )
    total_steps: Count | None = None
    attempt: Count | None = None
    epoch: Seconds | None = None
    loss: float | None = None
    eta_s: Seconds | None = None
    started: Seconds | None = None
    updated: Seconds | None = None
    source: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict:
        return fields.to_json(self)


def parse(obj: object, file: str = "progress file") -> Progress | Damaged:
    return fields.parse(Progress, obj, file)


def read(path: Path) -> Progress | Damaged | None:
    """The file at `path` (None: there is none)."""
    return reader.read_as(path, parse)


def write(path: Path, obj: object) -> Path:
    """Write `obj` (this file's fields, as a dict) atomically, after holding it to the schema (ValueError if not)."""
    return atomic_write_text(path, fields.checked_text(Progress, obj, path.name))
