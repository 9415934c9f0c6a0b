"""The one table of job states. Every executor reports one of these names; everything else asks here.

Slurm's names are the vocabulary (a local job's controller and a rendered script's files are mapped onto
them), so `status`, `wait`, the API and the reports agree on what is final and what succeeded.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Mapping


class State(StrEnum):
    """A job's state, in Slurm's names (a str: it is stored, printed and compared as Slurm writes it)."""

    PENDING = "PENDING"
    CONFIGURING = "CONFIGURING"
    REQUEUED = "REQUEUED"
    REQUEUE_FED = "REQUEUE_FED"
    REQUEUE_HOLD = "REQUEUE_HOLD"
    RESV_DEL_HOLD = "RESV_DEL_HOLD"
    SPECIAL_EXIT = "SPECIAL_EXIT"
    RESIZING = "RESIZING"
    SIGNALING = "SIGNALING"
    STAGE_OUT = "STAGE_OUT"
    STOPPED = "STOPPED"
    SUSPENDED = "SUSPENDED"
    RUNNING = "RUNNING"
    COMPLETING = "COMPLETING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    TIMEOUT = "TIMEOUT"
    NODE_FAIL = "NODE_FAIL"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    BOOT_FAIL = "BOOT_FAIL"
    DEADLINE = "DEADLINE"
    PREEMPTED = "PREEMPTED"
    REVOKED = "REVOKED"
    CANCELLED = "CANCELLED"
    UNKNOWN = "UNKNOWN"  # not Slurm's: a state nobody could tell (never final)
    PRUNED = "PRUNED"  # not Slurm's: a search's trial its pruner stopped (the job itself COMPLETED)


# state -> (finished?, outcome). Outcome groups: pending, running, ok, failed, cancelled.
_PENDING = (
    State.PENDING,
    State.CONFIGURING,
    State.REQUEUED,
    State.REQUEUE_FED,
    State.REQUEUE_HOLD,
    State.RESV_DEL_HOLD,
    State.SPECIAL_EXIT,
)
_RUNNING = (
    State.RESIZING,
    State.SIGNALING,
    State.STAGE_OUT,
    State.STOPPED,
    State.SUSPENDED,
    State.RUNNING,
    State.COMPLETING,
)
_FAILED = (
    State.FAILED,
    State.TIMEOUT,
    State.NODE_FAIL,
    State.OUT_OF_MEMORY,
    State.BOOT_FAIL,
    State.DEADLINE,
    State.PREEMPTED,
)
STATES: Mapping[str, tuple[bool, str]] = {
    **{s: (False, "pending") for s in _PENDING},
    **{s: (False, "running") for s in _RUNNING},
    State.COMPLETED: (True, "ok"),
    **{s: (True, "failed") for s in _FAILED},
    State.REVOKED: (True, "cancelled"),
    State.CANCELLED: (True, "cancelled"),
    State.PRUNED: (True, "pruned"),
}
# NODE_FAIL and PREEMPTED are final only when Slurm no longer has the job: Slurm may requeue the job under
# the same id (requeue allowed), so a query replaces them with squeue's live state while it does.
REQUEUABLE = (State.NODE_FAIL, State.PREEMPTED)

# submitit's local controller says FINISHED/DONE where Slurm says COMPLETED; INTERRUPTED is its cancel.
SUBMITIT_LOCAL: Mapping[str, State] = {
    "FINISHED": State.COMPLETED,
    "DONE": State.COMPLETED,
    "INTERRUPTED": State.CANCELLED,
    "READY": State.PENDING,
    "UNKNOWN": State.FAILED,
}


def state(name: str) -> State | str:
    """A state name as read back (Slurm's answer, a registry row): the member when it is one of the table's."""
    try:
        return State(name)
    except ValueError:
        return name


def is_final(state: str) -> bool:
    return STATES.get(state, (False, ""))[0]


def outcome(state: str) -> str:
    return STATES.get(state, (False, "unknown"))[1]


def succeeded(state: str) -> bool:
    return outcome(state) == "ok"


def from_submitit_local(name: str) -> State | str:
    """A submitit LocalJob's state in this table's names."""
    return SUBMITIT_LOCAL.get(name) or state(name)


class Source(StrEnum):
    """Where a query's live states came from."""

    SACCT = "sacct"  # Slurm's accounting: every job it recorded, finished or not
    SQUEUE = (
        "squeue"  # accounting off: the jobs Slurm still has; a job it no longer lists has ended
    )
    NOBODY = (
        "none"  # nothing to ask a scheduler (no Slurm jobs, or local jobs: their own processes)
    )
    FAILED = "failed"  # the scheduler could not be asked: `Answer.error` says why


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
