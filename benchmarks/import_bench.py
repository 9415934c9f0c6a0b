"""What a training rank's imports cost in CPU, with Python's cyclic garbage collector on (as Python starts) and
paused (hpcqa.rank.job.load_trainer, what every training rank does), for an unbound and a bound rank.

    python benchmarks/import_bench.py [--runs 6] [--markdown]

Each variant is a whole interpreter that imports the trainer (torch, transformers, datasets, hpcqa's rank code)
and exits; the variants run in turn (A B A B ...), so a drift of a shared machine's speed touches both alike. The
CPU time (user + system) of each process is read with getrusage, the medians and their ratio are printed, with
the machine they ran on.
"""

from __future__ import annotations

import argparse
import platform
import resource
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

BOUND = "import os; os.environ['HPCQA_BOUND_CPUS'] = ','.join(map(str, sorted(os.sched_getaffinity(0))))"
VARIANTS = {
    "collector on (a plain import)": "from hpcqa.rank.train.run import run_rank",
    "collector paused, then frozen (load_trainer)": "from hpcqa.rank.job import load_trainer; load_trainer()",
    # a bound rank (every planned rank is) imports torch first, to widen its main thread: outside the pause (before
    # load_trainer did the widening itself), and inside it (load_trainer now)
    "bound rank, torch imported before the pause": f"{BOUND}; from hpcqa.rank.binding import widen_main_thread; "
    "widen_main_thread(); from hpcqa.rank.job import load_trainer; "
    "load_trainer()",
    "bound rank, all in the pause (load_trainer)": f"{BOUND}; from hpcqa.rank.job import load_trainer; load_trainer()",
}


def cpu_of(code: str) -> float:
    """CPU seconds (user + system) of one `python -c CODE` run to its end."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def machine() -> str:
    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
        flags = Path("/proc/cpuinfo").read_text()
        name += ", AMX" if "amx_bf16" in flags else ", no AMX"
    except OSError:
        pass
    return name


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    cpu_of(next(iter(VARIANTS.values())))  # warm the page cache and the .pyc files
    for _ in range(args.runs):
        for name, code in VARIANTS.items():
            times[name].append(cpu_of(code))
    base = statistics.median(next(iter(times.values())))
    print(
        f"machine: {machine()}; {args.runs} runs each, interleaved; python {platform.python_version()}"
    )
    if args.markdown:
        print("| variant | CPU s (median) | runs | vs first |\n|---|---|---|---|")
    for name, got in times.items():
        med = statistics.median(got)
        runs = ", ".join(f"{t:.2f}" for t in got)
        if args.markdown:
            print(f"| {name} | {med:.2f} | {runs} | {base / med:.2f}x |")
        else:
            print(f"{name:46} {med:6.2f} s  ({runs})  {base / med:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
