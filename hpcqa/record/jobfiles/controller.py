"""controller.json: a local job's controller process and its identity (boot id, start time), written at submit
so that status and cancel act on that process only, never on whatever holds a recycled pid."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hpcqa.record.jobfiles import reader
from hpcqa.record.jobfiles.fields import Damaged, Record


@dataclass(frozen=True)
class Controller(Record):
    pid: int
    identity: str
    extra: dict[str, Any] = field(default_factory=dict)


def _identified(got: Controller, file: str) -> Controller | Damaged:
    if got.pid <= 1:
        return Damaged(file, f"pid {got.pid} is not a process hpcqa started")
    if not got.identity:
        return Damaged(file, "identity is empty")
    return got


FILE = reader.JobFile(Controller, "controller record", _identified)
parse, read, write = FILE.parse, FILE.read, FILE.write
