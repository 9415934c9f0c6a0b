"""How a rank's process leaves, and which code it runs: what the built-in trainer and a user command's supervisor
share. Standard library only (a user command's rank never imports torch)."""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from hpcqa.core.states import State
from hpcqa.record.jobdir import JobRoot, read_json

# After a SIGTERM checkpoint a Slurm rank waits to be killed: Slurm ends the job its own way (the grace time's
# SIGKILL then a requeue for PreemptMode=REQUEUE; CANCELLED for scancel; TIMEOUT) -- a job that exited by
# itself during the grace time would count as ended, and a preempted one would not come back.
TERM_WAIT_S = 900
SQUEUE_TIMEOUT_S = 15.0


def slurm_job_state(job_id: str) -> str | None:
    """What squeue says of the job now (RUNNING, COMPLETING, PENDING ...), or None if it could not tell. The rank
    side's one question to Slurm (it cannot reach the executors' Slurm object: the layers point down)."""
    try:
        r = subprocess.run(
            ["squeue", "-h", "-j", job_id, "-o", "%T"],
            capture_output=True,
            text=True,
            timeout=SQUEUE_TIMEOUT_S,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    words = r.stdout.split()
    return words[0] if r.returncode == 0 and len(words) == 1 else None


def wait_for_slurms_end(log: Callable[[str], None], seconds: float = TERM_WAIT_S) -> None:
    """Wait for Slurm to end this job its own way (see TERM_WAIT_S). Slurm ends a step with SIGTERM, then SIGKILL
    KillWait later (30 s by default): when a SIGTERM comes now, ask Slurm, and once it no longer shows the job
    RUNNING (the grace time's end: requeued or preempted; cancelled; timed out; requeued by `scontrol requeue`),
    leave at once, as SIGTERM ends a process, and the node is free that much sooner. While Slurm still shows it
    RUNNING (the grace time: a second notice, a user's `scancel --signal=TERM`) the rank waits on. With no Slurm
    job, or no answer from squeue, it waits as before. First asked at once: the notice may have been a cancel."""
    job_id = os.environ.get("SLURM_JOB_ID")
    if not job_id:
        time.sleep(seconds)
        return
    came = [True]
    previous = signal.signal(signal.SIGTERM, lambda *_: came.append(True))
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if came:
            came.clear()
            state = slurm_job_state(job_id)
            if state is not None and state != State.RUNNING:
                log(f"Slurm shows the job {state}: this rank leaves now")
                sys.stdout.flush()
                sys.stderr.flush()
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                os.kill(os.getpid(), signal.SIGTERM)
                os._exit(128 + signal.SIGTERM)  # not reached: the signal ends the process
        time.sleep(0.2)
    if previous is not None:
        signal.signal(signal.SIGTERM, previous)


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


def requeue_through_submitit(
    handler: Any, sigterm_arrived: Callable[[], bool], log: Callable[[str], None]
) -> None:
    """Call submitit's USR2 handler: on global rank 0, its checkpoint pickle, `scontrol requeue`, then exit. The
    requeue ends the step: Slurm sends SIGTERM to every process in it, `scontrol` included, and on a busy
    controller that came before scontrol returned (its exit, -15, was submitit's error: a failed rank 0 in a job
    that came back and completed). A requeue call that fails once a SIGTERM has arrived is the requeue taking
    effect: the rank leaves as submitit would have (exit -1). Without a SIGTERM the error is the requeue's own."""
    try:
        handler(signal.SIGUSR2, None)
    except Exception as e:
        if not sigterm_arrived():
            raise
        log(
            f"SIGTERM while requeueing ({type(e).__name__}: {e}): Slurm ended the step for the requeue; "
            "leaving, the checkpoint saved"
        )
        raise SystemExit(-1) from None
