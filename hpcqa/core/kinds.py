"""Where a plan runs: each executor kind's identity, in one vocabulary from the config to the registry.

    name    cluster.executor   applies (affinity)            launchers         MASTER_ADDR / MASTER_PORT
    local   local, auto        always (1)                    local             127.0.0.1 / from the job id
    slurm   slurm, auto        where `sbatch` is found (2)   srun, mpirun      first host of the nodelist / job id
    k8s     (render only)      never chosen by "auto"        trainjob,         the DNS name of pod 0 / 29500 (TrainJob),
                                                             pytorchjob        23456 (PyTorchJob)

`cluster.executor = "auto"` takes the executor kind of highest affinity on the submitting host, as submitit's
AutoExecutor does. The name is what the plan, the registry, `status` and the dry run say; the executors'
table (executors/table.py) maps (executor, launcher, mode) to the class that submits or renders, and each of
those classes says which executor kind it serves. Who brings a rank back after it checkpointed on a signal is the
plan's `requeue` (a `Requeue`), stamped by the executor that makes the request: the rank reads it from its plan.
Pure: no I/O.
"""

from __future__ import annotations

from enum import IntEnum, StrEnum
from typing import ClassVar, Protocol

from hpcqa.errors import PlanError


class SubmitHost(Protocol):
    """What affinity reads of the submitting host (core/plan.py's HostProbe)."""

    @property
    def schedulers(self) -> frozenset[str]:
        """The executor kinds whose scheduler can be asked from here (its submit command found)."""
        ...


AUTO = "auto"  # cluster.executor: the executor kind of highest affinity here


class Launcher(StrEnum):
    """How a plan's ranks are started."""

    SRUN = "srun"  # Slurm's srun (submitit's, or a rendered script's)
    MPIRUN = "mpirun"  # Intel MPI's hydra (in a batch shell, or over ssh on plain machines)
    LOCAL = "local"  # submitit's local controller, one process per rank
    PYTORCHJOB = "pytorchjob"  # the training operator starts one pod per node; the pod script starts the ranks
    TRAINJOB = "trainjob"  # Kubeflow Trainer v2 (JobSet) starts one pod per node; the pod script starts the ranks

    @property
    def is_intel_mpi(self) -> bool:
        """hydra reads I_MPI_PIN_DOMAIN, so the plan sets it for this launcher (and for ccl, which reads it too)."""
        return self is Launcher.MPIRUN


# `hpcqa render --kind`: what render writes
RENDER_SCRIPT, RENDER_TRAINJOB, RENDER_PYTORCHJOB = "script", "trainjob", "pytorchjob"
RENDER_TRAININGRUNTIME = (
    "trainingruntime"  # the TrainJob's runtime: applied (and admitted) before the job
)
RENDER_STAGE_JOB, RENDER_DOCKERFILE = "stage-job", "dockerfile"
RENDER_KINDS = (
    RENDER_SCRIPT,
    RENDER_TRAINJOB,
    RENDER_TRAININGRUNTIME,
    RENDER_PYTORCHJOB,
    RENDER_STAGE_JOB,
    RENDER_DOCKERFILE,
)

# launch.launcher: the launchers a config may name (the others are the executors' own)
SCRIPT_LAUNCHERS = (Launcher.SRUN.value, Launcher.MPIRUN.value)


class DDPBackend(StrEnum):
    """The torch.distributed backend: train.ddp_backend asks, the plan resolves, the rank checks."""

    AUTO = "auto"  # ccl where the oneCCL bindings import, else gloo
    GLOO = "gloo"
    CCL = "ccl"


DDP_BACKENDS = tuple(b.value for b in DDPBackend)  # train.ddp_backend's choices


class Requeue(StrEnum):
    """Who brings a rank back after it saved a checkpoint on the requeue signal (the plan's `requeue`)."""

    NONE = "none"  # nothing (plain machines): the rank ends after its checkpoint
    SUBMITIT = (
        "submitit"  # submitit's handler on global rank 0 (`scontrol requeue`); the local controller
    )
    SCRIPT = "script"  # the rendered batch script, after its step ended (the rank asks in the job folder)
    POD = "pod"  # the training operator restarts the pod: the rank exits with the "stopped" code

    @property
    def by_the_job_script(self) -> bool:
        """The rank leaves a requeue request in the job folder and returns; the script (or the operator) acts."""
        return self in (Requeue.SCRIPT, Requeue.POD)


class PodExit(IntEnum):
    """A PyTorchJob rank's exit codes, read by the operator's ExitCode restart policy (>= 128: recreate the pod;
    1-127: fail the job): a checkpointed stop and a lost peer are retried, a crash is not."""

    STOPPED = 143  # a rank that checkpointed on a signal (128 + SIGTERM)
    LOST_PEER = (
        200  # a rank that failed because a peer went away (another pod evicted, a node lost)
    )
    RESTARTS_SPENT = 3  # the pod script: k8s.max_restarts job restarts used up


class ExecutorKind:
    """One kind of place a plan runs. Subclasses are used as values (never instantiated)."""

    name: ClassVar[str]
    launchers: ClassVar[tuple[Launcher, ...]]
    max_nodes: ClassVar[int | None] = None  # None: as many as the config asks
    configurable: ClassVar[bool] = True  # may be named in cluster.executor
    inherits_submitting_env: ClassVar[bool] = (
        True  # the ranks inherit the submitting shell's environment
    )
    sees_submit_files: ClassVar[bool] = (
        True  # the ranks see the submitting host's files (a shared filesystem)
    )

    @classmethod
    def affinity(cls, host: SubmitHost) -> int:
        """How well this executor kind fits the submitting host for cluster.executor = "auto" (-1: not at all)."""
        raise NotImplementedError

    @classmethod
    def launcher(cls, requested: Launcher, via_submitit: bool) -> Launcher:
        """The launcher this executor kind uses when the config asks for `requested`."""
        return requested if requested in cls.launchers else cls.launchers[0]

    @classmethod
    def derived_env(cls, fixed_port: int) -> dict[str, str]:
        """MASTER_ADDR and MASTER_PORT: what decides them at run time (the dry run shows this)."""
        raise NotImplementedError


class LocalKind(ExecutorKind):
    name = "local"
    launchers = (Launcher.LOCAL,)
    max_nodes = 1

    @classmethod
    def affinity(cls, host: SubmitHost) -> int:
        return 1

    @classmethod
    def derived_env(cls, fixed_port: int) -> dict[str, str]:
        return {
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(fixed_port)
            if fixed_port
            else "derived from the local job id at start (10000-32767)",
        }


class SlurmKind(ExecutorKind):
    name = "slurm"
    launchers = (Launcher.SRUN, Launcher.MPIRUN)

    @classmethod
    def affinity(cls, host: SubmitHost) -> int:
        return 2 if cls.name in host.schedulers else -1

    @classmethod
    def launcher(cls, requested: Launcher, via_submitit: bool) -> Launcher:
        # submitit starts its ranks with srun (a sweep's arrays, a srun job of `submit`)
        return Launcher.SRUN if via_submitit else super().launcher(requested, via_submitit)

    @classmethod
    def derived_env(cls, fixed_port: int) -> dict[str, str]:
        return {
            "MASTER_ADDR": "first host of SLURM_JOB_NODELIST (unknown until allocation)",
            "MASTER_PORT": str(fixed_port)
            if fixed_port
            else "derived from SLURM_JOB_ID at start (10000-32767, distinct per array task)",
        }


class HostsKind(ExecutorKind):
    """Plain machines named by hand (`render --hosts` / `--hostfile`): mpirun over ssh, no scheduler."""

    name = "hosts"
    launchers = (Launcher.MPIRUN,)
    configurable = False  # `hpcqa render --hosts ...`, whatever cluster.executor says

    @classmethod
    def affinity(cls, host: SubmitHost) -> int:
        return -1

    @classmethod
    def derived_env(cls, fixed_port: int) -> dict[str, str]:
        return {
            "MASTER_ADDR": "the first host of --hosts / --hostfile",
            "MASTER_PORT": str(fixed_port)
            if fixed_port
            else "derived from the script's process id at start (10000-32767)",
        }


class K8sKind(ExecutorKind):
    name = "k8s"
    launchers = (Launcher.TRAINJOB, Launcher.PYTORCHJOB)
    configurable = (
        False  # `hpcqa render --kind trainjob|pytorchjob`, whatever cluster.executor says
    )
    inherits_submitting_env = False
    sees_submit_files = False  # pods see their image and the volume

    @classmethod
    def affinity(cls, host: SubmitHost) -> int:
        return -1

    @classmethod
    def derived_env(cls, fixed_port: int) -> dict[str, str]:
        return {
            "MASTER_ADDR": "the DNS name of pod 0: TrainJob <job>-node-0-0.<job> (PET_MASTER_ADDR); "
            "PyTorchJob <job>-worker-0",
            "MASTER_PORT": "TrainJob 29500 (PET_MASTER_PORT); PyTorchJob 23456 (pytorchjob-port)",
        }


KINDS: tuple[type[ExecutorKind], ...] = (LocalKind, SlurmKind, HostsKind, K8sKind)
CONFIG_CHOICES = (AUTO, *(t.name for t in KINDS if t.configurable))


def named(name: str) -> type[ExecutorKind]:
    """The executor kind a plan or a registry row names."""
    for t in KINDS:
        if t.name == name:
            return t
    raise PlanError(
        f"unknown executor {name!r} (this hpcqa knows {', '.join(t.name for t in KINDS)})",
        "use the hpcqa version that wrote it",
    )


def resolve(choice: str, host: SubmitHost, launcher: str | None = None) -> type[ExecutorKind]:
    """cluster.executor (or a render's launcher) -> the executor kind. A launcher only one kind has picks it
    (pytorchjob: Kubernetes); "auto" takes the highest affinity here."""
    if launcher:
        owners = [t for t in KINDS if launcher in t.launchers]
        if len(owners) == 1 and not owners[0].configurable:
            return owners[0]
    if choice == AUTO:
        return max((t for t in KINDS if t.configurable), key=lambda t: t.affinity(host))
    return named(choice)


def max_nodes(choice: str) -> int | None:
    """The most nodes cluster.executor = `choice` can run on (None: no limit; "auto": decided later)."""
    return None if choice == AUTO else named(choice).max_nodes
