"""ranks/rank-N.failed (a rank's own error: its exception, the last lines of its stderr) and ranks/rank-N.exit (a
rank ended by a signal or an exit code its wrapper saw): why a rank failed, merged per rank by the job folder."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hpcqa.fsutil import atomic_write_text
from hpcqa.record.jobfiles import fields, reader
from hpcqa.record.jobfiles.fields import Count, Damaged, Seconds


@dataclass(frozen=True)
class Failure:
    rank: int
    error: str = ""
    host: str | None = None
    time: Seconds | None = None
    exit_code: int | None = None
    attempt: Count | None = None
    pid: int | None = None
    stderr_tail: tuple[str, ...] = ()
    traceback: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict:
        return fields.to_json(self)

    def merged(self, later: Failure) -> Failure:
        """One rank's two records (its .exit and its .failed) as one: the later's fields over this one's, the
        earlier time, and a signal that killed it outranking what the rank wrote."""
        kept = {k: v for k, v in vars(later).items() if v not in (None, "", ())}
        got = replace(self, **kept)
        times = [t for t in (self.time, later.time) if t is not None]
        error = self.error if "killed by" in self.error else got.error
        return replace(got, time=min(times) if times else None, error=error)


def parse(obj: object, file: str = "rank failure") -> Failure | Damaged:
    return fields.parse(Failure, obj, file)


def read(path: Path) -> Failure | Damaged | None:
    return reader.read_as(path, parse)


def write(path: Path, obj: object) -> Path:
    """Write `obj` (this file's fields, as a dict) atomically, after holding it to the schema (ValueError if not)."""
    return atomic_write_text(path, fields.checked_text(Failure, obj, path.name))
