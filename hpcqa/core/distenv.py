"""Launcher environment -> torch.distributed environment. Pure: a Mapping in, a value out.

Sources, most specific first (a process started by mpirun inside a Slurm allocation sees both the
batch step's SLURM_* and its own PMI_*; the launcher closest to the process wins):

    torchrun / already mapped   RANK + WORLD_SIZE (+ LOCAL_RANK ...)
    Intel MPI / PMI             PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS
    Open MPI                    OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE}
    Slurm                       SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID, ...
    submitit local executor     SUBMITIT_LOCAL_{GLOBALID,NTASKS,LOCALID,NODEID,JOB_ID}
    nothing                     a single process
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Mapping

from hpcqa.errors import DistEnvError

# Below the Linux ephemeral range (32768-60999) so the port can't be taken by some outgoing
# connection, and above the well-known/registered ports most daemons use.
PORT_BASE = 10000
PORT_SPAN = 32768 - PORT_BASE
MAX_HOSTS = 1_000_000


@dataclass(frozen=True)
class DistEnv:
    source: str
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    master_addr: str
    master_port: int
    hosts: tuple[str, ...]
    job_id: str

    def torch_env(self) -> dict[str, str]:
        """The variables torch.distributed / accelerate read."""
        return {
            "RANK": str(self.rank),
            "WORLD_SIZE": str(self.world_size),
            "LOCAL_RANK": str(self.local_rank),
            "LOCAL_WORLD_SIZE": str(self.local_world_size),
            "NODE_RANK": str(self.node_rank),
            "GROUP_RANK": str(self.node_rank),
            "MASTER_ADDR": self.master_addr,
            "MASTER_PORT": str(self.master_port),
            # torchrun's names too: a script written for torchrun reads these
            "GROUP_WORLD_SIZE": str(max(self.world_size // max(self.local_world_size, 1), 1)),
            "ROLE_RANK": str(self.rank),
            "ROLE_WORLD_SIZE": str(self.world_size),
            "ROLE_NAME": "default",
        }

    def to_json(self) -> dict:
        d: dict[str, object] = {
            k.upper(): v
            for k, v in self.torch_env().items()
            if not k.startswith(("GROUP_", "ROLE_"))
        }
        for k in (
            "RANK",
            "WORLD_SIZE",
            "LOCAL_RANK",
            "LOCAL_WORLD_SIZE",
            "NODE_RANK",
            "MASTER_PORT",
        ):
            d[k] = int(str(d[k]))
        d.update(hosts=list(self.hosts), source=self.source, job_id=self.job_id)
        return d


# ---------------------------------------------------------------------------------------- nodelist

_RANGE = re.compile(r"^([0-9]{1,18})(?:-([0-9]{1,18}))?$")  # 18 digits: no host index is longer


def _split_top(text: str, sep: str = ",") -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "[":
            depth += 1
            if depth > 1:
                raise DistEnvError(f"nodelist {_cut(text)}: nested '['", "check SLURM_JOB_NODELIST")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise DistEnvError(
                    f"nodelist {_cut(text)}: ']' without '['", "check SLURM_JOB_NODELIST"
                )
        if ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth != 0:
        raise DistEnvError(f"nodelist {_cut(text)}: unclosed '['", "check SLURM_JOB_NODELIST")
    parts.append("".join(cur))
    return parts


def _cut(nodelist: str) -> str:
    """A nodelist as a message quotes it: at most 80 characters (a 5,000-digit range is named, not printed)."""
    return repr(nodelist if len(nodelist) <= 80 else nodelist[:77] + "...")


def _expand_bracket(body: str, whole: str) -> list[str]:
    out: list[str] = []
    for item in body.split(","):
        m = _RANGE.match(item.strip())
        if not m:
            raise DistEnvError(
                f"nodelist {_cut(whole)}: bad range {_cut(item)} in brackets",
                "ranges look like 1-4 or 01-10, separated by commas",
            )
        lo_s, hi_s = m.group(1), m.group(2)
        lo, hi = int(lo_s), int(hi_s) if hi_s is not None else int(lo_s)
        if hi < lo:
            raise DistEnvError(
                f"nodelist {_cut(whole)}: range {_cut(item)} runs backwards",
                "write the lower bound first",
            )
        width = len(lo_s)  # Slurm pads to the width of the lower bound: a[08-10] -> a08 a09 a10
        if (
            len(out) + hi - lo + 1 > MAX_HOSTS
        ):  # counted before any name is made: n[0-99999999] is 10^8
            raise DistEnvError(
                f"nodelist {_cut(whole)} expands to more than {MAX_HOSTS} hosts",
                "check SLURM_JOB_NODELIST",
            )
        out.extend(str(i).zfill(width) for i in range(lo, hi + 1))
    return out


def expand_nodelist(text: str) -> list[str]:
    """Slurm hostlist -> host names, in order. `cn[01-03,07]`, `r[1-2]-n[1-2]`, `x1,y[4-5]`."""
    text = text.strip()
    if not text:
        raise DistEnvError("empty nodelist", "check SLURM_JOB_NODELIST / SLURM_STEP_NODELIST")
    hosts: list[str] = []
    for group in _split_top(text):
        if not group:
            raise DistEnvError(
                f"nodelist {_cut(text)}: empty host name (stray comma?)", "check SLURM_JOB_NODELIST"
            )
        if re.search(r"\s", group):
            raise DistEnvError(
                f"nodelist {_cut(text)}: whitespace in {_cut(group)}", "check SLURM_JOB_NODELIST"
            )
        # literal / [bracket] pieces; several bracket groups expand as a product
        pieces = re.split(r"(\[[^\]]*\])", group)
        names = [""]
        for piece in pieces:
            if piece.startswith("["):
                options = _expand_bracket(piece[1:-1], text)
            else:
                if "[" in piece or "]" in piece:
                    raise DistEnvError(
                        f"nodelist {_cut(text)}: unbalanced brackets", "check the nodelist"
                    )
                if not re.fullmatch(
                    r"[A-Za-z0-9._-]*", piece
                ):  # what a host name may hold, never ESC or U+202E
                    raise DistEnvError(
                        f"nodelist {_cut(text)}: {_cut(piece)} is not part of a host name "
                        "(letters, digits, '.', '_', '-')",
                        "check SLURM_JOB_NODELIST",
                    )
                options = [piece]
            if len(hosts) + len(names) * len(options) > MAX_HOSTS:
                raise DistEnvError(
                    f"nodelist {_cut(text)} expands to more than {MAX_HOSTS} hosts",
                    "check SLURM_JOB_NODELIST",
                )
            names = [n + o for n in names for o in options]
        hosts.extend(names)
    return hosts


def parse_tasks_per_node(text: str, nnodes: int | None = None) -> list[int]:
    """SLURM_TASKS_PER_NODE `2(x3),1` -> [2, 2, 2, 1]."""
    out: list[int] = []
    for part in text.strip().split(","):
        m = re.fullmatch(r"([0-9]{1,9})(?:\(x([0-9]{1,9})\))?", part.strip())
        if m and len(out) + int(m.group(2) or 1) > MAX_HOSTS:
            raise DistEnvError(
                f"SLURM_TASKS_PER_NODE {_cut(text)} describes more than {MAX_HOSTS} nodes",
                "the allocation's variables are not Slurm's; re-run inside srun",
            )
        if not m:
            raise DistEnvError(
                f"SLURM_TASKS_PER_NODE {_cut(text)}: cannot read {_cut(part)}",
                "expected a form like 2(x3),1",
            )
        out.extend([int(m.group(1))] * int(m.group(2) or 1))
    if nnodes is not None and len(out) != nnodes:
        raise DistEnvError(
            f"SLURM_TASKS_PER_NODE {_cut(text)} describes {len(out)} nodes, the nodelist has {nnodes}",
            "the allocation's variables disagree; re-run inside srun",
        )
    return out


# ---------------------------------------------------------------------------------------- port


def master_port(job_id: str | int | None, array_task_id: str | int | None = None) -> int:
    """A port below the ephemeral range, a pure function of the job (and array task).

    Array tasks each have their own SLURM_JOB_ID, so the job id alone already separates them; the
    task id is only mixed in when the caller has nothing but the array's id. Consecutive job ids
    give distinct ports for PORT_SPAN consecutive jobs.
    """
    if job_id in (None, ""):
        return 29500
    digits = re.sub(r"\D", "", str(job_id))
    key = int(digits) if digits else sum(str(job_id).encode())
    if array_task_id not in (None, ""):
        key = key * 7919 + int(array_task_id)
    return PORT_BASE + key % PORT_SPAN


# ---------------------------------------------------------------------------------------- detect


def _int(env: Mapping[str, str], name: str) -> int:
    try:
        v = int(env[name])
    except ValueError:
        raise DistEnvError(
            f"{name}={env[name]!r} is not an integer", f"unset or fix {name}"
        ) from None
    if v < 0:
        raise DistEnvError(f"{name}={v} is negative", f"unset or fix {name}")
    return v


def _first(env: Mapping[str, str], *names: str) -> str | None:
    for n in names:
        if env.get(n, "") != "":
            return env[n]
    return None


def _slurm_hosts(env: Mapping[str, str]) -> list[str]:
    text = _first(env, "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")
    return expand_nodelist(text) if text else []


def _job_port(env: Mapping[str, str]) -> int:
    if env.get("MASTER_PORT"):
        port = _int(env, "MASTER_PORT")
        if not 0 < port < 65536:
            raise DistEnvError(f"MASTER_PORT={port} is not a TCP port", "use 1024-65535")
        return port
    job = _first(env, "SLURM_JOB_ID", "SLURM_JOBID")
    if job:
        return master_port(job)
    if _first(env, "SLURM_ARRAY_JOB_ID"):
        return master_port(env["SLURM_ARRAY_JOB_ID"], env.get("SLURM_ARRAY_TASK_ID"))
    return master_port(_first(env, "HPCQA_JOB_ID", "SUBMITIT_LOCAL_JOB_ID", "PMI_JOBID"))


def _check(
    source: str, rank: int, world: int, local: int, local_world: int, node: int, nnodes: int
) -> None:
    if world < 1:
        raise DistEnvError(f"{source}: world size {world} < 1", "check the launcher's variables")
    if rank >= world:
        raise DistEnvError(
            f"{source}: rank {rank} is not below world size {world}",
            "the launcher's variables disagree",
        )
    if local >= local_world:
        raise DistEnvError(
            f"{source}: local rank {local} is not below local size {local_world}",
            "the launcher's variables disagree",
        )
    if nnodes and node >= nnodes:
        raise DistEnvError(
            f"{source}: node {node} is not below the node count {nnodes}",
            "the launcher's variables disagree",
        )


@dataclass(frozen=True)
class Placement:
    """Where a process sits, as one launcher's variables say."""

    rank: int
    world: int
    local: int
    local_world: int
    node: int
    nnodes: int = 0  # 0: the launcher doesn't say
    hosts: tuple[str, ...] | None = None  # None: keep the Slurm nodelist's
    addr: str | None = None  # rendezvous address when nothing else names one


def _opt(env: Mapping[str, str], name: str, default: int) -> int:
    return _int(env, name) if env.get(name) else default


def _torchrun(env: Mapping[str, str], hosts: list[str], hostname: str) -> Placement:
    rank, world = _int(env, "RANK"), _int(env, "WORLD_SIZE")
    local_world = _opt(env, "LOCAL_WORLD_SIZE", world)
    node = _opt(env, "NODE_RANK", _opt(env, "GROUP_RANK", rank // max(local_world, 1)))
    return Placement(rank, world, _opt(env, "LOCAL_RANK", rank), local_world, node)


def _mpi(rank_var: str, world_var: str, local_var: str, local_world_var: str):
    """Intel MPI (PMI_*) and Open MPI (OMPI_COMM_WORLD_*): ranks placed in blocks per node (-ppn)."""

    def read(env: Mapping[str, str], hosts: list[str], hostname: str) -> Placement:
        rank, world, local_world = (
            _int(env, rank_var),
            _int(env, world_var),
            _opt(env, local_world_var, 1),
        )
        return Placement(rank, world, _opt(env, local_var, 0), local_world, rank // local_world)

    return read


def _slurm(env: Mapping[str, str], hosts: list[str], hostname: str) -> Placement:
    rank = _int(env, "SLURM_PROCID")
    world = _int(env, "SLURM_NTASKS" if env.get("SLURM_NTASKS") else "SLURM_NPROCS")
    node = _opt(env, "SLURM_NODEID", 0)
    tpn_text = _first(env, "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE")
    if not tpn_text:
        return Placement(
            rank,
            world,
            _opt(env, "SLURM_LOCALID", 0),
            world // max(len(hosts), 1),
            node,
            len(hosts),
        )
    tpn = parse_tasks_per_node(tpn_text, len(hosts) or None)
    if sum(tpn) != world:
        raise DistEnvError(
            f"SLURM_TASKS_PER_NODE={tpn_text!r} adds up to {sum(tpn)} tasks, SLURM_NTASKS is {world}",
            "the batch script's variables describe the job, not this step; run inside srun",
        )
    if node >= len(tpn):
        raise DistEnvError(
            f"SLURM_NODEID={node} but SLURM_TASKS_PER_NODE={tpn_text!r} lists {len(tpn)} nodes",
            "the allocation's variables disagree",
        )
    return Placement(rank, world, _opt(env, "SLURM_LOCALID", 0), tpn[node], node, len(hosts))


def _submitit_local(env: Mapping[str, str], hosts: list[str], hostname: str) -> Placement:
    rank, world = _int(env, "SUBMITIT_LOCAL_GLOBALID"), _int(env, "SUBMITIT_LOCAL_NTASKS")
    return Placement(
        rank,
        world,
        _opt(env, "SUBMITIT_LOCAL_LOCALID", rank),
        world,
        0,
        1,
        tuple(hosts) or (hostname,),
        "127.0.0.1",
    )


@dataclass(frozen=True)
class LaunchEnv:
    name: str
    needs: tuple[tuple[str, ...], ...]  # every group must have one variable set
    read: Callable[[Mapping[str, str], list[str], str], Placement]

    def present(self, env: Mapping[str, str]) -> bool:
        return all(any(env.get(v) for v in group) for group in self.needs)


# Most specific first: the launcher closest to the process wins.
LAUNCHERS: tuple[LaunchEnv, ...] = (
    LaunchEnv("torchrun", (("RANK",), ("WORLD_SIZE",)), _torchrun),
    LaunchEnv(
        "intel-mpi",
        (("PMI_RANK",), ("PMI_SIZE",)),
        _mpi("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
    ),
    LaunchEnv(
        "open-mpi",
        (("OMPI_COMM_WORLD_RANK",), ("OMPI_COMM_WORLD_SIZE",)),
        _mpi(
            "OMPI_COMM_WORLD_RANK",
            "OMPI_COMM_WORLD_SIZE",
            "OMPI_COMM_WORLD_LOCAL_RANK",
            "OMPI_COMM_WORLD_LOCAL_SIZE",
        ),
    ),
    LaunchEnv("slurm", (("SLURM_PROCID",), ("SLURM_NTASKS", "SLURM_NPROCS")), _slurm),
    LaunchEnv(
        "submitit-local",
        (("SUBMITIT_LOCAL_GLOBALID",), ("SUBMITIT_LOCAL_NTASKS",)),
        _submitit_local,
    ),
)
SINGLE = Placement(0, 1, 0, 1, 0, 1, None, "127.0.0.1")


def detect(env: Mapping[str, str], hostname: str = "localhost") -> DistEnv:
    """Map a process environment to ranks, hosts and rendezvous address."""
    hosts = _slurm_hosts(env)
    job_id = (
        _first(
            env, "SLURM_JOB_ID", "SLURM_JOBID", "HPCQA_JOB_ID", "SUBMITIT_LOCAL_JOB_ID", "PMI_JOBID"
        )
        or ""
    )
    port = _job_port(env)
    launcher = next((la for la in LAUNCHERS if la.present(env)), None)
    source = launcher.name if launcher else "single"
    lay = launcher.read(env, hosts, hostname) if launcher else SINGLE
    _check(source, lay.rank, lay.world, lay.local, lay.local_world, lay.node, lay.nnodes)
    hosts = list(lay.hosts) if lay.hosts is not None else hosts
    addr = env.get("MASTER_ADDR") or (hosts[0] if hosts and not lay.addr else None) or lay.addr
    if addr is None:
        if lay.world > lay.local_world:
            raise DistEnvError(
                f"{source}: {lay.world} ranks span several nodes but no MASTER_ADDR and no "
                "Slurm nodelist is set",
                "export MASTER_ADDR=<first host> for every rank",
            )
        addr = "127.0.0.1"
    return DistEnv(
        source=source,
        rank=lay.rank,
        world_size=lay.world,
        local_rank=lay.local,
        local_world_size=lay.local_world,
        node_rank=lay.node,
        master_addr=addr,
        master_port=port,
        hosts=tuple(hosts),
        job_id=job_id,
    )
