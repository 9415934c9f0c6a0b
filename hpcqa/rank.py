"""Rank wrapper: `python -m hpcqa.rank --plan PLAN.json -- COMMAND...`

Runs in front of every rank, before the real interpreter and its OpenMP runtime start (they read
LD_PRELOAD, OMP_* and KMP_* once, at start-up). It maps the launcher's variables (Slurm, PMI,
submitit local, ...) to RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT, exports its local rank's
environment from the plan, binds itself to the plan's CPUs and execs COMMAND, which inherits all of
it. Standard library only: importing torch here would defeat the purpose.

If the node doesn't have the CPUs the plan names (a config written for bigger nodes), the same
pool rule is applied to the CPUs the node does have and the difference is reported loudly, so a
rank never silently runs with more threads than cores.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from hpcqa import distenv, topology
from hpcqa import plan as planmod
from hpcqa.errors import HpcqaError
from hpcqa.jobdir import TASK_ID
from hpcqa.plan import LaunchPlan



def node_cpus(allowed: Sequence[int] | None = None) -> list[topology.Cpu]:
    """CPUs usable on this node: the cgroup's cpuset when there is one, else this process's mask."""
    cpus = allowed
    if cpus is None:
        for f in ("/sys/fs/cgroup/cpuset.cpus.effective", "/sys/fs/cgroup/cpuset/cpuset.effective_cpus"):
            try:
                text = Path(f).read_text().strip()
            except OSError:
                continue
            if text:
                cpus = parse_cpu_list(text)
                break
    if cpus is None:
        cpus = sorted(os.sched_getaffinity(0))
    return topology.read_sysfs(allowed=cpus)


def parse_cpu_list(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        if "-" in part:
            a, b = part.split("-")
            out.extend(range(int(a), int(b) + 1))
        elif part.strip():
            out.append(int(part))
    return out


def choose_binding(plan: LaunchPlan, local_rank: int, cpus: Sequence[topology.Cpu]) -> dict[str, Any]:
    """Pure: the CPUs and thread variables this local rank gets on a node with `cpus`."""
    lr = plan.local_ranks[local_rank]
    available = {c.cpu for c in cpus}
    if not lr.cpus:  # launch.bind = false
        return {"cpus": [], "env": {}, "note": "not bound (launch.bind = false)"}
    if set(lr.cpus) <= available:
        return {"cpus": list(lr.cpus), "env": {}, "note": "as planned"}
    pools, how = _pools_on_this_node(plan, cpus, len(lr.ccl))
    pool = pools[local_rank]
    env = {"OMP_NUM_THREADS": str(len(pool.compute))}
    if "KMP_AFFINITY" in lr.env:
        env["KMP_AFFINITY"] = topology.kmp_affinity(pool.compute)
    if "OMP_PLACES" in lr.env:
        env["OMP_PLACES"] = topology.omp_places(pool.compute)
    if "CCL_WORKER_AFFINITY" in lr.env:
        env["CCL_WORKER_AFFINITY"] = topology.ccl_worker_affinity(pools)
    if "I_MPI_PIN_DOMAIN" in lr.env:
        env["I_MPI_PIN_DOMAIN"] = topology.i_mpi_pin_domain(pools)
    return {"cpus": list(pool.cpus), "env": env, "note": f"ADJUSTED: {how}"}


def _pools_on_this_node(plan: LaunchPlan, cpus: Sequence[topology.Cpu], workers: int) -> tuple[list, str]:
    """The plan's pool rule applied to the CPUs this node has; smaller shares when they don't suffice."""
    sockets, per_socket = plan.ranks_per_node, plan.config.cluster.cores_per_socket
    try:
        pools = topology.socket_pools(cpus, sockets, per_socket, workers)
        return pools, "plan's CPUs missing here; same rule applied to this node's CPUs"
    except HpcqaError:
        pass
    cores = [c for c, _ in topology.physical_cores(cpus)]
    share = max(len(cores) // sockets, 1)
    workers = min(workers, share - 1) if share > 1 else 0
    pools = []
    for k in range(sockets):
        chunk = tuple(cores[k * share:(k + 1) * share]) or tuple(cores[k % len(cores):][:1])
        pools.append(topology.Pool(k, chunk, (), chunk[:workers], chunk[workers:]))
    return pools, (f"node has {len(cores)} cores, plan wants {sockets}x{per_socket}: "
                   f"each rank gets {share} core(s)")


def rank_environment(plan: LaunchPlan, env: Mapping[str, str], cpus: Sequence[topology.Cpu],
                     hostname: str) -> tuple[dict[str, str], list[int], list[str]]:
    """Pure: (environment for the exec, CPUs to bind, warnings)."""
    env = dict(env)
    if plan.config.launch.master_port and not env.get("MASTER_PORT"):
        env["MASTER_PORT"] = str(plan.config.launch.master_port)
    d = distenv.detect(env, hostname)
    if d.world_size != plan.world_size:
        raise HpcqaError(f"the launcher started {d.world_size} ranks ({d.source}), the plan has "
                         f"{plan.world_size}", "submit through hpcqa, or match -n/--ntasks to the plan")
    if d.local_world_size != plan.ranks_per_node or d.local_rank >= len(plan.local_ranks):
        raise HpcqaError(f"{d.local_world_size} ranks on this node ({d.source}), the plan has "
                         f"{plan.ranks_per_node} (one per socket)",
                         "launch with --ntasks-per-node / -ppn equal to cluster.sockets_per_node")
    lr = plan.local_ranks[d.local_rank]
    binding = choose_binding(plan, d.local_rank, cpus)
    out = {**env, **lr.env, **binding["env"], **d.torch_env()}
    warnings = _keep_existing_preloads(out, hostname)
    if binding["note"] != "as planned":
        warnings.append(f"rank {d.rank}: {binding['note']}; planned CPUs "
                        f"{topology.cpu_list(lr.cpus)}, bound to {topology.cpu_list(binding['cpus'])}")
    out.update(HPCQA_PLANNED_CPUS=topology.cpu_list(lr.cpus) if lr.cpus else "",
               HPCQA_BOUND_CPUS=topology.cpu_list(binding["cpus"]) if binding["cpus"] else "",
               HPCQA_BIND_NOTE=binding["note"], HPCQA_ENV_SOURCE=d.source, HPCQA_HOSTS=",".join(d.hosts),
               HPCQA_PLAN_DIGEST=plan.digest)
    return out, list(binding["cpus"]), warnings


def _keep_existing_preloads(env: dict[str, str], hostname: str) -> list[str]:
    """Drop LD_PRELOAD entries missing on this node (a missing preload makes every exec warn)."""
    preload = [p for p in env.get("LD_PRELOAD", "").split(":") if p]
    kept = [p for p in preload if os.path.exists(p)]
    if kept:
        env["LD_PRELOAD"] = ":".join(kept)
    else:
        env.pop("LD_PRELOAD", None)
    return [f"LD_PRELOAD: {p} not found on {hostname}; left out" for p in preload if p not in kept]


def main(argv: list[str]) -> int:
    if "--" not in argv or len(argv) < 4 or argv[0] != "--plan":
        print("usage: python -m hpcqa.rank --plan PLAN.json -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    sep = argv.index("--")
    command = argv[sep + 1:]
    # an array's tasks each read their own plan (a plain job is task 0)
    plan_path = argv[1].replace(TASK_ID, os.environ.get("SLURM_ARRAY_TASK_ID") or "0")
    try:
        plan = planmod.load(plan_path)
        env, cpus, warnings = rank_environment(plan, os.environ, node_cpus(), socket.gethostname())
    except HpcqaError as e:
        print(f"hpcqa.rank: {e.render()}", file=sys.stderr)
        return 2
    env["HPCQA_PLAN"] = str(Path(plan_path).resolve())
    for w in warnings:
        print(f"hpcqa.rank: WARNING: {w}", file=sys.stderr)
    if cpus:
        os.sched_setaffinity(0, cpus)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvpe(command[0], command, env)
    return 0  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
