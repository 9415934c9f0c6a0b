"""The one table of job states. Every executor reports one of these names; everything else asks here.

Slurm's names are the vocabulary (a local job's controller and a rendered script's files are mapped onto
them), so `status`, `wait`, the API and the reports agree on what is final and what succeeded.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Mapping

# state -> (finished?, outcome). Outcome groups: pending, running, ok, failed, cancelled.
STATES: Mapping[str, tuple[bool, str]] = {
    "PENDING": (False, "pending"), "CONFIGURING": (False, "pending"), "REQUEUED": (False, "pending"),
    "REQUEUE_FED": (False, "pending"), "REQUEUE_HOLD": (False, "pending"), "RESV_DEL_HOLD": (False, "pending"),
    "SPECIAL_EXIT": (False, "pending"), "RESIZING": (False, "running"), "SIGNALING": (False, "running"),
    "STAGE_OUT": (False, "running"), "STOPPED": (False, "running"), "SUSPENDED": (False, "running"),
    "RUNNING": (False, "running"), "COMPLETING": (False, "running"),
    "COMPLETED": (True, "ok"),
    "FAILED": (True, "failed"), "TIMEOUT": (True, "failed"), "NODE_FAIL": (True, "failed"),
    "OUT_OF_MEMORY": (True, "failed"), "BOOT_FAIL": (True, "failed"), "DEADLINE": (True, "failed"),
    "PREEMPTED": (True, "failed"), "REVOKED": (True, "cancelled"), "CANCELLED": (True, "cancelled"),
}
# NODE_FAIL and PREEMPTED are final only when Slurm no longer has the job: Slurm may requeue the job under
# the same id (requeue allowed), so a query replaces them with squeue's live state while it does.
REQUEUABLE = ("NODE_FAIL", "PREEMPTED")

# submitit's local controller says FINISHED/DONE where Slurm says COMPLETED; INTERRUPTED is its cancel.
SUBMITIT_LOCAL: Mapping[str, str] = {"FINISHED": "COMPLETED", "DONE": "COMPLETED", "INTERRUPTED": "CANCELLED",
                                     "READY": "PENDING", "UNKNOWN": "FAILED"}


def is_final(state: str) -> bool:
    return STATES.get(state, (False, ""))[0]


def outcome(state: str) -> str:
    return STATES.get(state, (False, "unknown"))[1]


def succeeded(state: str) -> bool:
    return outcome(state) == "ok"


def from_submitit_local(state: str) -> str:
    """A submitit LocalJob's state in this table's names."""
    return SUBMITIT_LOCAL.get(state, state)


class Source(StrEnum):
    """Where a query's live states came from."""

    SACCT = "sacct"      # Slurm's accounting: every job it recorded, finished or not
    SQUEUE = "squeue"    # accounting off: the jobs Slurm still has; a job it no longer lists has ended
    NOBODY = "none"      # nothing to ask a scheduler (no Slurm jobs, or local jobs: their own processes)
    FAILED = "failed"    # the scheduler could not be asked: `Answer.error` says why


@dataclass(frozen=True)
class Answer:
    """A scheduler's answer to a state query: its source, and the error when it could not be asked."""

    source: Source
    error: str = ""

    @classmethod
    def failed(cls, error: str) -> "Answer":
        return cls(Source.FAILED, error)

    @property
    def answered(self) -> bool:
        return self.source is not Source.FAILED

    @property
    def lists_every_job(self) -> bool:
        """sacct and squeue list what they know: a job missing from their answer has ended."""
        return self.source in (Source.SACCT, Source.SQUEUE)

    def __str__(self) -> str:
        return self.error if self.source is Source.FAILED else self.source.value


NOBODY = Answer(Source.NOBODY)
