"""The one table that says which executor runs a plan, and which job verbs a registry row gets.

    plan.executor  plan.launcher  mode      executor (module)
    local        local          submit    Local           (local.py)     submitit's LocalExecutor on this machine
    slurm        srun           submit    SubmititSlurm   (slurm.py)     sbatch of hpcqa's text, submitit's runtime
    slurm        mpirun         submit    ScriptSlurm     (script.py)    the rendered mpirun script under sbatch
    slurm        srun|mpirun    script    ScriptSlurm     (script.py)    `render` (and `render --submit`)
    slurm        mpirun         hosts     Hosts           (hosts.py)     `render --hosts`: plain machines, render only
    k8s          trainjob       script    TrainJobRender (k8s/trainjob.py) `render --kind trainjob`, render only
    k8s          pytorchjob     script    PyTorchJobRender (k8s/pytorchjob.py) `render --kind pytorchjob`, render only

The executor kinds (their names, when each applies, their launchers: core/kinds.py) are the vocabulary; each executor
class says which executor kind it serves, who requeues its stopped ranks and what it makes of a config it renders.
Job verbs by the registry row's executor: local -> LocalJobs, slurm -> SlurmJobs (submitit and script jobs alike).
Everything that needs an executor asks here: the CLI, the API, sweeps, `tune`, `doctor`, `status`, `cancel`.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any, Mapping, Protocol, Sequence, TypeVar

from hpcqa.core import kinds
from hpcqa.core import plan as planmod
from hpcqa.core.config import Config
from hpcqa.core.kinds import Launcher
from hpcqa.core.plan import HostProbe, LaunchPlan
from hpcqa.core.sweep import SweepPlan
from hpcqa.errors import PlanError
from hpcqa.executors.interface import Executor, JobVerbs, Renders
from hpcqa.executors.slurm.cli import Slurm

SUBMIT, SCRIPT, HOSTS = (
    "submit",
    "script",
    "hosts",
)  # how a plan is handed on: submitted, rendered, for plain hosts
MODES = (SUBMIT, SCRIPT, HOSTS)
LOCAL, SLURM, K8S = kinds.LocalKind.name, kinds.SlurmKind.name, kinds.K8sKind.name
HOSTS_KIND = kinds.HostsKind.name
RENDER_SCRIPT, RENDER_PYTORCHJOB, RENDER_DOCKERFILE = (
    kinds.RENDER_SCRIPT,
    kinds.RENDER_PYTORCHJOB,
    kinds.RENDER_DOCKERFILE,
)
RENDER_TRAINJOB, RENDER_STAGE_JOB = kinds.RENDER_TRAINJOB, kinds.RENDER_STAGE_JOB
RENDER_TRAININGRUNTIME = kinds.RENDER_TRAININGRUNTIME
RENDER_K8S = {
    RENDER_TRAINJOB: Launcher.TRAINJOB,
    RENDER_TRAININGRUNTIME: Launcher.TRAINJOB,
    RENDER_PYTORCHJOB: Launcher.PYTORCHJOB,
}

# (executor, launcher, mode) -> ("module:Class" under hpcqa/executors, the options its constructor takes, in order).
# Named, not imported: a verb imports only the executor it uses (`status` of a local job never loads submitit's
# Slurm executor or the Kubernetes models).
EXECUTORS: Mapping[tuple[str, Launcher, str], tuple[str, tuple[str, ...]]] = {
    (LOCAL, Launcher.LOCAL, SUBMIT): ("local.executor:Local", ("snapshot",)),
    (SLURM, Launcher.SRUN, SUBMIT): ("slurm.executor:SubmititSlurm", ("slurm", "snapshot")),
    (SLURM, Launcher.MPIRUN, SUBMIT): ("slurm.script:ScriptSlurm", ("python", "slurm", "snapshot")),
    (SLURM, Launcher.SRUN, SCRIPT): ("slurm.script:ScriptSlurm", ("python", "slurm")),
    (SLURM, Launcher.MPIRUN, SCRIPT): ("slurm.script:ScriptSlurm", ("python", "slurm")),
    (HOSTS_KIND, Launcher.MPIRUN, HOSTS): ("hosts.executor:Hosts", ("hosts", "python")),
    (K8S, Launcher.PYTORCHJOB, SCRIPT): ("k8s.pytorchjob:PyTorchJobRender", ()),
    (K8S, Launcher.TRAINJOB, SCRIPT): ("k8s.trainjob:TrainJobRender", ()),
}
DEFAULTS: Mapping[str, Any] = {"snapshot": True, "slurm": None, "python": None, "hosts": ()}

# a registry row's executor -> its job verbs ("module:Class", constructed with the Slurm runner or nothing)
VERBS: Mapping[str, tuple[str, tuple[str, ...]]] = {
    LOCAL: ("local.executor:LocalJobs", ()),
    SLURM: ("slurm.executor:SlurmJobs", ("slurm",)),
}


def load(ref: str) -> Any:
    """ "module:Name" of hpcqa/executors -> the object, its module imported now."""
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(f"hpcqa.executors.{module}"), name)


def _construct(entry: tuple[str, tuple[str, ...]], options: Mapping[str, Any]) -> Any:
    ref, takes = entry
    return load(ref)(*(options.get(k, DEFAULTS[k]) for k in takes))


def choose(plan: LaunchPlan, mode: str = SUBMIT, **options: Any) -> Executor:
    """The executor for this plan: `mode` is submit (hpcqa submit, the API, sweeps, tune), script (render) or
    hosts (render --hosts); options: python (the nodes' interpreter for scripts), hosts, slurm (a Slurm), snapshot
    (submit: the ranks import a snapshot of hpcqa, not the live tree; default True)."""
    return choose_for(plan.executor, plan.launcher, mode, **options)


def for_sweep(sp: SweepPlan, mode: str = SUBMIT, **options: Any) -> Executor:
    return choose(sp.plans[0], mode, **options)


def renders_for_hosts(launcher: str) -> bool:
    """Can a script for plain machines (render --hosts) start ranks with this launcher?"""
    return (HOSTS_KIND, launcher, HOSTS) in EXECUTORS


def render_config(raw: dict[str, Any]) -> dict[str, Any]:
    """A config as `render` reads it: a rendered script or PyTorchJob is not run by the local executor, whatever
    the config names (a local config with cluster.nodes > 1 is a valid thing to render)."""
    cluster = raw.get("cluster")
    if isinstance(cluster, dict) and cluster.get("executor") in kinds.CONFIG_CHOICES:
        cluster["executor"] = SLURM
    return raw


def render(
    cfg: Config,
    host: HostProbe,
    kind: str,
    launcher: str | None = None,
    hosts: tuple[str, ...] = (),
    python: str | None = None,
) -> tuple[Renders, LaunchPlan]:
    """`hpcqa render --kind KIND`: the executor that renders, and the plan it renders -- the config and host
    as that executor prepares them (a script's interpreter, a pod's image)."""
    if kind in RENDER_K8S:
        launcher = RENDER_K8S[kind]
        ex = choose_for(K8S, launcher, SCRIPT)
    else:
        launcher = Launcher(launcher or cfg.launch.launcher)
        ex = (
            choose_for(HOSTS_KIND, launcher, HOSTS, hosts=hosts, python=python)
            if hosts
            else choose_for(SLURM, launcher, SCRIPT, python=python)
        )
    if not isinstance(ex, Renders):  # every SCRIPT/HOSTS entry of EXECUTORS renders
        raise PlanError(
            f"the executor for {kind} ({launcher}) does not render", "render another --kind"
        )
    cfg, host = ex.prepare_render(cfg, host)
    if python:  # --python is the ranks' interpreter: a command's leading `python` means it too
        host = dataclasses.replace(host, python=python)
    return ex, planmod.build_plan(
        cfg, host, launcher=launcher, executor=HOSTS_KIND if hosts else None
    )


def choose_for(executor: str, launcher: Launcher, mode: str, **options: Any) -> Executor:
    if (executor, launcher, mode) not in EXECUTORS:
        raise PlanError(
            f"no executor runs a {executor} plan with launcher {launcher} ({mode})",
            "render it (hpcqa render) or change cluster.executor / launch.launcher",
        )
    return _construct(EXECUTORS[executor, launcher, mode], options)


def verbs(executor: str, slurm_: Slurm | None = None) -> JobVerbs:
    """The job verbs of a registry row's executor."""
    if executor not in VERBS:
        raise PlanError(
            f"the registry names an executor this hpcqa does not know: {executor!r}",
            "use the hpcqa version that submitted the job",
        )
    return _construct(VERBS[executor], {"slurm": slurm_})


class _Run(Protocol):
    @property
    def executor(self) -> str: ...


R = TypeVar("R", bound=_Run)


def by_executor(rows: Sequence[R]) -> dict[str, list[R]]:
    """Registry rows or status views, by the executor that ran them."""
    out: dict[str, list[R]] = {}
    for r in rows:
        out.setdefault(r.executor, []).append(r)
    return out


def max_array_size(plan: LaunchPlan) -> tuple[int, str]:
    """How many tasks one array may hold where this plan runs, and how that is known (Slurm: MaxArraySize;
    local: its variants run one after another)."""
    return choose(plan).max_array_size()
