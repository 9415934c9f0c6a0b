"""Sockets, cores and CPU ids -> one CPU pool per local rank, and the Intel affinity formula.

Pure functions, except `read_sysfs`, which only reads /sys and the allowed CPU set.

Rule (used for the declared topology at plan time and for the real one at run time): order the
allowed physical cores by (socket, core), take the first hardware thread of each core, and cut that
list into `sockets` consecutive slices of `cores_per_socket`. On a machine that matches the config
each slice is one real socket; on a machine with fewer real sockets than declared (a laptop, CI)
the slices are "virtual sockets" made of its cores. CPU id is never assumed to equal core id.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from hpcqa.errors import PlanError


@dataclass(frozen=True)
class Cpu:
    cpu: int
    socket: int
    core: int


@dataclass(frozen=True)
class Pool:
    """The CPUs of one local rank."""

    local_rank: int
    physical: tuple[int, ...]   # first hardware thread of each core, ascending
    siblings: tuple[int, ...]   # the other hardware threads of those cores (left idle)
    ccl: tuple[int, ...]        # cores given to oneCCL worker threads
    compute: tuple[int, ...]    # cores for OpenMP compute threads

    @property
    def cpus(self) -> tuple[int, ...]:
        """The rank's CPU binding: its physical cores (CCL + compute); siblings stay idle."""
        return tuple(sorted(self.ccl + self.compute))


def declared_cpus(sockets: int, cores_per_socket: int, threads_per_core: int) -> list[Cpu]:
    """The usual Linux enumeration: first threads 0..S*C-1 socket-major, then the siblings."""
    n = sockets * cores_per_socket
    return [Cpu(cpu=t * n + s * cores_per_socket + c, socket=s, core=c)
            for t in range(threads_per_core) for s in range(sockets) for c in range(cores_per_socket)]


def read_sysfs(root: str = "/sys/devices/system/cpu", allowed: Iterable[int] | None = None) -> list[Cpu]:
    """The CPUs this process may run on, with their socket and core ids from sysfs."""
    allowed_set = set(os.sched_getaffinity(0) if allowed is None else allowed)
    out = []
    for cpu in sorted(allowed_set):
        topo = Path(root) / f"cpu{cpu}" / "topology"
        try:
            socket = int((topo / "physical_package_id").read_text())
            core = int((topo / "core_id").read_text())
        except (OSError, ValueError):
            socket, core = 0, cpu  # no topology exported (some containers): one thread per core
        out.append(Cpu(cpu=cpu, socket=socket, core=core))
    return out


def physical_cores(cpus: Sequence[Cpu]) -> list[tuple[int, list[int]]]:
    """[(first thread, [other threads])] per core, ordered by (socket, core)."""
    by_core: dict[tuple[int, int], list[int]] = {}
    for c in cpus:
        by_core.setdefault((c.socket, c.core), []).append(c.cpu)
    out = []
    for key in sorted(by_core, key=lambda k: (k[0], k[1], min(by_core[k]))):
        threads = sorted(by_core[key])
        out.append((threads[0], threads[1:]))
    return out


def socket_pools(cpus: Sequence[Cpu], sockets: int, cores_per_socket: int, ccl_workers: int) -> list[Pool]:
    """One Pool per local rank; the first `ccl_workers` cores of each pool go to oneCCL."""
    cores = physical_cores(cpus)
    need = sockets * cores_per_socket
    if len(cores) < need:
        raise PlanError(
            f"{sockets} sockets x {cores_per_socket} cores = {need} physical cores needed, "
            f"but only {len(cores)} are available ({_ranges([c for c, _ in cores])})",
            "lower cluster.sockets_per_node or cluster.cores_per_socket to match the node "
            "(`hpcqa doctor` shows it), or run on bigger nodes")
    if ccl_workers >= cores_per_socket:
        raise PlanError(f"{ccl_workers} CCL workers leave no compute core on a {cores_per_socket}-core socket",
                        "lower launch.ccl_workers")
    pools = []
    for s in range(sockets):
        chunk = cores[s * cores_per_socket:(s + 1) * cores_per_socket]
        phys = tuple(sorted(c for c, _ in chunk))
        sib = tuple(sorted(t for _, ts in chunk for t in ts))
        pools.append(Pool(local_rank=s, physical=phys, siblings=sib,
                          ccl=phys[:ccl_workers], compute=phys[ccl_workers:]))
    return pools


def hex_mask(cpus: Iterable[int]) -> str:
    return hex(sum(1 << c for c in set(cpus)))


def i_mpi_pin_domain(pools: Sequence[Pool]) -> str:
    """Intel MPI's explicit domain list: one hex mask of compute cores per local rank."""
    return "[" + ",".join(hex_mask(p.compute) for p in pools) + "]"


def ccl_worker_affinity(pools: Sequence[Pool]) -> str:
    """Node-wide list: the CCL cores of local rank 0, then of rank 1, ..."""
    return ",".join(str(c) for p in pools for c in p.ccl)


def kmp_affinity(cpus: Sequence[int]) -> str:
    return f"granularity=fine,proclist=[{','.join(map(str, cpus))}],explicit"


def omp_places(cpus: Sequence[int]) -> str:
    return ",".join(f"{{{c}}}" for c in cpus)


def _ranges(cpus: Iterable[int]) -> str:
    """[0,1,2,5,7,8] -> '0-2,5,7-8' (the cpuset list format)."""
    xs = sorted(set(cpus))
    if not xs:
        return "none"
    parts, start, prev = [], xs[0], xs[0]
    for x in xs[1:] + [None]:  # type: ignore[list-item]
        if x is not None and x == prev + 1:
            prev = x
            continue
        parts.append(f"{start}-{prev}" if prev != start else f"{start}")
        if x is not None:
            start = prev = x
    return ",".join(parts)


cpu_list = _ranges
