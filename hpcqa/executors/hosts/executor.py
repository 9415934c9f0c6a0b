"""Plain machines, no scheduler: a script that starts every rank with Intel MPI's mpirun over ssh. Render only:
the request is the script; the user runs it on the first host (`bash job.sh`)."""

from __future__ import annotations

from hpcqa.core import kinds, sweep
from hpcqa.core.config import Config
from hpcqa.core.kinds import Requeue
from hpcqa.core.plan import HostProbe
from hpcqa.errors import PlanError
from hpcqa.executors import common, render
from hpcqa.executors.interface import RenderOnly, Request
from hpcqa.record.jobdir import JobRoot


class Hosts(RenderOnly):
    kind = kinds.HostsKind  # nodes x tasks under mpirun, on hosts named by hand
    requeue = Requeue.NONE
    via = "mpirun over ssh on plain machines"
    no_scheduler = "plain machines: no scheduler to ask"
    refusal = (
        "--submit sends the script to Slurm; a --hosts script runs on plain machines",
        "drop --submit and run the script on the first host",
    )

    def __init__(self, hosts: tuple[str, ...], python: str | None = None) -> None:
        self.hosts, self.python = hosts, python

    @staticmethod
    def prepare_render(cfg: Config, host: HostProbe) -> tuple[Config, HostProbe]:
        return common.script_config(
            cfg, host
        )  # Slurm-shaped (nodes x tasks); the plan's kind is hosts

    def dry_run(self, sp: sweep.SweepPlan) -> Request:
        if sp.is_sweep:
            raise PlanError("a plain-machine script runs one job", "render one variant at a time")
        sp = sp.with_requeue(self.requeue)
        plan = sp.plans[0]
        text = render.standalone(
            plan, plan.launcher, python=self.python or plan.python, hosts=self.hosts
        )
        return Request(
            self.kind.name,
            self.via,
            sp,
            JobRoot.new_submission(),
            scripts=(text,),
            commands=(("bash", "<script>"),),
            facts=(("hosts", " ".join(self.hosts)),),
            summary=f"{plan.launcher}, {plan.world_size} ranks on {plan.nodes} host(s)",
            placement=(f"mpirun over ssh on {self.hosts[0]}...",),
        )
