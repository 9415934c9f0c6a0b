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

from hpcqa.errors import JobFailed
from hpcqa.executors import common
from hpcqa.plan import LaunchPlan


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


def run(plan: LaunchPlan) -> int:
    job, folder = submit(plan)
    err = sys.stderr
    print(f"local job {job.job_id}: {plan.world_size} ranks, folder {folder}", file=err)
    for r, lr in zip(range(plan.world_size), plan.local_ranks):
        print(f"  rank {r}: CPUs {','.join(map(str, lr.cpus)) or 'unbound'}  "
              f"log {folder / f'{job.job_id}_{r}_log.err'}", file=err)
    try:
        common.watch(folder, job.done, f"job {job.job_id}", fail_fast=job.cancel)
    except KeyboardInterrupt:
        job.cancel()
        print(f"\ninterrupted: local job {job.job_id} cancelled (all ranks stopped)", file=err)
        return 130
    return report(job, folder, plan)


def report(job, folder: Path, plan: LaunchPlan) -> int:
    results = common.read_json(folder / "results.json")
    failed = common.failed_ranks(folder)
    state = job.state
    if results and not failed and state not in ("FAILED", "INTERRUPTED"):
        print(f"job {job.job_id} COMPLETED  ({folder})")
        for line in common.summary_lines(results):
            print("  " + line)
        return 0
    lines = [f"job {job.job_id} FAILED (state {state})"]
    for f in failed:
        lines.append(f"rank {f['rank']} on {f['host']}: {f['error']}")
    if not failed:
        for r in range(plan.world_size):
            t = common.tail(folder / f"{job.job_id}_{r}_log.err", 8)
            if t:
                lines.append(f"rank {r} stderr tail:\n    " + "\n    ".join(t))
    raise JobFailed("\n  ".join(lines), f"per-rank logs: {folder}/{job.job_id}_<rank>_log.err")
