"""hpcqa command line. The only module that prints tables or turns errors into exit codes.

Heavy modules (torch, transformers, datasets) are never imported here; the training side imports
them inside the ranks.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Sequence

from hpcqa import __version__
from hpcqa.errors import HpcqaError

EPILOG = """examples:
  hpcqa submit configs/quickstart.toml                 train on this machine (local executor)
  hpcqa submit configs/squad_spr.toml --dry-run        show every rank's CPUs and environment
  hpcqa submit configs/squad_spr.toml --set cluster.nodes=2 --set train.learning_rate=5e-5
  hpcqa render configs/squad_spr.toml --launcher mpirun -o job.sbatch
  hpcqa env --json                                     inside srun/salloc: what this process maps to
"""


def _add_config(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", help="job config (TOML), e.g. configs/quickstart.toml")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key; VALUE is parsed as TOML, else taken as a string "
                        "(repeatable): --set train.learning_rate=5e-5")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hpcqa", description="Distributed question-answering fine-tuning on Xeon CPU clusters: "
                                  "one TOML file -> one rank per socket, pinned, on Slurm or locally.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"hpcqa {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("submit", help="run a config (Slurm through submitit, or the local executor)")
    _add_config(p)
    p.add_argument("--dry-run", action="store_true", help="print the launch plan; run nothing")
    p.add_argument("--json", action="store_true", help="with --dry-run: the plan as one JSON object")
    p.add_argument("--no-wait", action="store_true", help="Slurm: return after submission")

    p = sub.add_parser("render", help="write a standalone sbatch script (srun or mpirun launcher)")
    _add_config(p)
    p.add_argument("-o", "--output", help="write the script here (default: stdout)")
    p.add_argument("--launcher", choices=["srun", "mpirun"], help="default: launch.launcher")
    p.add_argument("--python", default="python3", help="interpreter on the nodes (default: python3)")

    p = sub.add_parser("env", help="what this process's launcher environment maps to")
    p.add_argument("--json", action="store_true", help="one JSON object")

    p = sub.add_parser("hosts", help="expand a Slurm nodelist, one host per line")
    p.add_argument("nodelist", nargs="?", help="default: $SLURM_JOB_NODELIST")

    p = sub.add_parser("status", help="jobs: state, nodes, elapsed, progress, EM/F1 (no torch import)")
    p.add_argument("jobs", nargs="*", help="job ids (default: the 20 most recent)")
    p.add_argument("--all", action="store_true", help="every job in the registry")
    p.add_argument("--json", action="store_true", help="a JSON list of job objects")
    p.add_argument("--watch", action="store_true", help="refresh every few seconds until all are finished")
    p.add_argument("--registry", help="registry file (default: $HPCQA_REGISTRY or logs/registry.sqlite)")

    p = sub.add_parser("logs", help="a rank's log (stderr; --stdout for stdout)")
    p.add_argument("job")
    p.add_argument("--rank", type=int, default=None, help="default: the first rank that failed, else 0")
    p.add_argument("--stdout", action="store_true")
    p.add_argument("-n", "--lines", type=int, default=0, help="only the last N lines")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing until the job ends")
    p.add_argument("--registry")

    p = sub.add_parser("cancel", help="cancel a job (scancel; local: stop every rank)")
    p.add_argument("jobs", nargs="+")
    p.add_argument("--registry")

    p = sub.add_parser("doctor", help="check Slurm, accounting, node topology, libraries, torch, backend")
    p.add_argument("config", nargs="?", help="also check this config against the partition's nodes")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("validate", help="check configs; exit 2 on the first bad one")
    p.add_argument("configs", nargs="+")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")

    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 0
    try:
        return int(COMMANDS[args.command](args) or 0)
    except HpcqaError as e:
        print(e.render(), file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `hpcqa ... | head`
        return 0


# ------------------------------------------------------------------------------------------ verbs

def _plan(args: argparse.Namespace, launcher: str | None = None):
    from hpcqa import config, plan
    cfg = config.load(args.config, args.overrides)
    return plan.build_plan(cfg, plan.probe_host(), launcher=launcher)


def cmd_submit(args: argparse.Namespace) -> int:
    lp = _plan(args)
    if args.dry_run:
        from hpcqa import render
        root = os.path.join(lp.config.job.output_dir, lp.config.job.name)
        plan_path = os.path.join(os.path.abspath(root), "plans", "plan-<hash>.json")
        sbatch = render.submitit_sbatch(lp, plan_path, os.path.abspath(lp.job_dir_pattern)) \
            if lp.executor == "slurm" else None
        if args.json:
            out = lp.to_json()
            out["sbatch"] = sbatch
            print(json.dumps(out, indent=2, sort_keys=True))
        else:
            _print_plan(lp, sbatch)
        return 0
    from hpcqa.executors import run_plan
    return run_plan(lp, wait=not args.no_wait)


def cmd_render(args: argparse.Namespace) -> int:
    from hpcqa import render
    lp = _plan(args, launcher=None)
    launcher = args.launcher or lp.config.launch.launcher
    if lp.launcher != launcher or lp.executor != "slurm":
        from hpcqa import plan as planmod
        from dataclasses import replace
        cfg = replace(lp.config, cluster=replace(lp.config.cluster, executor="slurm"))
        lp = planmod.build_plan(cfg, planmod.probe_host(), launcher=launcher)
    text = render.standalone(lp, launcher, python=args.python)
    if args.output:
        tmp = Path(args.output + ".tmp")
        tmp.write_text(text)
        os.chmod(tmp, 0o755)
        os.replace(tmp, args.output)
        print(f"wrote {args.output} ({launcher}, {lp.world_size} ranks on {lp.nodes} node(s)); "
              f"submit with: sbatch {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def cmd_env(args: argparse.Namespace) -> int:
    import socket
    from hpcqa import distenv
    d = distenv.detect(os.environ, socket.gethostname())
    if args.json:
        print(json.dumps(d.to_json(), indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table
    t = Table(title=f"launcher environment ({d.source})", show_header=False)
    for k, v in d.to_json().items():
        t.add_row(k, ",".join(v) if isinstance(v, list) else str(v))
    Console().print(t)
    return 0


def cmd_hosts(args: argparse.Namespace) -> int:
    from hpcqa import distenv
    from hpcqa.errors import UsageError
    text = args.nodelist or os.environ.get("SLURM_JOB_NODELIST", "")
    if not text:
        raise UsageError("no nodelist given and SLURM_JOB_NODELIST is not set",
                         "pass one: hpcqa hosts 'cn[01-04]'")
    print("\n".join(distenv.expand_nodelist(text)))
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from hpcqa import config, plan
    for path in args.configs:
        cfg = config.load(path, args.overrides)
        lp = plan.build_plan(cfg, plan.HostProbe(has_sbatch=True))
        print(f"ok  {path}: {lp.world_size} ranks ({lp.nodes} x {lp.ranks_per_node}), "
              f"{len(lp.local_ranks[0].compute)} compute cores per rank")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from hpcqa import registry, status
    reg = registry.Registry(args.registry, create=False)
    while True:
        views, source = status.collect(reg, args.jobs, args.all) if reg.exists else ([], "none")
        if args.jobs and not views:
            from hpcqa.errors import UsageError
            raise UsageError(f"no job {' '.join(args.jobs)} in {reg.path}", "`hpcqa status --all` lists the jobs")
        if args.json:
            print(json.dumps([v.to_json() for v in views], indent=2, default=str))
        else:
            _print_status(views, source, reg.path)
        if not args.watch or all(status.is_final(v.state) for v in views):
            return 0
        import time
        time.sleep(5)


def _print_status(views, source: str, path) -> None:
    from rich.console import Console
    from rich.table import Table
    from hpcqa import status
    con = Console()
    if not views:
        con.print(f"no jobs in {path}")
        return
    t = Table(title=f"jobs ({path}; states from {source})")
    for col in ("id", "name", "executor", "state", "nodes", "ranks", "elapsed", "progress / result", "exit"):
        t.add_column(col, overflow="fold")
    colour = {"ok": "green", "failed": "red", "cancelled": "yellow", "running": "cyan", "pending": "blue"}
    for v in views:
        c = colour.get(status.outcome(v.state), "white")
        t.add_row(v.id, v.name, v.executor, f"[{c}]{v.state}[/]", str(v.nodes), str(v.world_size), v.elapsed,
                  status.progress_text(v), v.exit_code or "")
    con.print(t)


def _find_job(reg_path, job_id: str):
    from hpcqa import registry
    from hpcqa.errors import UsageError
    reg = registry.Registry(reg_path, create=False)
    rows = [r for r in reg.jobs([job_id]) if r.id == job_id] if reg.exists else []
    if not rows:
        raise UsageError(f"no job {job_id!r} in {reg.path}", "`hpcqa status --all` lists the jobs")
    return reg, rows[0]


def cmd_logs(args: argparse.Namespace) -> int:
    import time
    from hpcqa import status
    from hpcqa.errors import UsageError
    reg, row = _find_job(args.registry, args.job)
    folder = Path(row.folder)
    rank = args.rank
    if rank is None:
        from hpcqa.executors.common import failed_ranks
        failed = failed_ranks(folder)
        rank = int(failed[0]["rank"]) if failed else 0
    if not 0 <= rank < row.world_size:
        raise UsageError(f"job {row.id} has ranks 0-{row.world_size - 1}, not {rank}", "pass --rank N in that range")
    suffix = "out" if args.stdout else "err"
    matches = sorted(folder.glob(f"*_{rank}_log.{suffix}")) + sorted(folder.glob(f"rank-{rank}.log"))
    if not matches and not args.follow:
        raise UsageError(f"no log for rank {rank} in {folder} yet", "the job may still be pending; try -f")
    pos = 0
    while True:
        matches = matches or sorted(folder.glob(f"*_{rank}_log.{suffix}"))
        if matches:
            text = matches[0].read_text(errors="replace")
            chunk = text[pos:]
            if pos == 0 and args.lines:
                chunk = "\n".join(chunk.splitlines()[-args.lines:]) + "\n"
            sys.stdout.write(chunk)
            sys.stdout.flush()
            pos = len(text)
        if not args.follow:
            return 0
        views, _ = status.collect(reg, [row.id])
        if views and status.is_final(views[0].state):
            return 0
        time.sleep(1)


def cmd_cancel(args: argparse.Namespace) -> int:
    from hpcqa import status
    from hpcqa.errors import SubmitError
    rc = 0
    for job_id in args.jobs:
        reg, row = _find_job(args.registry, job_id)
        folder = Path(row.folder)
        if row.final:
            print(f"job {row.id} already ended ({row.state})")
            continue
        if row.executor == "slurm":
            proc = status.run(["scancel", row.id])
            if proc.returncode != 0:
                raise SubmitError(f"scancel {row.id} failed: {proc.stderr.strip()}", "check the id with hpcqa status")
        else:
            from hpcqa.executors.local import cancel as cancel_local
            if not cancel_local(int(row.id)):
                print(f"job {row.id} is not running")
                continue
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "cancelled").write_text("cancelled by hpcqa cancel\n")
        print(f"cancelled {row.executor} job {row.id}")
    return rc


def cmd_doctor(args: argparse.Namespace) -> int:
    from hpcqa import doctor
    cfg = None
    if args.config:
        from hpcqa import config
        cfg = config.load(args.config, args.overrides)
    checks = doctor.run_checks(cfg)
    if args.json:
        print(json.dumps([c.__dict__ for c in checks], indent=2))
    else:
        mark = {"ok": "[green]ok[/]     ", "warning": "[yellow]warning[/]", "error": "[red]error[/]  "}
        from rich.console import Console
        con = Console()
        for c in checks:
            con.print(f"{mark[c.level]} {c.name}: {c.message}" + (f"\n          fix: {c.fix}" if c.fix else ""),
                      highlight=False)
    return 1 if any(c.level == "error" for c in checks) else 0


COMMANDS = {"submit": cmd_submit, "render": cmd_render, "env": cmd_env, "hosts": cmd_hosts,
            "validate": cmd_validate, "status": cmd_status, "logs": cmd_logs, "cancel": cmd_cancel,
            "doctor": cmd_doctor}


# ------------------------------------------------------------------------------------------ output

def _print_plan(lp: Any, sbatch: str | None) -> None:
    from rich.console import Console
    from rich.panel import Panel
    from rich.syntax import Syntax
    from rich.table import Table
    from hpcqa.topology import cpu_list

    con = Console()
    c = lp.config.cluster
    res = Table.grid(padding=(0, 2))
    res.add_row("config", lp.config.source)
    res.add_row("executor", f"{lp.executor}" + (f" (cluster.executor = {c.executor})" if c.executor == "auto" else ""))
    res.add_row("ranks", f"{lp.world_size} = {lp.nodes} node(s) x {lp.ranks_per_node} (one per socket)")
    res.add_row("per rank", f"{lp.cpus_per_task} CPUs allocated, {len(lp.local_ranks[0].compute)} compute "
                            f"cores, {len(lp.local_ranks[0].ccl)} CCL cores")
    res.add_row("ddp backend", f"{lp.backend.resolved} ({lp.backend.reason})")
    if lp.executor == "slurm":
        res.add_row("time / mem", f"{c.time_limit_min} min / " + (f"{c.mem_gb} GB" if c.mem_gb else "default"))
        res.add_row("hosts", "unknown until Slurm allocates the job")
    for k, v in lp.deferred_env.items():
        res.add_row(k, v)
    res.add_row("job folder", lp.job_dir_pattern + "  (%j = job id)")
    m = lp.config.model.name_or_path
    d = lp.config.data.dataset or lp.config.data.train_file
    res.add_row("job", f"{m} on {d}")
    con.print(Panel(res, title="hpcqa plan (dry run: nothing submitted)", expand=False))
    for w in lp.warnings:
        con.print(f"[yellow]warning:[/] {w}")

    common = dict(lp.ranks[0].env)
    for r in lp.ranks[1:]:
        common = {k: v for k, v in common.items() if r.env.get(k) == v}
    if common:
        t = Table(title="environment shared by every rank", show_header=False)
        t.add_column("name", no_wrap=True)
        t.add_column("value", overflow="fold")
        for k, v in common.items():
            t.add_row(k, v)
        con.print(t)
    t = Table(title="ranks")
    for col in ("rank", "node", "local", "CPUs"):
        t.add_column(col, no_wrap=True)
    t.add_column("environment of this rank", overflow="fold")
    for r in lp.ranks:
        own = "\n".join(f"{k}={v}" for k, v in r.env.items() if k not in common)
        t.add_row(str(r.rank), str(r.node_rank), str(r.local_rank), cpu_list(r.cpus) if r.cpus else "unbound", own)
    con.print(t)
    if sbatch:
        con.print(Panel(Syntax(sbatch, "bash", word_wrap=True), title="sbatch script (as submitit will submit it)"))
