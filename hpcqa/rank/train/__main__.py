"""`python -m hpcqa.rank.train --plan PLAN.json`: one rank, as started by a rendered sbatch script.

Runs behind the rank wrapper (python -m hpcqa.rank); the job folder comes from HPCQA_JOB_DIR.
"""

import os
import signal
import sys
from pathlib import Path

from hpcqa.core import plan as planmod
from hpcqa.core.kinds import PodExit, Requeue
from hpcqa.errors import HpcqaError
from hpcqa.rank.command import CommandFailed, run_command
from hpcqa.rank.exits import exit_without_teardown, ignore_at_exit
from hpcqa.rank.job import already_completed, load_trainer
from hpcqa.record.jobdir import JobDir


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "--plan":
        print("usage: python -m hpcqa.rank.train --plan PLAN.json", file=sys.stderr)
        return 2
    try:
        plan = planmod.load(argv[1])
        jd = JobDir(Path(os.environ.get("HPCQA_JOB_DIR") or Path(argv[1]).parent))
        if already_completed(jd):
            return 0
        if plan.command:
            return command_rank(plan, jd)
        out = load_trainer()(plan, jd)  # the trainer: not in a user command's supervisor (no torch)
    except HpcqaError as e:
        print(f"hpcqa.rank.train: {e.render()}", file=sys.stderr)
        return e.exit_code
    # a PyTorchJob pod stopped after its checkpoint: not done, so the operator must restart it (every node's)
    if isinstance(out, dict) and out.get("requeue") and plan.requeue is Requeue.POD:
        return int(PodExit.STOPPED)
    exit_without_teardown()  # done and saved: no interpreter teardown (gloo's threads can abort it)
    return 0


def command_rank(plan: planmod.LaunchPlan, jd: JobDir) -> int:
    """A user command's rank under a job script or a pod: the program's own exit code is the rank's."""
    try:
        run_command(plan, jd)
    except CommandFailed as e:
        print(f"hpcqa.rank.train: {e.message}", file=sys.stderr)
        return e.code if e.code > 0 else 128 - e.code
    finally:  # the program has ended and the rank has decided how: a notice now has nothing to stop
        ignore_at_exit((signal.SIGTERM, getattr(signal, f"SIG{plan.config.launch.requeue_signal}")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
