"""The node verbs: topology (this node's sockets, NUMA nodes and cores; with a config, every local rank's pool), env (what
this process's launcher environment maps to)."""

from __future__ import annotations

import argparse
import json
import os
import socket
from pathlib import Path
from typing import Any

from rich.table import Table

from hpcqa.cli.console import Console
from hpcqa.cli.submit import ranges_in
from hpcqa.core import config, distenv, plan, topology
from hpcqa.core.topology import cpu_list
from hpcqa.errors import UsageError
from hpcqa.executors import hostprobe
from hpcqa.rank import wrapper as rank


def cmd_topology(args: argparse.Namespace) -> int:
    if args.sysfs and not Path(args.sysfs, "cpu").is_dir():
        raise UsageError(
            f"--sysfs {args.sysfs!r}: no cpu/ folder in it",
            "pass a folder laid out like /sys/devices/system (cpu/cpuN/topology, node/nodeK)",
        )
    allowed = topology.parse_cpu_list(args.allowed) if args.allowed else None
    node = topology.read_node(
        args.sysfs or "/sys/devices/system",
        allowed,
        None if args.sysfs else "/proc/cpuinfo",
        saved=bool(args.sysfs),
    )
    if not node.cpus:
        raise UsageError(
            "no usable CPU: --allowed names none of the node's online CPUs", "check --allowed"
        )
    view: dict[str, Any] = {"node": node.to_json()}
    if args.config:
        cfg = config.load(args.config, args.overrides)
        view = rank.node_view(plan.build_plan(cfg, hostprobe.probe_host()), node)
    if args.json:
        print(json.dumps(view, indent=2))
        return 0
    _print_topology(view)
    return 0


def _print_topology(view: dict) -> None:
    con, n = Console(), view["node"]
    con.print(
        f"this node: {len(n['sockets'])} socket(s), {len(n['numa_nodes'])} NUMA node(s), {n['cores']} cores, "
        f"{n['threads_per_core']} thread(s) per core",
        highlight=False,
    )
    t = Table()
    for col in ("socket", "cores", "CPUs"):
        t.add_column(col)
    for s in n["sockets"]:
        t.add_row(str(s["socket"]), str(s["cores"]), s["cpus"])
    con.print(t)
    numa = "; ".join(f"node {x['node']}: {x['cpus']}" for x in n["numa_nodes"])
    con.print(f"NUMA: {numa}", highlight=False)
    con.print(
        f"allowed CPUs: {n['allowed']} (online {n['online']}); ISA: {', '.join(n['isa']) or 'none of note'}",
        highlight=False,
    )
    if "ranks" not in view:
        return
    for note in view["notes"]:
        con.print(f"[yellow]note:[/] {note}")
    r = Table(title=f"local ranks (backend {view['backend']})")
    for col in ("rank", "socket", "NUMA", "CPUs", "CCL", "planned", "OMP_NUM_THREADS", "memory"):
        r.add_column(col)
    for x in view["ranks"]:
        r.add_row(
            str(x["local_rank"]),
            ",".join(map(str, x["socket"])),
            ",".join(map(str, x["numa"])),
            topology_list(x["cpus"]),
            topology_list(x["ccl"]),
            "same" if x["as_planned"] else topology_list(x["planned_cpus"]),
            x["env"].get("OMP_NUM_THREADS", "-"),
            x["membind"],
        )
    con.print(r)
    env = Table(title="environment of each local rank (as the rank wrapper sets it here)")
    env.add_column("rank", no_wrap=True)
    env.add_column("variable", no_wrap=True)
    env.add_column("value", overflow="fold")
    for x in view["ranks"]:
        for i, (k, v) in enumerate(sorted(x["env"].items())):
            env.add_row(str(x["local_rank"]) if i == 0 else "", k, ranges_in(str(v)))
    con.print(env)


def topology_list(cpus) -> str:
    return cpu_list(cpus) if cpus else "-"


def cmd_env(args: argparse.Namespace) -> int:

    d = distenv.detect(os.environ, socket.gethostname())
    if args.json:
        print(json.dumps(d.to_json(), indent=2))
        return 0
    t = Table(title=f"launcher environment ({d.source})", show_header=False)
    for k, v in d.to_json().items():
        t.add_row(k, ",".join(v) if isinstance(v, list) else str(v))
    Console().print(t)
    return 0
