"""The callable submitit pickles and runs in every task (rank)."""

from __future__ import annotations

import json
from pathlib import Path

import submitit


class RankJob(submitit.helpers.Checkpointable):
    """Runs one rank. Checkpointable: on preemption/timeout (SIGUSR2) submitit requeues the job, and
    the rerun resumes from the last Trainer checkpoint in the job folder (same job id, same folder)."""

    def __init__(self, plan_json: str) -> None:
        self.plan_json = plan_json

    def __call__(self) -> dict:
        from hpcqa.train.run import run_rank

        env = submitit.JobEnvironment()
        return run_rank(json.loads(self.plan_json), Path(env.paths.folder))
