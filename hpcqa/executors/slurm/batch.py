"""The sbatch text of a job or an array under submitit's task runtime: written by hpcqa, submitted by hpcqa (the
dry run shows this very text), its log names submitit's so that submitit's runtime and `hpcqa logs` find them."""

from __future__ import annotations

import shlex

from hpcqa.core.plan import LaunchPlan
from hpcqa.executors import render
from hpcqa.record import jobdir


def submitit_batch(
    plan: LaunchPlan,
    folder: str,
    command: str,
    tasks: int = 1,
    throttle: int = 0,
    code: tuple[str, ...] = (),
) -> str:
    """The sbatch script of a job (tasks = 1) or an array whose tasks run `command` -- submitit's task runtime
    behind the rank wrapper -- under srun, one step with every rank. Written by hpcqa, submitted by hpcqa:
    the dry run shows this very text. Log names are submitit's (%j_%t_log.out/err in the job folder; an
    array's %j is %A_%a), so submitit's runtime and `hpcqa logs` find them."""
    p = plan.slurm_parameters()
    job = "%A_%a" if tasks > 1 else "%j"
    stdout, stderr = (
        folder.replace(jobdir.JOB_ID, job) + "/" + jobdir.SUBMITIT_LOG.format(job=job, stream=s)
        for s in ("out", "err")
    )
    own: dict[str, object] = {"array": f"0-{tasks - 1}%{throttle or tasks}"} if tasks > 1 else {}
    own.update(
        {
            "output": stdout.replace("%t", "0"),
            "error": stderr.replace("%t", "0"),
            "open_mode": "append",
        }
    )
    srun = " ".join(
        shlex.quote(a)
        for a in ["srun", "--unbuffered", "--output", stdout, "--error", stderr, *p["srun_args"]]
    )
    lines = [
        "#!/bin/bash",
        f"# hpcqa: {plan.config.source.replace(chr(10), ' ') or 'a config'}",
        "# "
        + (f"an array of {tasks} tasks" if tasks > 1 else "one job")
        + ", each rank through submitit's task runtime",
        *render.sbatch_directives(plan, own),
        "",
    ]
    setup = plan.config.cluster.setup
    if any(ch in line for line in setup for ch in "\n\r\0"):
        raise ValueError("a cluster.setup entry spans lines")
    lines += ["# cluster.setup, in order, before the ranks start", *setup, ""] if setup else []
    lines += [*code, "export SUBMITIT_EXECUTOR=slurm", f"{srun} {command}", ""]
    return "\n".join(lines)
