"""controller.json: a local job's controller process and its identity (boot id, start time), written at submit
so that status and cancel act on that process only, never on whatever holds a recycled pid."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpcqa.fsutil import atomic_write_text
from hpcqa.record.jobfiles import fields, reader
from hpcqa.record.jobfiles.fields import Damaged


@dataclass(frozen=True)
class Controller:
    pid: int
    identity: str
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict:
        return fields.to_json(self)


def parse(obj: object, file: str = "controller record") -> Controller | Damaged:
    got = fields.parse(Controller, obj, file)
    if isinstance(got, Controller) and got.pid <= 1:
        return Damaged(file, f"pid {got.pid} is not a process hpcqa started")
    if isinstance(got, Controller) and not got.identity:
        return Damaged(file, "identity is empty")
    return got


def read(path: Path) -> Controller | Damaged | None:
    return reader.read_as(path, parse)


def write(path: Path, obj: object) -> Path:
    """Write `obj` (this file's fields, as a dict) atomically, after holding it to the schema (ValueError if not)."""
    return atomic_write_text(path, fields.checked_text(Controller, obj, path.name))
