"""How much a sweep's dry run costs next to one config's: `hpcqa submit CONFIG --dry-run --json` with 1 and with
N variants (a seed axis), the whole command timed as a user runs it, best of R runs.

    python benchmarks/sweep_dry_run_bench.py [--config configs/squad_spr.toml] [--variants 1000] [--repeat 3]

The target (issue 20): the 1,000-variant dry run at most 8x the single config's.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def timed(argv: list[str], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        r = subprocess.run(
            [sys.executable, "-m", "hpcqa", *argv], cwd=ROOT, capture_output=True, text=True
        )
        best = min(best, time.perf_counter() - t0)
        if r.returncode != 0:
            raise SystemExit(f"hpcqa {' '.join(argv[:3])} ... failed: {r.stderr[-500:]}")
    return best


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="configs/squad_spr.toml")
    ap.add_argument("--variants", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    base = ["submit", a.config, "--dry-run", "--json", "--set", "cluster.executor=slurm"]
    seeds = json.dumps(list(range(1, a.variants + 1)))
    one = timed(base, a.repeat)
    many = timed(base + ["--set", f"sweep.train.seed={seeds}"], a.repeat)
    print(f"single config dry run:        {one:6.2f} s")
    print(f"{a.variants}-variant sweep dry run: {many:6.2f} s")
    print(f"ratio: {many / one:.1f}x (target <= 8x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
