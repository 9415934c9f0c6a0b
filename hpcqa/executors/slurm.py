"""The Slurm executor: submitit's SlurmExecutor fed from the plan; the rank wrapper rides in `python=`."""

from __future__ import annotations

import sys
from pathlib import Path

from hpcqa.errors import SubmitError
from hpcqa.executors import common
from hpcqa.plan import LaunchPlan


def submit(plan: LaunchPlan):
    import submitit

    from hpcqa.train.job import RankJob

    _, python = common.prepare(plan)
    ex = submitit.SlurmExecutor(folder=str(common.job_root(plan) / "%j"), python=python,
                                max_num_timeout=plan.config.cluster.max_requeues)
    ex.update_parameters(**plan.slurm_parameters())
    try:
        job = ex.submit(RankJob(plan.dumps()))
    except Exception as e:  # submitit raises FailedJobError / CalledProcessError with sbatch's stderr
        raise SubmitError(f"sbatch refused the job: {e}",
                          "check partition/account/qos and the node shape with `hpcqa doctor`") from None
    common.tidy(plan)
    return job, Path(str(job.paths.folder))


def run(plan: LaunchPlan, wait: bool = True) -> int:
    from hpcqa import status

    job, folder = submit(plan)
    common.register(plan, job.job_id, folder)
    print(f"submitted Slurm job {job.job_id}: {plan.world_size} ranks on {plan.nodes} node(s); folder {folder}",
          file=sys.stderr)
    print(f"  logs: {folder}/{job.job_id}_<rank>_log.out|err", file=sys.stderr)
    if not wait:
        print(job.job_id)
        return 0
    last: dict = {}

    def done() -> bool:
        recs, _ = status.query_slurm([job.job_id])
        rec = recs.get(job.job_id)
        if rec is None:  # neither sacct nor squeue knows it any more: it ended
            last["state"] = status.state_from_files(folder) or "FAILED"
            return True
        last["state"] = rec.state
        return status.is_final(rec.state)

    try:
        common.watch(folder, done, f"job {job.job_id}", poll_s=2.0)
    except KeyboardInterrupt:
        print(f"\nstopped watching; job {job.job_id} keeps running (hpcqa cancel {job.job_id})", file=sys.stderr)
        return 130
    return common.report(job.job_id, folder, last.get("state", "UNKNOWN"), plan)
