"""Two small files the ranks leave for each other: a checkpoint's completion mark (rank 0 writes it once the
Trainer's save is whole: every file's size and sha256, checked before a resume), and the first host's address
(launch.master_interface: its local rank 0 publishes it per attempt for the other nodes)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpcqa.fsutil import atomic_write_text
from hpcqa.record.jobfiles import fields, reader
from hpcqa.record.jobfiles.fields import Count, Damaged


@dataclass(frozen=True)
class SavedFile:
    size: Count
    sha256: str
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CheckpointMark:
    step: Count | None = None
    attempt: Count | None = None
    files: dict[str, SavedFile] | None = None  # None: a mark from before marks listed files
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict:
        return fields.to_json(self)


@dataclass(frozen=True)
class MasterAddress:
    address: str
    host: str | None = None
    interface: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict:
        return fields.to_json(self)


def read_mark(path: Path) -> CheckpointMark | Damaged | None:
    return reader.read_as(path, lambda obj, name: fields.parse(CheckpointMark, obj, name))


def write_mark(path: Path, obj: object) -> Path:
    return atomic_write_text(path, fields.checked_text(CheckpointMark, obj, path.name))


def read_address(path: Path) -> MasterAddress | None:
    """The published address, or None while there is none (or what is there is not one: it is rewritten whole)."""
    got = reader.read_as(path, lambda obj, name: fields.parse(MasterAddress, obj, name))
    return got if isinstance(got, MasterAddress) and got.address else None


def write_address(path: Path, obj: object) -> Path:
    return atomic_write_text(path, fields.checked_text(MasterAddress, obj, path.name))
