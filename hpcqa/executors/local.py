"""The local executor: the same plan on this machine, through submitit's LocalExecutor.

submitit starts `ranks_per_node` tasks with SUBMITIT_LOCAL_* set; its `python=` hook puts our rank
wrapper in front of each, which maps those variables to torch's, applies the plan's per-socket
environment and binding, and execs the interpreter. All ranks share this terminal's process group, so
Ctrl-C reaches every one of them; a rank that fails makes the others stop (gloo notices the closed
peer; if it doesn't within 10 s, the job is cancelled).
"""

from __future__ import annotations

import sys
from pathlib import Path

from hpcqa.executors import common
from hpcqa.plan import LaunchPlan


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def cancel(controller_pid: int, grace_s: float = 10.0) -> bool:
    """Stop a local job: SIGINT to submitit's controller, which stops its ranks (SIGINT, then SIGKILL).
    SIGTERM would not do: submitit's job processes bypass it (on Slurm it precedes preemption).
    Whatever is left after the grace period is killed. False if the job wasn't running."""
    import os
    import signal
    import time
    ranks = _children(controller_pid)
    try:
        os.kill(controller_pid, signal.SIGINT)
    except ProcessLookupError:
        return False
    end = time.time() + grace_s
    while time.time() < end:
        alive = [p for p in [controller_pid, *ranks] if Path(f"/proc/{p}").exists()]
        if not alive:
            return True
        time.sleep(0.2)
    for p in [*ranks, controller_pid]:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return True


def submit(plan: LaunchPlan):
    import submitit

    from hpcqa.train.job import RankJob

    _, python = common.prepare(plan)
    ex = submitit.LocalExecutor(folder=str(common.job_root(plan) / "%j"), python=python)
    ex.update_parameters(tasks_per_node=plan.ranks_per_node, timeout_min=plan.config.cluster.time_limit_min,
                         signal_delay_s=min(plan.config.cluster.signal_delay_s, 60))
    job = ex.submit(RankJob(plan.dumps()))
    common.tidy(plan)
    return job, Path(job.paths.folder)


def run(plan: LaunchPlan, wait: bool = True) -> int:
    job, folder = submit(plan)
    common.register(plan, job.job_id, folder)
    err = sys.stderr
    print(f"local job {job.job_id}: {plan.world_size} ranks, folder {folder}", file=err)
    for r, lr in zip(range(plan.world_size), plan.local_ranks):
        print(f"  rank {r}: CPUs {','.join(map(str, lr.cpus)) or 'unbound'}  "
              f"log {folder / f'{job.job_id}_{r}_log.err'}", file=err)
    if not wait:
        print(f"  runs on in the background: hpcqa status {job.job_id} / hpcqa logs {job.job_id} -f / "
              f"hpcqa cancel {job.job_id}", file=err)
        print(job.job_id)
        return 0
    return finish(job, folder, plan, f"job {job.job_id}",
                  f"interrupted: local job {job.job_id} cancelled (all ranks stopped)")


def finish(job, folder: Path, plan: LaunchPlan, title: str, interrupted: str) -> int:
    """Watch a local job to its end and report it (JobFailed if it failed); 130 after Ctrl-C."""
    try:
        common.watch(folder, job.done, title, fail_fast=job.cancel)
    except KeyboardInterrupt:
        job.cancel()
        print(f"\n{interrupted}", file=sys.stderr)
        return 130
    state = "FAILED" if common.failed_ranks(folder) else ("COMPLETED" if job.state == "FINISHED" else job.state)
    return common.report(job.job_id, folder, state, plan)


