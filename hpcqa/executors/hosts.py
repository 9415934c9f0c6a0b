"""Plain machines, no scheduler: a script that starts every rank with Intel MPI's mpirun over ssh. Render only:
the request is the script; the user runs it on the first host (`bash job.sh`)."""

from __future__ import annotations

from hpcqa.core import sweep
from hpcqa.errors import PlanError, UsageError
from hpcqa.executors import render
from hpcqa.executors.interface import Request, Say, Submitted, silent
from hpcqa.record.jobdir import JobRoot


class Hosts:
    name = "hosts"
    runs_here = False
    asks_slurm = False

    def __init__(self, hosts: tuple[str, ...], python: str | None = None) -> None:
        self.hosts, self.python = hosts, python

    def dry_run(self, sp: sweep.SweepPlan) -> Request:
        if sp.is_sweep:
            raise PlanError("a plain-machine script runs one job", "render one variant at a time")
        plan = sp.plans[0]
        text = render.standalone(plan, plan.launcher, python=self.python or plan.python, hosts=self.hosts)
        return Request(self.name, sp, JobRoot.new_submission(), scripts=(text,),
                       commands=(("bash", "<script>"),), facts=(("hosts", " ".join(self.hosts)),),
                       summary=f"{plan.launcher}, {plan.world_size} ranks on {plan.nodes} host(s)",
                       placement=(f"mpirun over ssh on {self.hosts[0]}...",))

    def check(self, request: Request) -> tuple[bool, str]:
        return True, "plain machines: no scheduler to ask"

    def submit(self, request: Request, say: Say = silent) -> Submitted:
        raise UsageError("--submit sends the script to Slurm; a --hosts script runs on plain machines",
                         "drop --submit and run the script on the first host")

    def follow(self, submitted: Submitted, title: str) -> str:  # pragma: no cover - nothing is submitted
        return self.wait(submitted)

    def wait(self, submitted: Submitted, say: Say = silent) -> int:  # pragma: no cover - nothing is submitted
        raise UsageError("nothing was submitted", "run the script on the first host")
