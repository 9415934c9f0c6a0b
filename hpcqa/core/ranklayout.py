"""How many ranks a node runs and on which CPUs: the declared node's layout, launch.ranks_per_socket resolved
(`hpcqa tune`'s measurement, else a heuristic), and the same rule applied to the node a rank finds itself on.
Pure; build_plan (plan.py) and the rank wrapper use it."""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Any, Mapping, Protocol, Sequence

from hpcqa.core import topology
from hpcqa.core.config import Config
from hpcqa.core.kinds import DDPBackend
from hpcqa.errors import HpcqaError
from hpcqa.text import shown


class PlannedShape(Protocol):
    """What node_layout reads of a LaunchPlan (plan.py builds on this module, so it is named by shape here)."""

    @property
    def config(self) -> Config: ...
    @property
    def backend(self) -> Any: ...
    @property
    def ranks_per_node(self) -> int: ...
    @property
    def ranks_per_domain(self) -> int: ...


def shape_key(cfg: Config) -> str:
    """What a layout measurement depends on: model, data and its padding, batch, precision, node shape."""
    c, t, d = cfg.cluster, cfg.train, cfg.data
    padding = (
        "max"
        if d.pad_to_max_length
        else f"batch/{d.pad_to_multiple_of}/{'grouped' if d.group_by_length else 'random'}"
    )
    shape = {
        "model": cfg.model.name_or_path,
        "max_seq_length": t.max_seq_length,
        "doc_stride": t.doc_stride,
        "data": [d.dataset or d.train_file, d.synthetic_shape],
        "padding": padding,
        "batch": t.per_device_train_batch_size,
        "accumulation": t.gradient_accumulation_steps,
        "bf16": t.bf16,
        "node": [
            c.sockets_per_node,
            c.cores_per_socket,
            c.threads_per_core,
            c.numa_per_socket,
            cfg.launch.rank_domain,
        ],
    }
    return hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=256)
def declared_layout(
    sockets: int,
    cores: int,
    threads: int,
    numa: int,
    ranks_per_node: int,
    cores_per_domain: int,
    workers: int,
    rank_domain: str,
    rpd: int,
) -> topology.Layout:
    """The pools of the declared node (pure, so computed once per shape: a sweep's variants mostly share it)."""
    node = topology.declared_node(sockets, cores, threads, numa)
    return topology.layout(node, ranks_per_node, cores_per_domain, workers, rank_domain, rpd)


def declared_pools(cfg: Config, rpd: int, workers: int) -> list[topology.Pool]:
    """Every local rank's pool on the node the config declares, `rpd` ranks per domain, `workers` CCL workers each."""
    c, la = cfg.cluster, cfg.launch
    lay = declared_layout(
        c.sockets_per_node,
        c.cores_per_socket,
        c.threads_per_core,
        c.numa_per_socket,
        cfg.domains_per_node * rpd,
        cfg.cores_per_domain,
        workers,
        la.rank_domain,
        rpd,
    )
    return list((topology.with_siblings(lay) if la.use_siblings else lay).pools)


# One rank per 4 cores was the fastest layout measured on a 16-core Xeon for a MiniLM-size model (4x4:
# 2.1x one rank per socket); on sockets under 8 cores one rank per core won (2 cores: 2x1 over 1x2).
HEURISTIC_CORES_PER_RANK = 4


def heuristic_ranks_per_domain(cores: int) -> int:
    if cores < 2 * HEURISTIC_CORES_PER_RANK:
        return cores
    want = max(cores // HEURISTIC_CORES_PER_RANK, 1)
    return max(d for d in range(1, want + 1) if cores % d == 0)


def ranks_per_domain(cfg: Config, tuned: Mapping[str, Any]) -> tuple[int, str]:
    """launch.ranks_per_socket resolved: (ranks per domain, where that came from)."""
    value = cfg.launch.ranks_per_socket
    if value != "auto":
        return value, f"launch.ranks_per_socket = {value}"
    found = tuned.get(shape_key(cfg))
    hit: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    n = hit.get("ranks_per_socket")
    if (  # what `hpcqa tune` writes; a store edited by hand or damaged is passed over
        isinstance(n, int)
        and not isinstance(n, bool)
        and 1 <= n <= cfg.cores_per_domain
        and cfg.cores_per_domain % n == 0
    ):
        summary = hit.get("summary")
        said = shown(summary) if isinstance(summary, str) else "measured"
        return n, f"auto: `hpcqa tune` ({said[:200]})"
    n = heuristic_ranks_per_domain(cfg.cores_per_domain)
    return n, (
        f"auto: not tuned for this shape; heuristic: one rank per "
        f"{'core' if cfg.cores_per_domain < 2 * HEURISTIC_CORES_PER_RANK else f'{cfg.cores_per_domain // n} cores'}"
        f" (`hpcqa tune CONFIG` measures)"
    )


def node_layout(
    plan: PlannedShape, node: topology.Node | Sequence[topology.Cpu]
) -> topology.Layout:
    """Every local rank's pool on this node, by the same rule (and function) the plan used for the
    declared node. `hpcqa topology CONFIG` shows exactly this."""
    cfg = plan.config
    workers = cfg.launch.ccl_workers if plan.backend.resolved is DDPBackend.CCL else 0
    try:
        lay = topology.layout(
            node,
            plan.ranks_per_node,
            cfg.cores_per_domain,
            workers,
            cfg.launch.rank_domain,
            plan.ranks_per_domain,
        )
        return topology.with_siblings(lay) if cfg.launch.use_siblings else lay
    except HpcqaError:
        # fewer cores than ranks: share them round-robin rather than refuse to start, and say so loudly
        cpus = node.cpus if isinstance(node, topology.Node) else node
        cores = [c for c, _ in topology.physical_cores(cpus)]
        pools = tuple(
            topology.Pool(k, (cores[k % len(cores)],), (), (), (cores[k % len(cores)],))
            for k in range(plan.ranks_per_node)
        )
        return topology.Layout(
            pools,
            True,
            (
                f"OVERSUBSCRIBED: {plan.ranks_per_node} ranks share this node's "
                f"{len(cores)} core(s)",
            ),
        )
