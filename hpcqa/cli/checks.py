"""The doctor verb: Slurm, accounting, the node, libraries, the backend, a config against the partition."""

from __future__ import annotations

import argparse
import json
from typing import Any, Sequence

from rich.markup import escape
from rich.table import Table

from hpcqa import doctor
from hpcqa.cli.console import Console
from hpcqa.core import config


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
        grid.add_row(
            mark[c.level],
            escape(f"{c.name}: {c.message}") + (f"\nfix: {escape(c.fix)}" if c.fix else ""),
        )
    Console().print(grid, highlight=False)
