"""ranks/rank-N.failed (a rank's own error: its exception, the last lines of its stderr) and ranks/rank-N.exit (a
rank ended by a signal or an exit code its wrapper saw): why a rank failed, merged per rank by the job folder."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from hpcqa.record.jobfiles import reader
from hpcqa.record.jobfiles.fields import Count, Record, Seconds


@dataclass(frozen=True)
class Failure(Record):
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

    def merged(self, later: Failure) -> Failure:
        """One rank's two records (its .exit and its .failed) as one: the later's fields over this one's, the
        earlier time, and a signal that killed it outranking what the rank wrote."""
        kept = {k: v for k, v in vars(later).items() if v not in (None, "", ())}
        got = replace(self, **kept)
        times = [t for t in (self.time, later.time) if t is not None]
        error = self.error if "killed by" in self.error else got.error
        return replace(got, time=min(times) if times else None, error=error)


FILE = reader.JobFile(Failure, "rank failure")
parse, read, write = FILE.parse, FILE.read, FILE.write
