"""Reading the ranks' phase files (written by hpcqa.rank.phase): one rank's phase as status prints it, and the
warning for ranks stuck at the rendezvous. Pure: no torch, no files.
"""

from __future__ import annotations

import time
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hpcqa.record.jobfiles.phase import PhaseRecord


class Phase(StrEnum):
    """Where a rank is. The phase file holds the value; every writer and reader names a member."""

    STARTING = "starting"
    ADDRESS = "address"
    RENDEZVOUS = "rendezvous"
    LOADING = "loading"
    TRAINING = "training"
    STOPPING = "stopping"
    EVALUATING = "evaluating"
    PREDICTING = "predicting"
    FINISHING = "finishing"
    LINK = "link"
    COMMAND = "command"
    DONE = "done"
    FAILED = "failed"


# what status prints for each phase, in the order a rank passes them
NAMES: dict[str, str] = {
    Phase.STARTING: "starting (importing, checking the plan)",
    Phase.ADDRESS: "waiting for the first host's address",
    Phase.RENDEZVOUS: "waiting at the rendezvous",
    Phase.LOADING: "loading the model and data",
    Phase.TRAINING: "training",
    Phase.STOPPING: "saving a checkpoint on a notice",
    Phase.EVALUATING: "evaluating",
    Phase.PREDICTING: "predicting",
    Phase.FINISHING: "writing results",
    Phase.LINK: "measuring the link",
    Phase.COMMAND: "running the command",
    Phase.DONE: "done",
    Phase.FAILED: "failed",
}
BEFORE_TRAINING = (Phase.STARTING, Phase.ADDRESS, Phase.RENDEZVOUS, Phase.LOADING)
WAITING = (Phase.RENDEZVOUS, Phase.ADDRESS)  # for a peer: the rendezvous warning


def text(record: PhaseRecord, now: float | None = None) -> str:
    """ "training step 12/40, for 1:05" -- one rank's phase, for status, cut to one line."""
    now = now or time.time()
    out = NAMES.get(record.phase, record.phase[:40])
    if record.phase == Phase.TRAINING and record.step is not None:
        out += f" step {record.step}/{record.total_steps or '?'}"
    detail = " ".join((record.detail or "").split())
    if detail:
        out += f" ({detail[:160]})"
    if record.since is not None and record.phase not in (Phase.DONE, Phase.FAILED):
        out += f", for {duration(now - record.since)}"
    return out


ORDER = list(NAMES)


def summary(records: list[PhaseRecord], world_size: int, now: float | None = None) -> str:
    """The list view's progress of a job with no progress file yet: the least advanced rank's phase and for how
    long ("waiting at the rendezvous 3:05, 2/4 ranks")."""
    known = [r for r in records if r.phase in NAMES]
    if not known:
        return ""
    now = now or time.time()
    first = min(known, key=lambda r: ORDER.index(r.phase))
    same = [r for r in known if r.phase == first.phase]
    since = [r.since for r in same if r.since is not None]
    out = NAMES[first.phase].split(" (")[0]
    if since:
        out += f" {duration(now - min(since))}"
    if len(same) < world_size:
        out += f", {len(same)}/{world_size} ranks"
    return out


def duration(s: float) -> str:
    s = max(int(s), 0)
    return (
        f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
    )


RENDEZVOUS_WARN_S = 60.0


TIMEOUT_MAX_S = 7 * 86400  # train.ddp_timeout_s's own bound


def _timeout_s(record: PhaseRecord) -> float | None:
    """The rendezvous timeout a rank wrote into its phase record (train.ddp_timeout_s), if it is one the config
    allows (a phase file is anyone's to damage: 1e308 would print as 300 digits)."""
    t = record.timeout_s
    return float(t) if t is not None and 0 < t <= TIMEOUT_MAX_S else None


def warn_after(record: PhaseRecord) -> float:
    """How long a rank may wait at the rendezvous before status warns: a minute, or half the rank's own timeout
    where that is shorter (with train.ddp_timeout_s = 60 a minute's warning would come as the rank fails)."""
    t = _timeout_s(record)
    return min(RENDEZVOUS_WARN_S, t / 2) if t is not None else RENDEZVOUS_WARN_S


def stuck_at_rendezvous(records: list[PhaseRecord], now: float | None = None) -> str | None:
    """The one line status prints when ranks have waited at the rendezvous (or for the first host's address) for
    longer than a minute (or half their timeout, if shorter): which ranks, how long, for which address, what to
    check and when they give up. None otherwise."""
    now = now or time.time()
    waiting = [
        r
        for r in records
        if r.phase in WAITING and r.since is not None and now - r.since > warn_after(r)
    ]
    if not waiting:
        return None
    ranks = ", ".join(str(r.rank) for r in sorted(waiting, key=lambda r: r.rank))
    longest = max(now - (r.since or now) for r in waiting)
    where = sorted({" ".join((r.detail or "?").split())[:80] for r in waiting})
    arrived = [r for r in records if r not in waiting]
    limits = {_timeout_s(r) for r in waiting}
    limit = next(iter(limits)) if len(limits) == 1 else None
    return (
        f"rank(s) {ranks} have waited {duration(longest)} at the rendezvous for {', '.join(where)}"
        + (f" ({len(arrived)} other rank(s) are past it or not started)" if arrived else "")
        + ": check that this address resolves and its port is reachable from every node (launch.master_interface,"
        " launch.master_port); the ranks give up after train.ddp_timeout_s"
        + (f" ({duration(limit)})" if limit is not None else "")
    )
