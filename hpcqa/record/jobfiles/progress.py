"""progress.json: rank 0's step, loss and ETA, rewritten as it trains (a user program's job: from its trainer's
state). The bar, the list's progress column and `wait` read it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hpcqa.record.jobfiles import reader
from hpcqa.record.jobfiles.fields import Count, Record, Seconds


@dataclass(frozen=True)
class Progress(Record):
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


FILE = reader.JobFile(Progress, "progress file")
parse, read, write = FILE.parse, FILE.read, FILE.write
