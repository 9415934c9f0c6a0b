"""How fast `hpcqa status` answers with N jobs in the registry, and how many scheduler calls it makes.

    python scripts/devcluster.py up --dir /tmp/hq-slurm --accounting   # or any Slurm you can reach
    SLURM_CONF=/tmp/hq-slurm/slurm.conf python benchmarks/status_bench.py [--jobs 1000]

Measures (a) status.collect in-process, counting calls through the one runner, and (b) the whole CLI
(`python -m hpcqa status --all --json`) including interpreter start-up; checks torch isn't imported.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from hpcqa.executors import jobs
from hpcqa.executors.slurm.cli import Slurm, run_command  # noqa: E402
from hpcqa.record import registry


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1000)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "r.sqlite"
        reg = registry.Registry(db)
        reg.add_many(
            dict(
                id=str(900000 + i),
                name="bench",
                executor="slurm",
                folder=f"{tmp}/{i}",
                config={},
                source="bench",
                nodes=1,
                world_size=2,
            )
            for i in range(a.jobs)
        )
        calls = []
        counting = Slurm(lambda argv: (calls.append(argv[0]), run_command(argv))[1])
        t = time.perf_counter()
        views, source = jobs.collect(reg, counting, all_jobs=True)
        dt = time.perf_counter() - t
        print(
            f"collect: {len(views)} jobs in {dt * 1000:.0f} ms; scheduler calls: "
            f"{', '.join(f'{c} x{calls.count(c)}' for c in sorted(set(calls)))}; source {source}"
        )
        t = time.perf_counter()
        r = subprocess.run(
            [sys.executable, "-m", "hpcqa", "status", "--all", "--json", "--registry", str(db)],
            capture_output=True,
            text=True,
            env=os.environ,
        )
        print(
            f"CLI `status --all --json`: {time.perf_counter() - t:.2f} s wall (exit {r.returncode})"
        )
        code = (
            "import sys; from hpcqa.cli import main; import io, contextlib\n"
            f"with contextlib.redirect_stdout(io.StringIO()): main(['status', '--all', '--registry', {str(db)!r}])\n"
            "print('torch imported:', 'torch' in sys.modules)"
        )
        print(
            subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True
            ).stdout.strip()
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
