"""How a rank's process leaves, and which code it runs: what the built-in trainer and a user command's supervisor
share. Standard library only (a user command's rank never imports torch)."""

from __future__ import annotations

import atexit
import os
import sys
from pathlib import Path
from typing import Mapping

from hpcqa.record.jobdir import JobRoot, read_json

# After a SIGTERM checkpoint a Slurm rank waits to be killed: Slurm ends the job its own way (the grace time's
# SIGKILL then a requeue for PreemptMode=REQUEUE; CANCELLED for scancel; TIMEOUT) -- a job that exited by
# itself during the grace time would count as ended, and a preempted one would not come back.
TERM_WAIT_S = 900


def code_provenance(env: Mapping[str, str]) -> dict:
    """Which hpcqa this rank imported: the submission's snapshot (its provenance), or the live tree."""
    here = str(Path(__file__).resolve().parents[1])
    snap = env.get("HPCQA_CODE")
    if snap:
        got = read_json(JobRoot.code_provenance(Path(snap)))
        return {**(got if isinstance(got, dict) else {}), "imported_from": here, "snapshot": snap}
    return {"imported_from": here, "snapshot": None, "describe": "the live tree (no snapshot)"}


def exit_without_teardown() -> None:
    """Once this rank's work is done and saved, end the process without the interpreter's teardown. The process group
    is left alone (see leave_process_group), and gloo's worker threads can still hold tensors then: destroying those
    during finalization aborts the process (SIGABRT, "terminate called without an active exception"; pytorch
    issue 190489) -- seen on the 2-node test cluster after a rank had logged its success, and the job was FAILED.
    Registered at exit: whatever runs the rank (submitit's runtime writes its result file first) finishes, then this
    ends the process with status 0 -- unless an exception reached the top, which keeps its own exit."""
    failed: list[bool] = []
    previous = sys.excepthook

    def hook(*exc):
        failed.append(True)
        previous(*exc)

    def leave() -> None:
        if not failed:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)

    sys.excepthook = hook
    atexit.register(leave)
