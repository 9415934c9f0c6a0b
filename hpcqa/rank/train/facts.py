"""What a rank is and finds out about itself: the Rank the training stages share, its checks of the plan and
the backend, its start-up report, its thread census and resource use, and the digest of its weights."""

from __future__ import annotations

import hashlib
import os
import platform
import resource
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import torch
import transformers

from hpcqa import fsutil
from hpcqa.core import topology
from hpcqa.core.kinds import DDPBackend
from hpcqa.core.plan import GLIBC_HEAP_ENV, Backend, LaunchPlan
from hpcqa.errors import RankError
from hpcqa.rank import binding, preload
from hpcqa.rank.exits import code_provenance
from hpcqa.rank.phase import Phases
from hpcqa.record.jobdir import JobDir
from hpcqa.record.jobfiles import report as reportfile


@dataclass
class Rank:
    """What the stages share: who this rank is and what it has found out so far."""

    plan: LaunchPlan
    jd: JobDir
    report: dict
    log: Callable[[str], None]
    t_start: float = field(default_factory=time.time)
    phases: Phases = field(default_factory=lambda: Phases(None, 0))

    @property
    def rank(self) -> int:
        return self.report["rank"]

    @property
    def world(self) -> int:
        return self.report["world_size"]

    def wall_s(self) -> float:
        """results.json's wall_time_s: seconds since this rank's process started, its imports of torch and
        transformers included (a search's pruned trial of 1.3 s by t_start had run ~7 s; node-hours count it all)."""
        return process_age_s() or time.time() - self.t_start

    def save_report(self, **update: Any) -> None:
        self.report.update(update)
        reportfile.write(self.jd.rank_report(self.rank), self.report)


def cpu_flags() -> set[str]:
    try:
        for line in fsutil.read_kernel(Path("/proc/cpuinfo")).splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def verify_backend(backend: Backend, importer: Callable[[str], Any] = __import__) -> str:
    """The plan decided the backend; check that this rank can honour it. -> what was checked"""
    if backend.resolved is not DDPBackend.CCL:
        return f"{backend.resolved} as planned ({backend.reason})"
    try:
        importer("oneccl_bindings_for_pytorch")
    except Exception as e:  # ImportError, or an ABI mismatch with this torch
        raise RankError(
            f"the plan runs DDP over ccl ({backend.reason}), but oneccl_bindings_for_pytorch does "
            f"not import on {socket.gethostname()} ({type(e).__name__}: {e})",
            "install oneccl_bind_pt built for this torch on the compute nodes, or submit with "
            'train.ddp_backend = "gloo"',
        ) from None
    return f"ccl as planned ({backend.reason}); oneccl_bindings_for_pytorch imported"


def verify_plan(plan: LaunchPlan, env: dict | os._Environ = os.environ) -> None:
    """The wrapper exported the digest of the plan it applied: the trainer must run that very plan."""
    applied = env.get("HPCQA_PLAN_DIGEST")
    if applied and applied != plan.digest:
        raise RankError(
            f"the rank wrapper applied plan {applied}, the trainer was given plan {plan.digest}",
            "submit through hpcqa: the wrapper and the trainer must read the same plan file",
        )


def _versions(torch) -> dict:
    versions = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
    for mod in (
        "accelerate",
        "datasets",
        "intel_extension_for_pytorch",
        "oneccl_bindings_for_pytorch",
    ):
        try:
            versions[mod] = __import__(mod).__version__
        except Exception:
            versions[mod] = None
    return versions


def _binding_warnings(torch) -> list[str]:
    allowed = sorted(os.sched_getaffinity(0))
    omp, threads = os.environ.get("OMP_NUM_THREADS"), torch.get_num_threads()
    local_world, ncpu = int(os.environ.get("LOCAL_WORLD_SIZE", "1")), os.cpu_count() or 1
    bound = os.environ.get("HPCQA_BOUND_CPUS", "")
    warnings = []
    if bound and topology.cpu_list(allowed) != bound:
        warnings.append(f"bound to CPUs {topology.cpu_list(allowed)}, the wrapper chose {bound}")
    if omp and threads != int(omp):
        warnings.append(f"torch uses {threads} threads, OMP_NUM_THREADS={omp}")
    if threads * local_world > ncpu:
        warnings.append(
            f"OVERSUBSCRIBED: {local_world} ranks x {threads} threads > {ncpu} CPUs on this node"
        )
    if allowed and threads > len(allowed):
        warnings.append(f"OVERSUBSCRIBED: {threads} threads on {len(allowed)} allowed CPUs")
    return warnings


def allocator(env: Mapping[str, str]) -> str:
    """The allocator this process got (launch.malloc as it arrived): a preloaded one by name, glibc told to keep its
    heap, or glibc as it is."""
    for name in ("tcmalloc", "jemalloc"):
        if name in env.get("LD_PRELOAD", ""):
            return name
    mmap_max = "MALLOC_MMAP_MAX_"  # the variable that takes big blocks off mmap (GLIBC_HEAP_ENV)
    return "glibc-heap" if env.get(mmap_max) == GLIBC_HEAP_ENV[mmap_max] else "glibc"


def _mapped(ld_preload: str) -> list[str]:
    """The LD_PRELOAD libraries the dynamic loader really mapped into this process (/proc/self/maps)."""
    try:
        maps = fsutil.read_kernel(Path("/proc/self/maps"))
    except OSError:
        return []
    return [p for p in ld_preload.split(":") if p and (p in maps or os.path.realpath(p) in maps)]


def startup_report(plan: LaunchPlan, jd: JobDir) -> dict:
    """What this rank actually got vs what the plan said; warnings for mismatches."""

    e = os.environ
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "rank": int(e.get("RANK", "0")),
        "local_rank": int(e.get("LOCAL_RANK", "0")),
        "node_rank": int(e.get("NODE_RANK", "0")),
        "world_size": int(e.get("WORLD_SIZE", "1")),
        "local_world_size": int(e.get("LOCAL_WORLD_SIZE", "1")),
        "master_addr": e.get("MASTER_ADDR"),
        "master_port": e.get("MASTER_PORT"),
        "env_source": e.get("HPCQA_ENV_SOURCE"),
        "planned_cpus": e.get("HPCQA_PLANNED_CPUS"),
        "sockets": _ints(e.get("HPCQA_SOCKETS")),
        "numa": _ints(e.get("HPCQA_NUMA")),
        "membind": e.get("HPCQA_MEMBIND"),
        "cpus": sorted(os.sched_getaffinity(0)),
        "bind_note": e.get("HPCQA_BIND_NOTE"),
        "preload": preload.decode(e.get(preload.FOUND)),
        "preload_mapped": _mapped(e.get("LD_PRELOAD", "")),
        "omp_num_threads": e.get("OMP_NUM_THREADS"),
        "torch_threads": torch.get_num_threads(),
        "ld_preload": e.get("LD_PRELOAD", ""),
        "allocator": allocator(e),
        "versions": _versions(torch),
        "warnings": _binding_warnings(torch),
        "started": time.time(),
        "job_dir": str(jd.path),
        "plan_digest": plan.digest,
        "variant": dict(plan.variant),
        "variant_index": plan.variant_index,
        # launch.pass_env: whether each name arrived (its value is never recorded)
        "passed_env": {name: name in e for name in plan.config.launch.pass_env},
        "code": code_provenance(e),
    }


def _ints(text: str | None) -> list[int]:
    return [int(x) for x in text.split(",") if x] if text else []


def weights_digest(model) -> str:
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().float().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def own_usage(r: Rank) -> dict:
    """What this rank used, measured by itself (seff's numbers for local jobs): CPU seconds of the process and
    its waited-for children (tokenising/DataLoader workers), wall seconds, its CPUs, peak RSS."""
    me, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    # getrusage counts from the process's exec (its imports of torch and transformers included), so the wall
    # time must too: timed from start-up instead, a 1-CPU rank once "used" 165 % of its CPU
    return {
        "cpu_s": me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime,
        "wall_s": r.wall_s(),
        "cpus": len(r.report.get("cpus") or []) or os.cpu_count() or 1,
        "max_rss_bytes": me.ru_maxrss * 1024,
        "threads_outside_cpus": threads_outside(set(r.report.get("cpus") or [])),
        "run_delay_s": binding.run_delay_s(),
    }


def threads_outside(cpus: set[int]) -> list[str]:
    """This process's threads allowed on CPUs beyond the rank's (one started before pinning would be)."""
    if not cpus:
        return []
    out = []
    for status in Path("/proc/self/task").glob("*/status"):
        try:
            line = next(
                x
                for x in fsutil.read_kernel(status).splitlines()
                if x.startswith("Cpus_allowed_list:")
            )
        except (OSError, StopIteration):
            continue
        if not set(topology.parse_cpu_list(line.split(":", 1)[1].strip())) <= cpus:
            out.append(f"{status.parent.name}: {line.split(':', 1)[1].strip()}")
    return out


def process_age_s() -> float | None:
    """Seconds since this process started (/proc/self/stat's starttime against /proc/uptime)."""
    try:
        start_ticks = int(fsutil.read_kernel(Path("/proc/self/stat")).rsplit(")", 1)[1].split()[19])
        uptime = float(fsutil.read_kernel(Path("/proc/uptime")).split()[0])
        return max(uptime - start_ticks / os.sysconf("SC_CLK_TCK"), 1e-3)
    except (OSError, ValueError, IndexError):
        return None


def logger(rank: int):
    def log(msg: str) -> None:
        print(f"[hpcqa rank {rank}] {msg}", file=sys.stderr, flush=True)

    return log


def thread_census(pid: int | None = None) -> list[dict]:
    """Every thread of this process and of its children (DataLoader workers): name and CPU mask."""
    pid = pid or os.getpid()
    procs = [pid] + [int(p.name) for p in Path("/proc").glob("[0-9]*") if _ppid(p) == pid]
    out = []
    for proc in procs:
        for task in sorted(Path(f"/proc/{proc}/task").glob("[0-9]*")):
            try:
                mask = next(
                    x.split()[1]
                    for x in fsutil.read_kernel(task / "status").splitlines()
                    if x.startswith("Cpus_allowed_list")
                )
                name = fsutil.read_kernel(task / "comm").strip()
            except (OSError, StopIteration):
                continue
            out.append(
                {
                    "pid": proc,
                    "tid": int(task.name),
                    "name": name,
                    "cpus": mask,
                    "main": int(task.name) == proc,
                }
            )
    return out


def _ppid(proc: Path) -> int:
    try:
        return int(fsutil.read_kernel(proc / "stat").rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return -1
