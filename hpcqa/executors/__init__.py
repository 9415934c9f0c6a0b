"""Executors consume a LaunchPlan; they decide nothing the plan already decided."""

from __future__ import annotations

from hpcqa.plan import LaunchPlan


def run_plan(plan: LaunchPlan, wait: bool = True) -> int:
    if plan.executor == "local":
        from hpcqa.executors.local import run
        return run(plan, wait=wait)
    from hpcqa.executors.slurm import run
    return run(plan, wait=wait)
