"""A CPU pool -> the thread and affinity variables of the rank that holds it. Pure; the one rule.

The plan applies it to the declared node's pools (what the dry run shows); the rank wrapper applies it again
to the pool it observes on its node (sysfs and its allowed CPUs), so a node that differs from the
declaration still gets variables that match the CPUs it binds.
"""

from __future__ import annotations

from typing import Sequence

from hpcqa.core import topology
from hpcqa.core.config import LaunchConfig

# What depends on the pool itself: the rank re-derives these for the pool it observes; the others (KMP_BLOCKTIME,
# KMP_HW_SUBSET, OMP_PROC_BIND, CCL_WORKER_COUNT) stay as the plan gave them, a launch.env override included.
POOL_KEYS = (
    "OMP_NUM_THREADS",
    "KMP_AFFINITY",
    "OMP_PLACES",
    "CCL_WORKER_AFFINITY",
    "I_MPI_PIN_DOMAIN",
)


def pool_env(
    la: LaunchConfig,
    pool: topology.Pool,
    pools: Sequence[topology.Pool],
    ccl: bool,
    pin_domain: bool,
) -> dict[str, str]:
    """OMP/KMP/CCL/I_MPI variables of one local rank's pool (`pools`: every local rank's, for the node-wide
    lists). `ccl`: the backend is ccl (CCL worker variables); `pin_domain`: Intel MPI's I_MPI_PIN_DOMAIN (ccl, or
    the mpirun launcher). No LD_PRELOAD and no launch.env: those don't depend on the pool."""
    env: dict[str, str] = {}
    if la.bind or la.omp_num_threads:
        env["OMP_NUM_THREADS"] = str(la.omp_num_threads or len(pool.compute))
    if la.bind:
        if la.openmp == "iomp":
            env["KMP_AFFINITY"] = topology.kmp_affinity(pool.compute)
            env["KMP_BLOCKTIME"] = str(la.kmp_blocktime_ms)
            if not la.use_siblings:
                env["KMP_HW_SUBSET"] = "1T"  # one thread per core: siblings stay idle
        else:
            env["OMP_PLACES"] = topology.omp_places(pool.compute)
            env["OMP_PROC_BIND"] = "close"
    if ccl:
        env["CCL_WORKER_COUNT"] = str(la.ccl_workers)
        env["CCL_WORKER_AFFINITY"] = topology.ccl_worker_affinity(pools)
    if pin_domain:
        env["I_MPI_PIN_DOMAIN"] = topology.i_mpi_pin_domain(pools)
    return env
