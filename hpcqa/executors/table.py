"""The one table that says which executor runs a plan, and which job verbs a registry row gets.

    plan.executor  plan.launcher  mode      executor (module)
    local          local          submit    Local           (local.py)     submitit's LocalExecutor on this machine
    slurm          srun           submit    SubmititSlurm   (slurm.py)     sbatch of hpcqa's text, submitit's runtime
    slurm          mpirun         submit    ScriptSlurm     (script.py)    the rendered mpirun script under sbatch
    slurm          srun|mpirun    script    ScriptSlurm     (script.py)    `render` (and `render --submit`)
    slurm          mpirun         hosts     Hosts           (hosts.py)     `render --hosts`: plain machines, render only
    k8s            pytorchjob     script    PyTorchJobRender (k8s.py)      `render --target pytorchjob`, render only

Job verbs by the registry row's executor: local -> LocalJobs, slurm -> SlurmJobs (submitit and script jobs alike).
Everything that needs an executor asks here: the CLI, the API, sweeps, `tune`, `doctor`, `status`, `cancel`.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from hpcqa.core.plan import LaunchPlan
from hpcqa.core.sweep import SweepPlan
from hpcqa.errors import PlanError
from hpcqa.executors import hosts as plain, k8s, local, script
from hpcqa.executors import slurm as submitit_slurm
from hpcqa.executors.interface import Executor, JobVerbs
from hpcqa.executors.slurmcli import Slurm

MODES = ("submit", "script", "hosts")

EXECUTORS: Mapping[tuple[str, str, str], Callable[..., Executor]] = {
    ("local", "local", "submit"): lambda snapshot=True, **o: local.Local(snapshot),
    ("slurm", "srun", "submit"): lambda slurm=None, snapshot=True, **o: submitit_slurm.SubmititSlurm(slurm, snapshot),
    ("slurm", "mpirun", "submit"): lambda slurm=None, python=None, snapshot=True, **o: script.ScriptSlurm(python, slurm,
                                                                                                        snapshot),
    ("slurm", "srun", "script"): lambda slurm=None, python=None, **o: script.ScriptSlurm(python, slurm),
    ("slurm", "mpirun", "script"): lambda slurm=None, python=None, **o: script.ScriptSlurm(python, slurm),
    ("slurm", "mpirun", "hosts"): lambda hosts=(), python=None, **o: plain.Hosts(hosts, python),
    ("k8s", "pytorchjob", "script"): lambda **o: k8s.PyTorchJobRender(),
}

VERBS: Mapping[str, Callable[[Slurm | None], JobVerbs]] = {
    "local": lambda s: local.LocalJobs(),
    "slurm": lambda s: submitit_slurm.SlurmJobs(s),
}


def choose(plan: LaunchPlan, mode: str = "submit", **options: Any) -> Executor:
    """The executor for this plan: `mode` is submit (hpcqa submit, the API, sweeps, tune), script (render) or
    hosts (render --hosts); options: python (the nodes' interpreter for scripts), hosts, slurm (a Slurm), snapshot
    (submit: the ranks import a snapshot of hpcqa, not the live tree; default True)."""
    key = (plan.executor, plan.launcher, mode)
    if key not in EXECUTORS:
        raise PlanError(f"no executor runs a {plan.executor} plan with launcher {plan.launcher} ({mode})",
                        "render it (hpcqa render) or change cluster.executor / launch.launcher")
    return EXECUTORS[key](**options)


def supports(executor: str, launcher: str, mode: str) -> bool:
    return (executor, launcher, mode) in EXECUTORS


def for_sweep(sp: SweepPlan, mode: str = "submit", **options: Any) -> Executor:
    return choose(sp.plans[0], mode, **options)


def verbs(executor: str, slurm_: Slurm | None = None) -> JobVerbs:
    """The job verbs of a registry row's executor."""
    if executor not in VERBS:
        raise PlanError(f"the registry names an executor this hpcqa does not know: {executor!r}",
                        "use the hpcqa version that submitted the job")
    return VERBS[executor](slurm_)


def by_executor(rows: Sequence[Any]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for r in rows:
        out.setdefault(r.executor, []).append(r)
    return out


def max_array_size(plan: LaunchPlan) -> tuple[int, str]:
    """How many tasks one array may hold where this plan runs, and how that is known (Slurm: MaxArraySize;
    local: no arrays)."""
    ex = choose(plan)
    return ex.max_array_size() if hasattr(ex, "max_array_size") else (1, "no arrays")
