"""Small files the ranks leave for each other: a checkpoint's completion mark (rank 0 writes it once the
Trainer's save is whole: every file's size and sha256, checked before a resume), the first host's address
(launch.master_interface: its local rank 0 publishes it per attempt for the other nodes), and the MLflow run rank 0
sends to (a requeued attempt continues it; `status` says where it went)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpcqa.record.jobfiles import reader
from hpcqa.record.jobfiles.fields import Count, Record


@dataclass(frozen=True)
class SavedFile(Record):
    size: Count
    sha256: str
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CheckpointMark(Record):
    step: Count | None = None
    attempt: Count | None = None
    files: dict[str, SavedFile] | None = None  # None: a mark from before marks listed files
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class MasterAddress(Record):
    address: str
    host: str | None = None
    interface: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TrackingRun(Record):
    """The MLflow run of a job (train.report_to with "mlflow"): its id, where it is (the URI without credentials)."""

    run_id: str
    uri: str
    experiment_id: str | None = None
    parent_run_id: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


TRACKING = reader.JobFile(TrackingRun, "tracking run")
write_tracking = TRACKING.write


def read_tracking(path: Path) -> TrackingRun | None:
    got = TRACKING.read(path)
    return got if isinstance(got, TrackingRun) else None


MARK = reader.JobFile(CheckpointMark, "completion mark")
read_mark, write_mark = MARK.read, MARK.write
ADDRESS = reader.JobFile(MasterAddress, "master address")
write_address = ADDRESS.write


HOST_ADDRESS = re.compile(
    r"[A-Za-z0-9][A-Za-z0-9.:%_-]{0,252}"
)  # an IPv4/IPv6 address or a host name


def read_address(path: Path) -> MasterAddress | None:
    """The published address, or None while there is none (or what is there is not one: it is rewritten whole)."""
    got = ADDRESS.read(path)
    ok = isinstance(got, MasterAddress) and HOST_ADDRESS.fullmatch(got.address)
    return got if ok else None  # type: ignore[return-value]
