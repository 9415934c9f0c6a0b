"""build_plan(config, host) -> LaunchPlan: what every rank will get. Pure.

The plan is computed once; `--dry-run` prints it, `render` turns it into scripts, the executors and
the rank wrapper (`hpcqa.rank`) consume it. Nothing downstream recomputes what it decided: the plan
crosses into the ranks as one JSON file (`LaunchPlan.from_json` gives the same typed, deep-frozen
value back) and every rank records the plan's digest in its report.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Mapping

from hpcqa import fsutil
from hpcqa.core import command, kinds, ranklayout, threadenv, topology
from hpcqa.core.config import Config, from_dict
from hpcqa.core.folders import JOB_ID, SUBMISSION, root_path
from hpcqa.core.frozen import FrozenDict, freeze
from hpcqa.core.kinds import DDPBackend, Launcher, Requeue
from hpcqa.core.search import TrialRef
from hpcqa.errors import ConfigError, PlanError


def bf16_choice(setting: str | bool, flags: set[str] | frozenset[str]) -> tuple[bool, str]:
    """train.bf16 on a CPU with these /proc/cpuinfo flags -> (autocast bf16?, why). Without AMX or avx512_bf16,
    bf16 = true still runs, emulated and slower than fp32."""
    hw = sorted(set(flags) & {"amx_bf16", "avx512_bf16"})
    if setting in ("true", True):
        return True, "train.bf16 = true" + (
            f" (CPU has {', '.join(hw)})"
            if hw
            else ": no AMX / avx512_bf16 on this CPU, bf16 is emulated (slower than fp32)"
        )
    if setting in ("false", False):
        return False, "train.bf16 = false"
    return (
        (True, f"auto: CPU has {', '.join(hw)}")
        if hw
        else (False, "auto: no AMX / avx512_bf16 on this CPU")
    )


PRELOAD_WANTED = (
    "HPCQA_PRELOAD"  # hpcqa.rank.preload.WANTED: the libraries a rank preloads, by name
)


def preload_wanted(cfg: Config) -> list[str]:
    """The libraries the config asks to preload: its allocator (launch.malloc) and Intel's OpenMP."""
    la = cfg.launch
    return [
        n
        for n in (la.malloc, "iomp" if la.openmp == "iomp" else "")
        if n and n not in ("default", "glibc-heap")
    ]


# launch.malloc = "glibc-heap": glibc keeps every block on its heap (no mmap per big block, so no page faults at each
# allocation of a step's big tensors) and never gives the heap's top back (no re-faulting it). The MALLOC_*_ names are
# glibc's own aliases of its glibc.malloc tunables; another libc ignores them.
GLIBC_HEAP_ENV = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(1 << 40)}


LIB_PACKAGES = {
    "tcmalloc": "apt-get install libgoogle-perftools4 (or conda install gperftools)",
    "jemalloc": "apt-get install libjemalloc2",
    "iomp": "pip install intel-openmp",
}


@dataclass(frozen=True)
class HostProbe:
    """What planning needs to know about the submitting host; `probe_host()` fills it in."""

    schedulers: frozenset[str] = (
        frozenset()
    )  # executor kinds whose scheduler is reachable here: {"slurm"} with sbatch
    ccl_bindings: bool = False
    ipex: bool = False  # intel_extension_for_pytorch importable
    libraries: Mapping[str, str] = field(
        default_factory=FrozenDict
    )  # name -> path, only those found
    python: str = sys.executable
    tuned: Mapping[str, Any] = field(
        default_factory=FrozenDict
    )  # `hpcqa tune` results by shape key
    # MASTER_ADDR / MASTER_PORT set where hpcqa submits: local and Slurm ranks inherit the environment, and the
    # rank's environment wins over the derived values (torchrun's and Lightning's convention)
    inherited: Mapping[str, str] = field(default_factory=FrozenDict)


@dataclass(frozen=True)
class RankPlan:
    rank: int
    node_rank: int
    local_rank: int
    cpus: tuple[int, ...]
    env: Mapping[str, str]


@dataclass(frozen=True)
class LocalRankPlan:
    """What each node's local rank k gets (identical on every node)."""

    local_rank: int
    cpus: tuple[int, ...]
    compute: tuple[int, ...]
    ccl: tuple[int, ...]
    env: Mapping[str, str]


@dataclass(frozen=True)
class Backend:
    requested: DDPBackend
    resolved: DDPBackend  # never AUTO
    reason: str


@dataclass(frozen=True)
class LaunchPlan:
    config: Config
    executor: str  # the executor kind's name (core/kinds.py): slurm | local | k8s
    launcher: Launcher
    backend: Backend
    nodes: int
    ranks_per_node: int
    world_size: int
    cpus_per_task: int
    local_ranks: tuple[LocalRankPlan, ...]
    ranks: tuple[RankPlan, ...]
    deferred_env: Mapping[str, str]  # decided at run time, and by what
    job_dir_pattern: str  # %j = job id
    warnings: tuple[str, ...]
    python: str
    variant: Mapping[str, Any] = field(
        default_factory=FrozenDict
    )  # a sweep task's swept keys -> values
    variant_index: int = 0
    ranks_per_domain: int = 1  # ranks per socket (per NUMA node with rank_domain = "numa")
    layout_source: str = ""  # where ranks_per_domain came from (config, tuned, heuristic)
    requeue: Requeue = (
        Requeue.NONE
    )  # who brings a rank back after a checkpoint on a signal (set by the executor)
    command: tuple[
        str, ...
    ] = ()  # job.command resolved (empty: hpcqa's trainer); no shell ever parses it
    work: Mapping[str, Any] = field(
        default_factory=FrozenDict
    )  # the command's folder: dir, run_in, snapshot, named
    trial: TrialRef | None = None  # a search's trial: its number, study and pruner

    def slurm_parameters(self) -> dict[str, Any]:
        """The Slurm request, in submitit's parameter names: hpcqa's one writer of #SBATCH lines
        (executors/render.py) turns it into the batch script of a submit, an array or a rendered script."""
        c = self.config.cluster
        params: dict[str, Any] = {
            "job_name": self.config.job.name,
            "nodes": self.nodes,
            "ntasks_per_node": self.ranks_per_node,
            "cpus_per_task": self.cpus_per_task,
            "time": c.time_limit_min,
            "signal_delay_s": c.signal_delay_s,
            # Slurm's binding doesn't know the CCL/compute split: the rank wrapper binds instead.
            # 22.05-23.02 srun doesn't inherit --cpus-per-task from sbatch: pass it again.
            "srun_args": [
                "--cpu-bind=none",
                f"--cpus-per-task={self.cpus_per_task}",
                "--kill-on-bad-exit=1",
            ],
            "stderr_to_stdout": False,
        }
        if c.setup:
            params["setup"] = list(c.setup)
        for key in ("partition", "account", "qos", "constraint"):
            if getattr(c, key):
                params[key] = getattr(c, key)
        if c.mem_gb:
            params["mem"] = f"{c.mem_gb}GB"
        if c.exclusive:
            params["exclusive"] = True
        extra: dict[str, Any] = {"requeue" if c.requeue_on_node_fail else "no_requeue": True}
        for flag in c.sbatch_extra:
            k, eq, v = flag[2:].partition("=")
            extra[k.replace("-", "_")] = v if eq else True
        if extra:
            params["additional_parameters"] = extra
        return params

    def to_json(self, ranks: bool = True) -> dict[str, Any]:
        """The plan as JSON. Every rank is written out for people (the dry run's --json); the stored form
        (`dumps`, the digest) leaves them out: they follow from nodes and local_ranks, and a 512-node plan would
        otherwise grow by a node's worth of ranks per node (a TrainJob or PyTorchJob carries it)."""
        d = {
            "world_size": self.world_size,
            "nodes": self.nodes,
            "ranks_per_node": self.ranks_per_node,
            "executor": self.executor,  # the name users and scripts read (submit --dry-run --json)
            "launcher": self.launcher,
            "backend": asdict(self.backend),
            "cpus_per_task": self.cpus_per_task,
            "hosts": None,
            "deferred_env": dict(self.deferred_env),
            "job_dir": self.job_dir_pattern,
            "warnings": list(self.warnings),
            "local_ranks": [
                {
                    "local_rank": lr.local_rank,
                    "cpus": list(lr.cpus),
                    "compute": list(lr.compute),
                    "ccl": list(lr.ccl),
                    "env": dict(lr.env),
                }
                for lr in self.local_ranks
            ],
            "ranks": [
                {
                    "rank": r.rank,
                    "node_rank": r.node_rank,
                    "local_rank": r.local_rank,
                    "cpus": list(r.cpus),
                    "env": dict(r.env),
                }
                for r in self.ranks
            ],
            "config": self.config.to_dict(),
            "source": self.config.source,
            "python": self.python,
            "variant": dict(self.variant),
            "variant_index": self.variant_index,
            "ranks_per_domain": self.ranks_per_domain,
            "layout_source": self.layout_source,
            "requeue": str(self.requeue),
            "command": list(self.command),
            "work": dict(self.work),
        }
        if self.trial is not None:  # absent otherwise: a plan of today keeps its digest
            d["trial"] = self.trial.to_json()
        if not ranks:
            del d["ranks"]
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "LaunchPlan":
        """The typed plan back from `to_json()` output (the config is validated again on the way)."""
        return cls(
            config=from_dict(d["config"], source=d.get("source", "")),
            executor=kinds.named(d["executor"]).name,
            launcher=Launcher(d["launcher"]),
            backend=Backend(
                DDPBackend(d["backend"]["requested"]),
                DDPBackend(d["backend"]["resolved"]),
                d["backend"]["reason"],
            ),
            nodes=d["nodes"],
            ranks_per_node=d["ranks_per_node"],
            world_size=d["world_size"],
            cpus_per_task=d["cpus_per_task"],
            local_ranks=tuple(
                LocalRankPlan(
                    lr["local_rank"],
                    tuple(lr["cpus"]),
                    tuple(lr["compute"]),
                    tuple(lr["ccl"]),
                    FrozenDict(lr["env"]),
                )
                for lr in d["local_ranks"]
            ),
            ranks=(),
            deferred_env=FrozenDict(d["deferred_env"]),
            job_dir_pattern=d["job_dir"],
            warnings=tuple(d["warnings"]),
            python=d["python"],
            variant=freeze(d.get("variant") or {}),
            variant_index=d.get("variant_index", 0),
            ranks_per_domain=d.get("ranks_per_domain", 1),
            layout_source=d.get("layout_source", ""),
            requeue=Requeue(d.get("requeue", Requeue.NONE)),
            command=tuple(d.get("command") or ()),
            work=freeze(d.get("work") or {}),
            trial=TrialRef.from_json(d.get("trial")),
        ).with_global_ranks()

    @classmethod
    def loads(cls, text: str) -> "LaunchPlan":
        return cls.from_json(json.loads(text))

    def dumps(self) -> str:
        return self._text

    @functools.cached_property
    def _text(self) -> str:  # a frozen value: its JSON (and so its digest) is computed once
        return json.dumps(self.to_json(ranks=False), sort_keys=True)

    @functools.cached_property
    def digest(self) -> str:
        """Content hash of the plan: names its file, and every rank's report records it."""
        return hashlib.sha256(self.dumps().encode()).hexdigest()[:16]

    def with_global_ranks(self) -> "LaunchPlan":
        return replace(self, ranks=_global_ranks(self.nodes, self.local_ranks))

    def with_variant(self, index: int, params: Mapping[str, Any]) -> "LaunchPlan":
        return replace(self, variant=freeze(dict(params)), variant_index=index)

    def with_trial(self, trial: TrialRef) -> "LaunchPlan":
        return replace(self, trial=trial)

    def with_work(self, **work: Any) -> "LaunchPlan":
        """The plan with what the executor decided about the command's folder (its snapshot, the files named)."""
        return self if not self.command else replace(self, work=freeze({**self.work, **work}))

    def with_requeue(self, requeue: Requeue) -> "LaunchPlan":
        """The plan as the executor that submits it hands it to the ranks: who requeues a stopped rank."""
        return self if self.requeue is requeue else replace(self, requeue=requeue)

    @property
    def pool_variables(self) -> tuple[bool, bool]:
        """(CCL worker variables, I_MPI_PIN_DOMAIN) for every rank's pool: see pool_variables()."""
        return pool_variables(self.backend.resolved, self.launcher)

    @property
    def executor_kind(self) -> type[kinds.ExecutorKind]:
        return kinds.named(self.executor)


def resolve_backend(requested: str, ccl_bindings: bool) -> Backend:
    asked = DDPBackend(requested)
    if asked is DDPBackend.GLOO:
        return Backend(asked, DDPBackend.GLOO, "requested")
    if asked is DDPBackend.CCL:
        reason = (
            "requested"
            if ccl_bindings
            else (
                "requested; oneccl_bindings_for_pytorch is NOT importable here: ranks will stop at "
                "start-up unless the compute nodes have it"
            )
        )
        return Backend(asked, DDPBackend.CCL, reason)
    if ccl_bindings:
        return Backend(asked, DDPBackend.CCL, "auto: oneccl_bindings_for_pytorch is importable")
    return Backend(
        asked,
        DDPBackend.GLOO,
        "auto: oneccl_bindings_for_pytorch is not installed (current "
        "transformers/accelerate run CPU DDP over gloo)",
    )


def pool_variables(backend: DDPBackend, launcher: Launcher) -> tuple[bool, bool]:
    """Which of a pool's variables a rank gets: (CCL worker variables, I_MPI_PIN_DOMAIN). ccl reads both; Intel
    MPI's hydra (the mpirun launcher) reads the pin domain. The plan applies it to the declared pools, the rank
    wrapper to the pool it observes (LaunchPlan.pool_variables), so both decide alike."""
    ccl = backend is DDPBackend.CCL
    return ccl, ccl or launcher.is_intel_mpi


def rank_static_env(
    cfg: Config,
    pool: topology.Pool,
    pools: list[topology.Pool],
    backend: DDPBackend,
    launcher: Launcher,
) -> dict[str, str]:
    """Environment of one local rank that does not depend on the allocation."""
    la = cfg.launch
    ccl, pin_domain = pool_variables(backend, launcher)
    env = threadenv.pool_env(la, pool, pools, ccl=ccl, pin_domain=pin_domain)
    wanted = preload_wanted(cfg)
    if wanted:  # names, not paths: each rank finds them on its node (hpcqa.rank.preload)
        env[PRELOAD_WANTED] = ":".join(wanted)
    if la.malloc == "glibc-heap":
        env.update(GLIBC_HEAP_ENV)
    env.update(la.env)
    return env


def _fits(kind: type[kinds.ExecutorKind], cfg: Config) -> None:
    """ConfigError when the kind runs on fewer nodes than cluster.nodes asks for."""
    if kind.max_nodes == 1 and cfg.cluster.nodes > 1:
        raise ConfigError(
            "cluster.nodes",
            f"the {kind.name} executor runs on one node, not {cfg.cluster.nodes}",
            "set cluster.nodes = 1 for a local run, or run where Slurm is installed",
            cfg.source,
        )


def build_plan(
    cfg: Config,
    host: HostProbe,
    launcher: str | None = None,
    via_submitit: bool = False,
    executor: str | None = None,
) -> LaunchPlan:
    """The frozen plan. `launcher`: a rendered script's (default: launch.launcher); `via_submitit`: submitit
    starts the ranks (a sweep's arrays, or any srun job of `submit`), which under Slurm means srun; `executor`:
    a kind no config names (plain hosts: `render --hosts`), else cluster.executor's."""
    c, la = cfg.cluster, cfg.launch
    kind = kinds.named(executor) if executor else kinds.resolve(c.executor, host, launcher)
    _fits(kind, cfg)
    launcher = (
        Launcher(launcher) if launcher else kind.launcher(Launcher(la.launcher), via_submitit)
    )
    backend = resolve_backend(cfg.train.ddp_backend, host.ccl_bindings)
    rpd, layout_source = ranklayout.ranks_per_domain(cfg, {} if cfg.job.command else host.tuned)
    workers = _ccl_workers(cfg, backend, rpd)
    ranks_per_node = cfg.domains_per_node * rpd
    pools = ranklayout.declared_pools(cfg, rpd, workers)
    local_ranks = tuple(
        LocalRankPlan(
            local_rank=p.local_rank,
            cpus=p.cpus if la.bind else (),
            compute=p.compute,
            ccl=p.ccl,
            env=FrozenDict(rank_static_env(cfg, p, pools, backend.resolved, launcher)),
        )
        for p in pools
    )
    return LaunchPlan(
        config=cfg,
        executor=kind.name,
        launcher=launcher,
        backend=backend,
        nodes=c.nodes,
        ranks_per_node=ranks_per_node,
        world_size=c.nodes * ranks_per_node,
        cpus_per_task=cfg.cores_per_domain // rpd * c.threads_per_core,
        local_ranks=local_ranks,
        ranks=_global_ranks(c.nodes, local_ranks),
        deferred_env=FrozenDict(_deferred_env(kind, la.master_port, inherited(kind, host))),
        job_dir_pattern=os.path.join(
            root_path(cfg.job.output_dir, cfg.job.name), f"{JOB_ID}-{SUBMISSION}"
        ),
        warnings=(
            _warnings(cfg, host, backend, pools)
            + _inherited_warning(kind, host)
            + _launcher_warning(kind, launcher, Launcher(la.launcher), via_submitit)
        ),
        python=c.python or host.python,
        ranks_per_domain=rpd,
        layout_source=layout_source,
        **_command(cfg, kind, c.python or host.python),
    )


def _ccl_workers(cfg: Config, backend: Backend, rpd: int) -> int:
    """The oneCCL worker threads each rank reserves cores for (0 unless the backend is ccl), checked against the
    cores a rank has."""
    la = cfg.launch
    workers = la.ccl_workers if backend.resolved is DDPBackend.CCL else 0
    if backend.resolved is DDPBackend.CCL and not workers:
        raise ConfigError(
            "launch.ccl_workers",
            "0: the ccl backend needs at least one oneCCL worker thread per rank "
            "(CCL_WORKER_COUNT), and its cores",
            'set launch.ccl_workers = 1 (or more), or train.ddp_backend = "gloo"',
            cfg.source,
        )
    if workers >= cfg.cores_per_domain // rpd:
        raise ConfigError(
            "launch.ccl_workers",
            f"{workers} CCL workers leave no compute core for {rpd} ranks on a "
            f"{cfg.cores_per_domain}-core {la.rank_domain}",
            "lower launch.ccl_workers or launch.ranks_per_socket",
            cfg.source,
        )
    return workers


def _command(cfg: Config, kind: type[kinds.ExecutorKind], python: str) -> dict[str, Any]:
    """job.command as the ranks run it, and the folder it runs in (a pod's: the image's, unless job.workdir says)."""
    if not cfg.job.command:
        return {}
    argv = command.resolve(cfg.job.command, cfg.to_dict(), python, cfg.source)
    folder = os.path.abspath(cfg.job.workdir or ".") if kind.sees_submit_files else cfg.job.workdir
    return {
        "command": argv,
        "work": FrozenDict(
            {
                "dir": folder,
                "run_in": folder,
                "snapshot": "",
                "named": {},
                "job_paths": tuple(command.templates(cfg.job.command)),
            }
        ),
    }


def _global_ranks(nodes: int, local_ranks: tuple[LocalRankPlan, ...]) -> tuple[RankPlan, ...]:
    per_node, world = len(local_ranks), nodes * len(local_ranks)
    ranks = []
    for node in range(nodes):
        for lr in local_ranks:
            rank = node * per_node + lr.local_rank
            env = {
                "RANK": str(rank),
                "WORLD_SIZE": str(world),
                "LOCAL_RANK": str(lr.local_rank),
                "LOCAL_WORLD_SIZE": str(per_node),
                "NODE_RANK": str(node),
                "GROUP_RANK": str(node),
                "GROUP_WORLD_SIZE": str(nodes),
                "ROLE_RANK": str(rank),
                "ROLE_WORLD_SIZE": str(world),
                "ROLE_NAME": "default",
                **lr.env,
            }
            ranks.append(
                RankPlan(
                    rank=rank,
                    node_rank=node,
                    local_rank=lr.local_rank,
                    cpus=lr.cpus,
                    env=FrozenDict(env),
                )
            )
    return tuple(ranks)


def inherited(kind: type[kinds.ExecutorKind], host: HostProbe) -> dict[str, str]:
    """The rendezvous variables the ranks will inherit from the submitting environment (local and Slurm jobs)."""
    return dict(host.inherited) if kind.inherits_submitting_env else {}


def _inherited_warning(kind: type[kinds.ExecutorKind], host: HostProbe) -> tuple[str, ...]:
    got = inherited(kind, host)
    if not got:
        return ()
    text = " and ".join(f"{k}={v}" for k, v in sorted(got.items()))
    return (
        f"{text} is set where you submit: the ranks inherit it and meet there, not where hpcqa would put them "
        f"(unset {' '.join(sorted(got))} before submitting, unless you mean it)",
    )


def _deferred_env(
    kind: type[kinds.ExecutorKind], fixed_port: int, given: Mapping[str, str] | None = None
) -> dict[str, str]:
    """What is decided at run time, and by what. `given`: values the ranks inherit from the submitting
    environment, which win."""
    out = kind.derived_env(fixed_port)
    for name, value in (given or {}).items():
        out[name] = f"{value} (from the submitting environment)"
    return out


def _launcher_warning(
    kind: type[kinds.ExecutorKind], launcher: Launcher, asked: Launcher, via_submitit: bool
) -> tuple[str, ...]:
    if via_submitit and asked in kind.launchers and launcher is not asked:
        return (
            f'launch.launcher = "{asked}": a sweep\'s arrays start their ranks through submitit with {launcher} '
            "(hydra's own srun, nested in a step that already holds every CPU, would wait for CPUs that never "
            "free up); a single job runs the rendered mpirun script",
        )
    return ()


def extension_warnings(cfg: Config, host: HostProbe, backend: Backend | None = None) -> list[str]:
    """The Intel extensions the config asks for that this host cannot import (validate, dry run, doctor)."""
    backend = backend or resolve_backend(cfg.train.ddp_backend, host.ccl_bindings)
    out = []
    if backend.resolved is DDPBackend.CCL and not host.ccl_bindings:
        out.append(f"ddp backend ccl: {backend.reason}")
    if cfg.train.ipex and not host.ipex:
        out.append(
            "train.ipex = true: intel_extension_for_pytorch is not importable here; the ranks continue "
            "without it unless the nodes have it (IPEX's last release, 2.8, needs torch 2.8)"
        )
    return out


def _warnings(
    cfg: Config, host: HostProbe, backend: Backend, pools: list[topology.Pool]
) -> tuple[str, ...]:
    la = cfg.launch
    out = extension_warnings(cfg, host, backend)
    if la.ccl_workers and backend.resolved is not DDPBackend.CCL:
        out.append(
            f"launch.ccl_workers={la.ccl_workers} not reserved: backend is "
            f"{backend.resolved}, no CCL worker threads run, all cores compute"
        )
    for name in preload_wanted(cfg):
        if name not in host.libraries:
            out.append(
                f"{name} not found on this host; each rank looks for it on its node and runs without it "
                f"where it is missing (install: {LIB_PACKAGES[name]})"
            )
    if not la.bind:
        out.append("launch.bind = false: ranks are not pinned; expect oversubscription")
    if la.omp_num_threads and la.omp_num_threads > len(pools[0].compute):
        out.append(
            f"launch.omp_num_threads={la.omp_num_threads} exceeds the "
            f"{len(pools[0].compute)} compute cores per rank: oversubscribed"
        )
    return tuple(out)


MAX_PLAN_BYTES = 16 << 20  # a plan of 65,536 ranks is a few MB


def load(path: str | os.PathLike) -> LaunchPlan:
    """A plan file written by an executor (a request's files) or a rendered script, typed and checked."""

    try:
        text = fsutil.read_text(path, MAX_PLAN_BYTES, follow=True)
    except OSError as e:
        raise PlanError(
            f"cannot read plan {str(path)!r}: {e.strerror or e}",
            "submit through hpcqa (it writes the plan before any rank starts)",
        ) from None
    try:
        return LaunchPlan.loads(text)
    except (ValueError, KeyError, TypeError) as e:
        raise PlanError(
            f"cannot read plan {str(path)!r}: not a launch plan of this hpcqa version "
            f"({type(e).__name__}: {e})",
            "re-submit, or re-render the script",
        ) from None
