"""The stop protocol: a notice (SIGTERM, or the requeue signal) sets a flag; after each optimizer step all ranks
agree whether one arrived anywhere; then a checkpoint, and the requeue (submitit's, the job script's, the pod's
restart) or Slurm's own decision. Also how a rank leaves: the process group left alone, and the interpreter's
teardown skipped once the work is saved."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from typing import Any

import torch
import torch.distributed as dist

from hpcqa.core.kinds import Requeue
from hpcqa.rank.exits import all_ranks_stopped, requeue_through_submitit, wait_for_slurms_end
from hpcqa.rank.train import tracking
from hpcqa.rank.train.facts import Rank
from hpcqa.record.jobdir import attempt_from_env, write_json
from hpcqa.record.phases import Phase


def attempt() -> int:
    """This (re)start of the job (Slurm's SLURM_RESTART_COUNT, a pod script's HPCQA_ATTEMPT)."""
    return attempt_from_env(os.environ)


class _Stop:
    """Notices only raise a flag: SIGTERM (Slurm's preemption notice, scancel, the time limit; a pod's eviction)
    and the requeue signal (launch.requeue_signal, USR2 by default: --signal=USR2@N before the time limit). Every
    rank checks the flag at each step boundary through one collective, so all stop after the same step, save one
    checkpoint together, and no rank waits in an all-reduce for a peer that left. The collective also agrees on
    the kind: SIGTERM anywhere wins, because then Slurm, not hpcqa, decides whether the job comes back."""

    TERM, REQUEUE = 2, 1

    def __init__(self) -> None:
        self.signum: int | None = None
        self.kind = 0
        self.previous: Any = None
        self.agreed_at: int | None = None
        self.early_exit = (
            False  # a pod before training began: a notice ends the rank at once (nothing to save)
        )

    def install(self, requeue_signal: str = "USR2", early_exit: bool = False) -> None:
        # submitit's checkpoint-and-requeue listens on USR2; kept to be called once the checkpoint is saved
        self.early_exit = early_exit
        self.previous = signal.getsignal(signal.SIGUSR2)
        self.requeue = getattr(signal, f"SIG{requeue_signal}")
        for sig in {self.requeue, signal.SIGTERM}:
            signal.signal(sig, self._raise_flag)

    def _raise_flag(self, signum, frame) -> None:
        with contextlib.suppress(
            OSError
        ):  # the rank's log says when each notice arrived (a raw write: in a handler)
            os.write(
                2, f"hpcqa: {signal.Signals(signum).name} received at {time.time():.3f}\n".encode()
            )
        kind = self.TERM if signum == signal.SIGTERM else self.REQUEUE
        if kind > self.kind:
            self.signum, self.kind = signum, kind
        if (
            self.early_exit
        ):  # loading, preprocessing, the rendezvous: no step boundary will come soon
            self.early_exit = False
            raise NoticeBeforeTraining(self.name)

    def agreed(self, world: int) -> bool:
        flag = self.kind
        if world > 1:
            t = torch.tensor([flag], dtype=torch.int32)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            flag = int(t.item())
        # max, not the reduced value alone: a notice whose handler ran during the collective (where a rank waiting
        # for its peer spends most of an evaluation batch) raised self.kind after `flag` was read; it is agreed on
        # at the next call, by every rank alike (this call's answer is the reduced one on all of them)
        if flag > self.kind:
            self.kind = flag
        return bool(flag)

    @property
    def name(self) -> str:
        return "SIGTERM" if self.kind == self.TERM else signal.Signals(self.requeue).name


STOP = _Stop()


def stop_after_checkpoint(r: Rank, step: int) -> dict:
    """The checkpoint of `step` is saved on every rank. A requeue signal: hpcqa requeues (submitit's handler:
    global rank 0 requeues; a rendered script or a pod: the script / the operator). SIGTERM: Slurm decides."""
    tracking.abandon("KILLED")  # rank 0's MLflow run; a requeued attempt sets it RUNNING again
    notice = {
        "signal": STOP.name,
        "step": step,
        "attempt": attempt(),
        "time": time.time(),
        "checkpoint": str(r.jd.checkpoints / f"checkpoint-{step}"),
    }
    r.save_report(
        status=f"checkpointed on {STOP.name}",
        stopped_at_step=step,
        stopped_at=time.time(),
        notice=notice,
    )
    if STOP.kind == STOP.TERM and r.plan.requeue is not Requeue.POD:
        r.log(
            f"SIGTERM (preemption, scancel or the time limit): checkpoint of step {step} saved; Slurm decides "
            "what follows (PreemptMode=REQUEUE brings the job back, a cancel ends it)"
        )
        if os.environ.get("SLURM_JOB_ID"):
            a = attempt()
            wait_for_slurms_end(
                r.log,
                saved=(lambda: all_ranks_stopped(r.jd, r.world, a)) if r.rank == 0 else None,
            )
        raise RankStopped(
            f"stopped at step {step} on SIGTERM; checkpoint saved ({notice['checkpoint']})"
        )
    r.log(f"{STOP.name} received: checkpoint of step {step} saved; requeueing")
    if r.plan.requeue.by_the_job_script:  # the job script requeues (a pod: is restarted)
        if r.rank == 0:
            write_json(r.jd.requeue_request(attempt()), {"step": step, "time": time.time()})
        return {"rank": r.rank, "stopped_at_step": step, "requeue": "asked of the job script"}
    if callable(STOP.previous):  # rank 0: submitit's checkpoint pickle, scontrol requeue, exit
        requeue_through_submitit(STOP.previous, lambda: STOP.kind == STOP.TERM, r.log)
    if r.rank != 0:  # the requeue ends this step; a rank 0 that couldn't requeue ends it too
        wait_for_slurms_end(r.log, 300)
    raise RankStopped(
        f"stopped at step {step} on a signal; checkpoint saved (no scheduler to requeue it)"
    )


class RankStopped(Exception):
    """The run stopped on a signal after saving a checkpoint, and nothing requeued it."""


class StopNotice(Exception):
    """Every rank agreed on a notice inside an evaluation or prediction loop, where no step boundary comes: raised
    out of the Trainer's loop; the caller saves a checkpoint of the current step (save_at_notice) and stops."""


class NoticeBeforeTraining(BaseException):
    """A pod's notice before training began (model and data loading, preprocessing, the rendezvous): there is
    nothing to checkpoint, so the rank ends at once with the stopped code and the restarted pod starts again. A
    BaseException, so that no library's `except Exception` swallows it."""


def save_at_notice(r: Rank, trainer, during: str) -> int:
    """The checkpoint of the current step, saved where the Trainer's loop would not (a notice during evaluation):
    what its own save at a step does -- _save_checkpoint, then the callbacks' on_save (every rank's part, the mark).
    A step already saved and marked is not saved again."""
    step = trainer.state.global_step
    STOP.agreed_at = step
    r.phases.enter(Phase.STOPPING, f"{STOP.name} at step {step}, during {during}")
    if not r.jd.checkpoint_marker(r.jd.checkpoints / f"checkpoint-{step}").exists():
        trainer._save_checkpoint(trainer.model_wrapped, trial=None)
        trainer.control = trainer.callback_handler.on_save(
            trainer.args, trainer.state, trainer.control
        )
    return step


def leave_process_group() -> None:
    """Every rank waits here for the others (rank 0 writing the results) before it exits, so no rank leaves
    while its peers still run collectives: a rank whose peer had gone aborted at exit once on the test cluster
    ("terminate called without an active exception"). The group is not destroyed: destroy_process_group hung
    one rank of a 2-node gloo job in its shutdown after everyone had passed this barrier."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
