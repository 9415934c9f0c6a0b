"""The hosts verb: a Slurm nodelist expanded, one host per line (the mpirun job script runs it on the first
node: standard library and the pure core only)."""

from __future__ import annotations

import argparse
import os

from hpcqa.core import distenv
from hpcqa.errors import UsageError


def cmd_hosts(args: argparse.Namespace) -> int:
    text = args.nodelist or os.environ.get("SLURM_JOB_NODELIST", "")
    if not text:
        raise UsageError(
            "no nodelist given and SLURM_JOB_NODELIST is not set",
            "pass one: hpcqa hosts 'cn[01-04]'",
        )
    print("\n".join(distenv.expand_nodelist(text)))
    return 0
