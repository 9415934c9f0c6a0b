"""Executors consume plans; they decide nothing the plan already decided.

    submit(sweep plan)      local.run or slurm.run (a single job is a sweep of one)
    cancel(...)             scancel for Slurm jobs, the controller's process group for local ones
"""

from __future__ import annotations

from hpcqa.sweep import SweepPlan


def submit(sp: SweepPlan, wait: bool = True) -> int:
    if sp.executor == "local":
        from hpcqa.executors.local import run
        return run(sp, wait=wait)
    from hpcqa.executors.slurm import run
    return run(sp, wait=wait)
