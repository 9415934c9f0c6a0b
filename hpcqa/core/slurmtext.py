"""Slurm's `scontrol show` text, parsed (pure): the front's and executors' commands (executors/slurmcli.py) and a
rank's questions after its SIGTERM checkpoint (rank/exits.py) read it the same way."""

from __future__ import annotations

import re


def show_fields(line: str) -> dict[str, str]:
    """One line of `scontrol show ... -o` -> its KEY=VALUE fields (a value runs to the next space)."""
    return {m[1]: m[2] for m in re.finditer(r"(\w+)=(\S*)", line)}


def config_value(scontrol_config: str, key: str) -> str | None:
    """One value of `scontrol show config`."""
    for line in scontrol_config.splitlines():
        k, _, v = line.partition("=")
        if k.strip() == key:
            return v.strip()
    return None
