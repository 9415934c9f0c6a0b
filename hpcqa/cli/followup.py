"""`python -m hpcqa.cli.followup STATE.json`: a search's follow-up job on Slurm (executors/slurm/followup.py does the
work; this prints its lines into the job's log, and a bad state file is one line and exit 2)."""

from __future__ import annotations

import sys

from hpcqa.errors import HpcqaError
from hpcqa.executors.slurm import followup


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m hpcqa.cli.followup STATE.json", file=sys.stderr)
        return 2
    try:
        return followup.next_batch(argv[0], lambda m: print(m, flush=True))
    except (HpcqaError, ValueError, OSError) as e:
        print(f"hpcqa search follow-up: {getattr(e, 'message', e)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
