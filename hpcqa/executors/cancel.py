"""`hpcqa cancel`: which registry rows a list of job / sweep ids means, and stopping them.

Slurm jobs: one scancel for the lot (a whole sweep by its array ids). Local jobs: the controller is
stopped with its ranks. Each cancelled job's folder gets a cancel marker, so its state stays right
even where no scheduler can be asked.
"""

from __future__ import annotations

from typing import Sequence

from hpcqa.errors import UsageError
from hpcqa.executors import table
from hpcqa.executors.slurm.cli import Slurm
from hpcqa.record import registry


def chosen(reg, ids: Sequence[str], task: int | None) -> list:
    """Registry rows for job ids and sweep ids (a sweep: all its tasks, or only `task`)."""
    rows = []
    for job_id in ids:
        sweep_rows = reg.jobs(sweep_id=job_id) if reg.exists else []
        if sweep_rows:
            chosen = [r for r in sweep_rows if task is None or r.task_index == task]
            if not chosen:
                raise UsageError(
                    f"sweep {job_id} has no task {task}",
                    f"tasks are 0-{max(r.task_index for r in sweep_rows)}",
                )
            rows += chosen
            continue
        found = [r for r in reg.jobs([job_id]) if r.id == job_id] if reg.exists else []
        if not found:
            raise registry.not_found([job_id], reg.path)
        rows.append(found[0])
    return rows


def cancel(rows: Sequence, whole_sweeps: bool, slurm: Slurm) -> list[str]:
    """Stop every row that can still run, through its executor's verbs; -> one message per job."""
    messages = [f"job {r.id} already ended ({r.state})" for r in rows if r.final]
    for name, live in table.by_executor([r for r in rows if not r.final]).items():
        messages += table.verbs(name, slurm).cancel(live, whole_sweeps)
    return messages
