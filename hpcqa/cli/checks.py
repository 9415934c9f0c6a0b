"""The checking verbs: validate (configs, each of them) and doctor (Slurm, accounting, the node, libraries, the
backend, a config against the partition)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from hpcqa import doctor, errors
from hpcqa.cli.say import plural, warn
from hpcqa.core import config, plan, sweep
from hpcqa.errors import HpcqaError
from hpcqa.executors import hostprobe


def cmd_validate(args: argparse.Namespace) -> int:
    found = hostprobe.extensions()  # asked once, for every config
    bad = 0
    for path in args.configs:  # every file is checked: one line each, exit 2 if any is bad
        try:
            raw = config.load_raw(path, args.overrides)
            host = plan.HostProbe(has_sbatch=True)
            if sweep.has_sweep(raw):
                # every variant of a [sweep] is validated as submit would, swept keys included
                sp = sweep.build(raw, str(path), host,
                                 lambda p: (sweep.DEFAULT_MAX_ARRAY_SIZE, "assumed: validate asks no scheduler"))
                lp, what = sp.plans[0], f"{len(sp.variants)} variants, the first: "
            else:
                lp, what = plan.build_plan(config.validate(raw, path, args.overrides), host), ""
        except HpcqaError as e:
            print(errors.for_terminal(e.render()), file=sys.stderr)
            bad += 1
            continue
        cores = len(lp.local_ranks[0].compute)
        print(f"ok  {path}: {what}{plural(lp.world_size, 'rank')} ({lp.nodes} x {lp.ranks_per_node}), "
              f"{plural(cores, 'compute core')} per rank")
        for w in plan.extension_warnings(lp.config, found):
            warn(w)
    if bad and len(args.configs) > 1:
        print(f"{bad} of {len(args.configs)} configs are not valid", file=sys.stderr)
    return 2 if bad else 0


def cmd_doctor(args: argparse.Namespace) -> int:
    cfg = None
    if args.config:
        cfg = config.load(args.config, args.overrides)
    checks = doctor.run_checks(cfg)
    if args.json:
        print(json.dumps([c.__dict__ for c in checks], indent=2))
    else:
        print_checks(checks)
    return 1 if any(c.level == "error" for c in checks) else 0


def print_checks(checks: Sequence[Any]) -> None:
    """doctor's lines: the mark in its own column, so that a wrapped message stays indented under its text."""
    mark = {"ok": "[green]ok[/]", "warning": "[yellow]warning[/]", "error": "[red]error[/]"}
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    for c in checks:
        grid.add_row(mark[c.level], escape(f"{c.name}: {c.message}") + (f"\nfix: {escape(c.fix)}" if c.fix else ""))
    Console().print(grid, highlight=False)
