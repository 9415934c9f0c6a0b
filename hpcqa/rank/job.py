"""The callable submitit pickles and runs in every task (rank).

Light on purpose: the executors import this module to pickle a RankJob, and submitit's runtime unpickles it in the
rank. Nothing here imports the trainer; `RankJob.__call__` does, in the rank, when the plan asks for it (as
submitit's own executors never import the code they pickle)."""

from __future__ import annotations

import gc
import os
import pickle
import sys
from pathlib import Path

import cloudpickle
import submitit
from submitit.core.utils import DelayedSubmission

from hpcqa.core import plan as planmod
from hpcqa.errors import RankError
from hpcqa.rank.binding import widen_main_thread
from hpcqa.rank.command import run_command
from hpcqa.rank.exits import exit_without_teardown
from hpcqa.record.jobdir import JobDir, attempt_from_env


class RankJob(submitit.helpers.Checkpointable):
    """Runs one rank of the plan in `plan_path` (the file the rank wrapper applied; the plan itself is
    not pickled: it crosses into the ranks once, as that file). Checkpointable: on preemption/timeout
    (SIGUSR2) submitit requeues the job, and the rerun resumes from the last Trainer checkpoint in the
    job folder (same job id, same folder)."""

    def __init__(self, plan_path: str, plan_digest: str) -> None:
        self.plan_path = plan_path
        self.plan_digest = plan_digest

    def __call__(self) -> dict:

        plan = planmod.load(self.plan_path)
        if plan.digest != self.plan_digest:
            raise RankError(
                f"plan file {self.plan_path} has digest {plan.digest}, submitted {self.plan_digest}",
                "plan files are content-addressed and never rewritten: re-submit",
            )
        jd = JobDir(Path(submitit.JobEnvironment().paths.folder))
        if already_completed(jd):
            return {"already_completed": True}
        if plan.command:  # the user's program: this process only supervises it (no torch here)
            return run_command(plan, jd)
        out = load_trainer()(plan, jd)  # the trainer (torch, transformers): only in a training rank
        if not (isinstance(out, dict) and out.get("requeue")):
            exit_without_teardown()  # done: after submitit has written the result, no teardown
        return out


def already_completed(jd: JobDir) -> bool:
    """A start of a job whose work an earlier attempt finished (JobDir.completed_before): one line, nothing run."""
    if not os.environ.get("SLURM_JOB_ID") or os.environ.get("HPCQA_ATTEMPT"):
        return False  # only Slurm starts a job again after it completed; a pod's attempts are counted otherwise
    attempt = attempt_from_env(os.environ)
    done = jd.completed_before(attempt)
    if done is None:
        return False
    print(
        f"hpcqa: attempt {attempt} of a job that attempt {done} completed (Slurm requeued it after it finished: "
        "Slurm 24.11 does so once after a preemption); nothing to do, the results stay attempt "
        f"{done}'s",
        file=sys.stderr,
        flush=True,
    )
    return True


SUBMITIT_DEFAULT_TIMEOUTS = 3  # submitit's max_num_timeout, which its LocalExecutor gives every job


def pickled(plan_path: str, plan_digest: str, timeout_min: int, countdown: int) -> bytes:
    """The `<job id>_submitted.pkl` of a rank job, as DelayedSubmission.dump writes it (cloudpickle, highest protocol):
    what the Slurm executor writes at submit, and -- one countdown lower per requeue -- what submitit rewrites."""
    delayed = DelayedSubmission(RankJob(plan_path, plan_digest))
    delayed.set_timeout(timeout_min, countdown)
    return cloudpickle.dumps(delayed, pickle.HIGHEST_PROTOCOL)


def pickles(plan_path: str, plan_digest: str, timeout_min: int, max_requeues: int) -> set[bytes]:
    """Every pickle submit or submitit's requeue can have written for this plan (submitit's LocalExecutor counts
    down from its own default)."""
    return {
        pickled(plan_path, plan_digest, timeout_min, c)
        for c in range(max(max_requeues, SUBMITIT_DEFAULT_TIMEOUTS) + 1)
    }


def load_trainer():  # noqa: ANN201 -- the trainer's run_rank, whose module this one must not import
    """hpcqa.rank.train.run's run_rank, imported with Python's cyclic garbage collector paused. torch and
    transformers make over a million objects at import, and every collection those allocations trigger walks the
    ones made so far: paused, the import costs less CPU (benchmarks/import_bench.py). What the import made is then
    frozen (gc.freeze: left out of later collections), so the training loop's full collections do not walk it
    again either; objects that are garbage still go by reference counting. The main thread is widened first, in the
    same pause: a bound rank imports torch there, before the trainer's imports start threads."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        widen_main_thread()
        from hpcqa.rank.train.run import run_rank
    finally:
        if was_on:
            gc.enable()
    gc.freeze()
    return run_rank
