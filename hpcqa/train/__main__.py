"""`python -m hpcqa.train --plan PLAN.json`: one rank, as started by a rendered sbatch script.

Runs behind the rank wrapper (python -m hpcqa.rank); the job folder comes from HPCQA_JOB_DIR.
"""

import json
import os
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "--plan":
        print("usage: python -m hpcqa.train --plan PLAN.json", file=sys.stderr)
        return 2
    from hpcqa.train.run import run_rank
    plan = json.loads(Path(argv[1]).read_text())
    job_dir = Path(os.environ.get("HPCQA_JOB_DIR") or Path(argv[1]).parent)
    run_rank(plan, job_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
