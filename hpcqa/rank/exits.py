"""How a rank's process leaves, and which code it runs: what the built-in trainer and a user command's supervisor
share. Standard library only (a user command's rank never imports torch)."""

from __future__ import annotations

import atexit
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from hpcqa.core.states import State
from hpcqa.executors.slurm import node as slurm
from hpcqa.record.jobdir import JobDir, JobRoot, attempt_notice, read_json

# After a SIGTERM checkpoint a Slurm rank waits to be killed: Slurm ends the job its own way (the grace time's
# SIGKILL then a requeue for PreemptMode=REQUEUE; CANCELLED for scancel; TIMEOUT) -- a job that exited by
# itself during the grace time would count as ended (COMPLETED, measured on 22.05), and a preempted one would not
# come back. The one exception: a preemption Slurm will requeue anyway (see executors/slurm/node.py).
TERM_WAIT_S = 900


def all_ranks_stopped(jd: JobDir, world: int, attempt: int) -> bool:
    """Every rank of this attempt has written its report with its notice: whatever it saves, it has saved."""
    return all(attempt_notice(jd.read_report(k), attempt) for k in range(world))


def wait_for_slurms_end(
    log: Callable[[str], None],
    seconds: float = TERM_WAIT_S,
    saved: Callable[[], bool] | None = None,
) -> None:
    """Wait for Slurm to end this job its own way (see TERM_WAIT_S). Slurm ends a step with SIGTERM, then SIGKILL
    KillWait later (30 s by default): when a SIGTERM comes now, ask Slurm, and once it no longer shows the job
    RUNNING (the grace time's end: requeued or preempted; cancelled; timed out; requeued by `scontrol requeue`),
    leave at once, as SIGTERM ends a process, and the node is free that much sooner. While Slurm still shows it
    RUNNING (the grace time: a second notice, a user's `scancel --signal=TERM`) the rank waits on. With no Slurm
    job, or no answer from squeue, it waits as before. First asked at once: the notice may have been a cancel.

    `saved` (global rank 0 only: has every rank saved?): when Slurm is preempting the job and will requeue it
    anyway (slurm.preempted_to_requeue), rank 0 requeues it itself (`scontrol requeue`) once every rank has saved,
    instead of waiting out the grace time -- and Slurm's periodic pass that enforces it, up to 30 s later. The
    preemptor gets the nodes that much sooner, and the job is requeued as Slurm would have (its attempt shows
    REQUEUED rather than PREEMPTED)."""
    job_id = os.environ.get("SLURM_JOB_ID")
    if not job_id:
        time.sleep(seconds)
        return
    came = [True]
    previous = signal.signal(signal.SIGTERM, lambda *_: came.append(True))
    end = time.monotonic() + seconds
    why: str | None = None
    looked = 0.0  # the ranks' reports are read once a second (a shared file system, many ranks)
    while time.monotonic() < end:
        if saved is not None and not came and why is None:
            why = slurm.preempted_to_requeue(job_id) or ""
        if why and saved is not None and time.monotonic() - looked >= 1.0:
            looked = time.monotonic()
            if saved():
                saved = None  # asked once
                r = slurm.requeue(job_id)
                log(
                    f"{why}; every rank has saved: requeued now (scontrol requeue), not at the grace time's "
                    "end"
                    if r is not None or came
                    else f"{why}; scontrol requeue failed: waiting for Slurm's own requeue"
                )
        if came:
            came.clear()
            state = slurm.job_state(job_id)
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


def ignore_at_exit(signals: Iterable[int]) -> None:
    """For a process that exits next (a rank's wrapper, a command's rank): these signals are ignored from here on.
    Left as they are, Python puts its handlers back to the default as the interpreter exits, and a notice that
    reaches the node late -- Slurm signals each node in its own time -- killed the process then (seen: a rank whose
    program had ended cleanly, killed by SIGUSR2 as it exited, and srun's --kill-on-bad-exit with it). Not for a
    process that goes on to start others: an ignored signal stays ignored across exec."""
    for sig in signals:
        signal.signal(sig, signal.SIG_IGN)
