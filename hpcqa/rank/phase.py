"""Where each rank is: starting, waiting at the rendezvous, loading, training step N, evaluating... Each rank writes
its own small file (ranks/rank-N.phase.json, atomically) when it enters a phase, and while training at most every
few seconds, so that `hpcqa status JOB` can say what a job that shows RUNNING is doing -- a job stuck at the
rendezvous (a master address the other nodes cannot resolve) looks RUNNING to the scheduler for as long as
train.ddp_timeout_s. Light: no torch (the rank wrapper writes the first phase before torch is imported).

A phase file is a report: writing it must not fail a rank (a full disk says so once on stderr). The one decision it
feeds is the pod's rank wrapper's, after a SIGTERM that the rank has not answered in 15 s: a rank whose own file
still says it is before training is blocked outside Python (a rendezvous) and is ended (rank/wrapper.py).
"""

from __future__ import annotations

import os
import socket
import sys
import time
from typing import Any

from hpcqa.record.jobdir import JobDir
from hpcqa.record.jobfiles import phase as phasefile
from hpcqa.record.phases import Phase

THROTTLE_S = 5.0


class Phases:
    """One rank's phase file. `enter` writes at once; `step` (training progress) at most every THROTTLE_S."""

    def __init__(self, jd: JobDir | None, rank: int, attempt: int = 0) -> None:
        self.jd, self.rank, self.attempt = jd, rank, attempt
        self.record: dict[str, Any] = {}
        self.last_write = 0.0
        self.broken = False

    def enter(self, phase: Phase, detail: str = "", **extra: Any) -> None:
        phase = Phase(phase)  # a name that is no phase fails here, not in status
        now = time.time()
        self.record = {
            "rank": self.rank,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "attempt": self.attempt,
            "phase": phase,
            "detail": detail,
            "since": now,
            "updated": now,
            **extra,
        }
        self._write()

    def note(self, detail: str) -> None:
        """A new detail for the same phase (its start time stays)."""
        self.record.update(detail=detail, updated=time.time())
        self._write()

    def step(self, step: int, total: int | None) -> None:
        if self.record.get("phase") != Phase.TRAINING:
            self.enter(Phase.TRAINING, step=step, total_steps=total)
            return
        self.record.update(step=step, total_steps=total, updated=time.time())
        if time.time() - self.last_write >= THROTTLE_S:
            self._write()

    def _write(self) -> None:
        if self.jd is None or self.broken:
            return
        self.last_write = time.time()
        try:
            phasefile.write(self.jd.rank_phase(self.rank), self.record)
        except OSError as e:
            self.broken = True
            print(
                f"[hpcqa rank {self.rank}] WARNING: could not write the phase file ({e}); status will not show "
                "this rank's phase",
                file=sys.stderr,
                flush=True,
            )
