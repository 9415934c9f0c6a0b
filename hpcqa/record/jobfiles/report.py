"""ranks/rank-N.json: a rank's report -- where it ran (host, CPUs), what it preloaded, the code and command, its
resource use, its warnings, the notice it stopped on. The rank writes it at start and updates it as it goes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hpcqa.record.jobfiles import reader
from hpcqa.record.jobfiles.fields import Amount, Count, Record, Seconds
from hpcqa.record.jobfiles.parts import Code, Notice, Work


@dataclass(frozen=True)
class RankUsage(Record):
    """What the rank measured of itself: CPU and wall seconds, its CPUs, peak memory, time ready but off-CPU."""

    cpu_s: Amount
    wall_s: Amount
    cpus: Count
    max_rss_bytes: Amount | None = None
    run_delay_s: Amount | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Report(Record):
    rank: int
    host: str | None = None
    cpus: tuple[Count, ...] = ()
    attempt: Count | None = None
    world_size: Count | None = None
    started: Seconds | None = None
    finished: Seconds | None = None
    run_s: Amount | None = None
    usage: RankUsage | None = None
    preload: dict[str, str | None] = field(default_factory=dict)
    code: Code | None = None
    command: tuple[str, ...] | None = None
    work: Work | None = None
    warnings: tuple[str, ...] = ()
    notice: Notice | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def notice_in(self, attempt: int) -> Notice | None:
        """The notice this rank stopped on in `attempt`, or None."""
        return self.notice if self.notice and self.notice.attempt == attempt else None


FILE = reader.JobFile(Report, "rank report")
parse, read, write = FILE.parse, FILE.read, FILE.write
