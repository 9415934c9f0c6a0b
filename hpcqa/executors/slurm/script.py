"""Slurm with a rendered script: the srun or mpirun sbatch script of sbatch_templates/, submitted as it is.

`submit` takes this path for launch.launcher = "mpirun" (mpirun runs in the batch shell, where hydra's slurm
bootstrap starts its per-node proxies with srun; inside a submitit step, which already holds every CPU, that
srun would wait for CPUs forever), and `render --submit` for either launcher. The script is written next to
the plans (content-addressed), sbatched, registered (folder <cluster>-<job id>, which the script computes the
same way) and followed like any Slurm job.
"""

from __future__ import annotations

from pathlib import Path

from hpcqa.core import kinds, sweep
from hpcqa.core.config import Config
from hpcqa.core.kinds import Requeue
from hpcqa.core.plan import HostProbe
from hpcqa.errors import PlanError
from hpcqa.executors import common, render, snapshot
from hpcqa.executors.interface import File, Outcome, Progress, Request, Say, Submitted, silent
from hpcqa.executors.slurm.cli import Slurm
from hpcqa.executors.slurm.executor import follow, test_only
from hpcqa.record.jobdir import JobDir, JobRoot


class ScriptSlurm:
    kind = kinds.SlurmKind
    requeue = Requeue.SCRIPT
    via = "a rendered script under sbatch"
    runs_here = False
    scheduler = "Slurm"

    def __init__(
        self, python: str | None = None, slurm: Slurm | None = None, snapshot: bool = False
    ) -> None:
        self.python = python
        self.slurm = slurm or Slurm()
        self.snapshot = snapshot  # `submit` (mpirun): the ranks import a snapshot; `render`: the installed hpcqa

    def dry_run(self, sp: sweep.SweepPlan) -> Request:
        if sp.is_sweep:
            raise PlanError(
                "a sweep runs as Slurm job arrays through submitit, not as one rendered script",
                "submit the sweep with `hpcqa submit`; render one variant at a time",
            )
        sp, work = common.with_work(sp.with_requeue(self.requeue), self.snapshot)
        plan = sp.plans[0]
        root = common.job_root(plan)
        code = snapshot.plan(root) if self.snapshot else None
        python = self.python or plan.python
        text = render.standalone(
            plan, plan.launcher, python=python, code=tuple(code.shell_lines(python)) if code else ()
        )
        path = root.rendered_script(plan.digest, plan.launcher)
        c = plan.config.cluster
        facts = (
            (
                "time / mem",
                f"{c.time_limit_min} min / " + (f"{c.mem_gb} GB" if c.mem_gb else "default"),
            ),
            ("hosts", "unknown until Slurm allocates the job"),
            ("job folder", f"{root.path}/<cluster>-<job id> (computed by the script)"),
            snapshot.fact(code),
            *common.work_facts(sp, work),
        )
        return Request(
            self.kind.name,
            self.via,
            sp,
            JobRoot.new_submission(),
            (File(str(path), text),),
            (text,),
            (("sbatch", "--parsable", f"--output={root.script_output()}", str(path)),),
            facts=facts,
            summary=f"{plan.launcher}, {plan.world_size} ranks on {plan.nodes} node(s)",
            placement=(f"one job, {plan.launcher} in the batch shell",),
            code=code,
            work=work,
        )

    def max_array_size(self) -> tuple[int, str]:
        return 1, "no arrays: one rendered script"

    @staticmethod
    def prepare_render(cfg: Config, host: HostProbe) -> tuple[Config, HostProbe]:
        return common.script_config(cfg, host)

    def check(self, request: Request) -> tuple[bool, str]:
        return test_only(self.slurm, request.scripts[0])

    def submit(self, request: Request, say: Say = silent) -> Submitted:
        plan = request.sweep.plans[0]
        self.slurm.require_controller()
        common.write_files(request)
        if request.code:
            snapshot.write(request.code, say)
        common.write_work(request)
        (command,) = request.commands
        job_id, cluster = self.slurm.sbatch(command)
        jd = common.job_root(plan).script_job(cluster or self.slurm.cluster_name(), job_id)
        common.register(plan, [common.registry_row(request.sweep, plan, job_id, jd.path, None)])
        say(
            f"submitted Slurm job {job_id}: {plan.world_size} ranks on {plan.nodes} node(s) by {plan.launcher} "
            f"({command[-1]}); folder {jd.path}"
        )
        return Submitted(request, (job_id,), None, (str(jd.path),))

    def wait(self, submitted: Submitted, progress: Progress | None = None) -> Outcome:
        return follow(self.slurm, submitted.ids[0], JobDir(Path(submitted.folders[0])), progress)
