"""Executors consume plans; they decide nothing the plan already decided.

    submit(sweep plan)      local.run or slurm.run (a single job is a sweep of one): print, wait, report
    start(sweep plan)       submit without waiting or printing -> (job ids, sweep id): the Python API
    cancel(...)             scancel for Slurm jobs, the controller's process group for local ones
"""

from __future__ import annotations

from hpcqa.core.sweep import SweepPlan


def submit(sp: SweepPlan, wait: bool = True) -> int:
    if sp.executor == "local":
        from hpcqa.executors.local import run
        return run(sp, wait=wait)
    from hpcqa.executors.slurm import run
    return run(sp, wait=wait)


def start(sp: SweepPlan) -> tuple[list[str], str | None]:
    if sp.executor == "local":
        from hpcqa.executors.local import start as start_local
        return start_local(sp)
    from hpcqa.executors.slurm import start as start_slurm
    return start_slurm(sp)
