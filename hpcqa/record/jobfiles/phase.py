"""ranks/rank-N.phase.json: where a rank is (loading, rendezvous, training step S, ...) and since when; a rank
writes it before it has a report, so a job that hangs before training still says where."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpcqa.record.jobfiles import reader
from hpcqa.record.jobfiles.fields import Count, Record, Seconds


@dataclass(frozen=True)
class PhaseRecord(Record):
    rank: int
    phase: str
    host: str | None = None
    detail: str | None = None
    since: Seconds | None = None
    updated: Seconds | None = None
    step: Count | None = None
    total_steps: Count | None = None
    attempt: Count | None = None
    timeout_s: float | None = None
    pid: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


FILE = reader.JobFile(PhaseRecord, "rank phase")
parse, write = FILE.parse, FILE.write


def read(path: Path, rank: int | None = None) -> PhaseRecord | None:
    """A rank's phase file when it can be read and is what it claims (it names `rank`), else None: a phase file is
    rewritten often and a half-written one is normal, so a damaged one is passed over, not reported."""
    got = FILE.read(path)
    if isinstance(got, PhaseRecord) and (rank is None or got.rank == rank):
        return got
    return None
