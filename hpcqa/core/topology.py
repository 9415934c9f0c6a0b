"""A node's CPUs (sockets, NUMA nodes, cores, hardware threads) -> one CPU pool per local rank,
and the Intel affinity formula. Pure, except `read_node`, which reads sysfs and the allowed set.

One rule, used for the declared node at plan time (the dry run's prediction) and for the real node
in every rank (what is bound):

- a rank's *domain* is a socket (`launch.rank_domain = "socket"`) or a NUMA node ("numa");
- within a domain, physical cores in core order (a core is its hardware threads, grouped by
  `thread_siblings_list`, never by CPU number), the first thread of each; siblings stay idle;
- local rank k gets domain k: the first `cores_per_socket` cores of it (fewer when the allowed set
  has fewer; the rest of the domain stays idle *in that domain*), the first `ccl_workers` of them for
  oneCCL;
- only when the node has fewer domains than ranks (a laptop, CI) are "virtual sockets" cut from its
  cores: each domain split into equal slices when the ranks divide evenly among the domains (no
  rank straddles), else one run of cores cut in order (straddling; said so).

CPU id is never assumed to equal core id, nor sockets to be numbered in blocks.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable, Sequence

from hpcqa import fsutil
from hpcqa.errors import PlanError

ISA_FLAGS = ("avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "amx_int8")


@dataclass(frozen=True)
class Cpu:
    cpu: int
    socket: int
    core: int
    numa: int = -1  # -1: not known (numa = socket is assumed)
    sibling_of: int = -1  # the first CPU of this core's thread_siblings_list; -1: not known

    @property
    def core_key(self) -> tuple[int, int]:
        return (
            (self.socket, self.sibling_of)
            if self.sibling_of >= 0
            else (self.socket, 10**9 + self.core)
        )

    @property
    def numa_node(self) -> int:
        return self.numa if self.numa >= 0 else self.socket


@dataclass(frozen=True)
class Pool:
    """The CPUs of one local rank."""

    local_rank: int
    physical: tuple[int, ...]  # first hardware thread of each core, in core order
    siblings: tuple[int, ...]  # the other hardware threads of those cores (left idle)
    ccl: tuple[int, ...]  # cores given to oneCCL worker threads
    compute: tuple[int, ...]  # cores for OpenMP compute threads
    sockets: tuple[int, ...] = ()
    numa: tuple[int, ...] = ()

    @property
    def cpus(self) -> tuple[int, ...]:
        """The rank's CPU binding: its physical cores (CCL + compute); siblings stay idle."""
        return tuple(sorted(self.ccl + self.compute))


@dataclass(frozen=True)
class Layout:
    pools: tuple[Pool, ...]
    virtual: bool = False  # fewer domains than ranks: pools cut from the node's cores
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Node:
    """What a node has, as far as this process may use it."""

    cpus: tuple[Cpu, ...]  # the allowed CPUs, with their topology
    online: tuple[int, ...] = ()
    flags: frozenset[str] = field(default_factory=frozenset)

    @property
    def allowed(self) -> tuple[int, ...]:
        return tuple(sorted(c.cpu for c in self.cpus))

    def to_json(self) -> dict:
        sockets = sorted({c.socket for c in self.cpus})
        numa = sorted({c.numa_node for c in self.cpus})
        cores = physical_cores(self.cpus)
        return {
            "sockets": [
                {
                    "socket": s,
                    "cpus": cpu_list(c.cpu for c in self.cpus if c.socket == s),
                    "cores": sum(1 for k, _ in _cores_by_key(self.cpus) if k[0] == s),
                }
                for s in sockets
            ],
            "numa_nodes": [
                {"node": n, "cpus": cpu_list(c.cpu for c in self.cpus if c.numa_node == n)}
                for n in numa
            ],
            "cores": len(cores),
            "threads_per_core": max((1 + len(s) for _, s in cores), default=0),
            "allowed": cpu_list(self.allowed),
            "online": cpu_list(self.online),
            "isa": sorted(self.flags & set(ISA_FLAGS)),
        }


# ---------------------------------------------------------------------------------------- reading


def parse_cpu_list(text: str) -> list[int]:
    """The kernel's list format: '0-2,5,7-8' -> [0, 1, 2, 5, 7, 8]."""
    out: list[int] = []
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        a, _, b = part.partition("-")
        try:
            out.extend(range(int(a), int(b or a) + 1))
        except ValueError:
            raise PlanError(
                f"{text.strip()!r} is not a CPU list", "write it like 0-3,8-11"
            ) from None
    return out


def _read(path: Path) -> str | None:
    try:
        return fsutil.read_kernel(path).strip()
    except OSError:
        return None


def read_node(
    root: str | Path = "/sys/devices/system",
    allowed: Iterable[int] | None = None,
    cpuinfo: str | Path | None = "/proc/cpuinfo",
    saved: bool = False,
) -> Node:
    """This node from sysfs (`root` may be a saved tree laid out like /sys/devices/system), limited
    to the CPUs this process may use (`allowed`, default: its affinity mask; for a `saved` tree of another node:
    every online CPU of it, since this process's mask says nothing about that node)."""
    root = Path(root)
    online_text = _read(root / "cpu" / "online")
    online = (
        parse_cpu_list(online_text)
        if online_text
        else sorted(int(p.name[3:]) for p in (root / "cpu").glob("cpu[0-9]*"))
    )
    numa_of = {}
    for d in sorted((root / "node").glob("node[0-9]*")):
        for cpu in parse_cpu_list(_read(d / "cpulist") or ""):
            numa_of[cpu] = int(d.name[4:])
    if allowed is None:
        allowed = online if saved else os.sched_getaffinity(0)
    allowed_set = set(allowed)
    cpus = []
    for cpu in sorted(set(online) & allowed_set):
        topo = root / "cpu" / f"cpu{cpu}" / "topology"
        pkg, core = _read(topo / "physical_package_id"), _read(topo / "core_id")
        siblings = parse_cpu_list(_read(topo / "thread_siblings_list") or "")
        if (
            pkg is None or core is None
        ):  # no topology exported (some containers): one thread per core
            cpus.append(Cpu(cpu, 0, cpu, numa_of.get(cpu, -1), cpu))
            continue
        cpus.append(
            Cpu(cpu, int(pkg), int(core), numa_of.get(cpu, -1), min(siblings) if siblings else -1)
        )
    return Node(tuple(cpus), tuple(online), frozenset(_flags(cpuinfo)))


def _flags(cpuinfo: str | Path | None) -> set[str]:
    text = _read(Path(cpuinfo)) if cpuinfo else None
    for line in (text or "").splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def declared_node(
    sockets: int, cores_per_socket: int, threads_per_core: int, numa_per_socket: int = 1
) -> Node:
    """The node a config describes, numbered the usual Linux way: first threads 0..S*C-1 socket-major,
    then the siblings; NUMA nodes split each socket's cores in blocks. The plan's prediction; the
    ranks re-derive from the real node."""
    n = sockets * cores_per_socket
    per_numa = max(cores_per_socket // numa_per_socket, 1)
    cpus = [
        Cpu(
            cpu=t * n + s * cores_per_socket + c,
            socket=s,
            core=c,
            numa=s * numa_per_socket + c // per_numa,
            sibling_of=s * cores_per_socket + c,
        )
        for t in range(threads_per_core)
        for s in range(sockets)
        for c in range(cores_per_socket)
    ]
    return Node(tuple(sorted(cpus, key=lambda c: c.cpu)), tuple(range(n * threads_per_core)))


# ---------------------------------------------------------------------------------------- pools


def _cores_by_key(cpus: Sequence[Cpu]) -> list[tuple[tuple[int, int], list[Cpu]]]:
    by_core: dict[tuple[int, int], list[Cpu]] = {}
    for c in cpus:
        by_core.setdefault(c.core_key, []).append(c)
    return sorted(
        by_core.items(),
        key=lambda kv: (kv[0][0], min(x.core for x in kv[1]), min(x.cpu for x in kv[1])),
    )


def physical_cores(cpus: Sequence[Cpu]) -> list[tuple[int, list[int]]]:
    """[(first thread, [other threads])] per core, ordered by (socket, core id)."""
    out = []
    for _, threads in _cores_by_key(cpus):
        ids = sorted(t.cpu for t in threads)
        out.append((ids[0], ids[1:]))
    return out


def domains(cpus: Sequence[Cpu], by: str = "socket") -> list[tuple[int, list[Cpu]]]:
    """CPUs grouped into rank domains (sockets or NUMA nodes), by domain id."""
    out: dict[int, list[Cpu]] = {}
    for c in cpus:
        out.setdefault(c.socket if by == "socket" else c.numa_node, []).append(c)
    return sorted(out.items())


def _pool(k: int, cores: list[tuple[int, list[Cpu]]], workers: int) -> Pool:
    threads = [t for _, ts in cores for t in ts]
    phys = tuple(min(t.cpu for t in ts) for _, ts in cores)
    sib = tuple(sorted(t.cpu for t in threads if t.cpu not in phys))
    return Pool(
        local_rank=k,
        physical=phys,
        siblings=sib,
        ccl=phys[:workers],
        compute=phys[workers:],
        sockets=tuple(sorted({t.socket for t in threads})),
        numa=tuple(sorted({t.numa_node for t in threads})),
    )


def layout(
    node: Node | Sequence[Cpu],
    ranks: int,
    cores_per_socket: int,
    ccl_workers: int,
    by: str = "socket",
    per_domain: int = 1,
) -> Layout:
    """One Pool per local rank on `node`, by the module's rule: `ranks` = domains used x `per_domain`
    ranks in each, every rank an equal slice of its domain's first `cores_per_socket` cores."""
    cpus = node.cpus if isinstance(node, Node) else tuple(node)
    doms = [(d, _cores_by_key(cs)) for d, cs in domains(cpus, by)]
    total = sum(len(cores) for _, cores in doms)
    if total < ranks:
        raise PlanError(
            f"{ranks} ranks need at least {ranks} physical cores, this node offers {total} "
            f"({cpu_list(c.cpu for c in cpus)})",
            "run fewer ranks per node, or on a bigger node",
        )
    wanted = max(ranks // per_domain, 1)
    if len(doms) >= wanted and all(len(cores) >= per_domain for _, cores in doms[:wanted]):
        return _domains_each(doms, wanted, per_domain, cores_per_socket, ccl_workers, by)
    return _virtual(doms, ranks, cores_per_socket // per_domain, ccl_workers, by)


def _domains_each(doms, wanted: int, per_domain: int, per: int, workers: int, by: str) -> Layout:
    pools: list[Pool] = []
    notes = []
    # Ranks step together (DDP): a rank with more cores than the others only waits for them. In an uneven cpuset
    # (a kubelet's reserved cores on one socket, a cgroup subset) every rank gets the smallest domain's share.
    share = min(len(cores[:per]) for _, cores in doms[:wanted]) // per_domain
    for d, cores in doms[:wanted]:
        take = cores[:per]
        if len(take) // per_domain > share:
            notes.append(
                f"{by} {d}: {len(take) - share * per_domain} core(s) left idle to match the smallest "
                f"{by}'s {share} per rank (ranks step together)"
            )
        if share <= workers:
            raise PlanError(
                f"{by} {d}: {len(take)} usable core(s) for {per_domain} rank(s): {workers} CCL worker(s) "
                "leave no compute core",
                "lower launch.ccl_workers or launch.ranks_per_socket, "
                "or ask for whole nodes (cluster.exclusive)",
            )
        if len(cores) < per:
            notes.append(
                f"{by} {d}: {len(cores)} usable core(s), config says {per}; its rank(s) use {share} each"
            )
        for i in range(per_domain):
            pools.append(_pool(len(pools), take[i * share : (i + 1) * share], workers))
    if len(doms) > wanted:
        notes.append(
            f"{len(doms) - wanted} {by}(s) left idle: {len(doms)} on this node, {wanted} used"
        )
    return Layout(tuple(pools), False, tuple(notes))


def _virtual(doms, ranks: int, per: int, workers: int, by: str) -> Layout:
    note = f"{len(doms)} {by}(s) for {ranks} ranks: virtual sockets cut from physical cores"
    if ranks % len(doms) == 0:
        slices, per_dom = [], ranks // len(doms)
        for _, cores in doms:
            share = min(per, len(cores) // per_dom)
            if share < 1:
                break
            slices += [cores[i * share : (i + 1) * share] for i in range(per_dom)]
        else:
            return Layout(
                tuple(_pool(k, s, _workers(workers, len(s))) for k, s in enumerate(slices)),
                True,
                (note + f" ({per_dom} per {by}, none straddles)",),
            )
    flat = [core for _, cores in doms for core in cores]
    share = min(per, len(flat) // ranks)
    pools = tuple(
        _pool(k, flat[k * share : (k + 1) * share], _workers(workers, share)) for k in range(ranks)
    )
    straddle = [p.local_rank for p in pools if len(p.sockets if by == "socket" else p.numa) > 1]
    return Layout(
        pools, True, (note + (f"; local rank(s) {straddle} straddle {by}s" if straddle else ""),)
    )


def with_siblings(lay: Layout) -> Layout:
    """The ranks' hyper-thread siblings join their compute threads (launch.use_siblings)."""
    return replace(
        lay,
        pools=tuple(replace(p, compute=tuple(sorted(p.compute + p.siblings))) for p in lay.pools),
    )


def _workers(workers: int, share: int) -> int:
    return min(workers, share - 1) if share > 1 else 0


# ---------------------------------------------------------------------------------------- formula


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


def cpu_list(cpus: Iterable[int]) -> str:
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


_ranges = cpu_list
