"""How fast the light verbs start: `hpcqa --help`, `status`, `logs` and the dry run, against `python -c pass`.

    python benchmarks/startup_bench.py [--runs 15]

Every command is a whole process with this interpreter, run in turn (pass, --help, status, ... then again), so a
drift of the machine's speed touches them alike; the medians and each one's ratio to `python -c pass` are printed.
Then what `python -X importtime -m hpcqa --help` imports of hpcqa, and whether the config model or a rank module is
among it (issue 41's rule: neither). The target: --help under 3x `python -c pass`.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def commands(registry: str) -> dict[str, list[str]]:
    py = [sys.executable]
    return {
        "python -c pass": [*py, "-c", "pass"],
        "hpcqa --help": [*py, "-m", "hpcqa", "--help"],
        "hpcqa status (empty registry)": [*py, "-m", "hpcqa", "status", "--registry", registry],
        "hpcqa logs (no such job)": [*py, "-m", "hpcqa", "logs", "1", "--registry", registry],
        "hpcqa submit --dry-run": [
            *py,
            "-m",
            "hpcqa",
            "submit",
            "configs/quickstart.toml",
            "--dry-run",
        ],
    }


def imported(argv: list[str]) -> list[str]:
    """The modules `python -X importtime ARGV...` imports, in order."""
    err = subprocess.run(
        [sys.executable, "-X", "importtime", *argv], capture_output=True, text=True, cwd=ROOT
    ).stderr
    return [
        line.rsplit("|", 1)[1].strip()
        for line in err.splitlines()
        if line.startswith("import time:") and "|" in line and not line.rstrip().endswith("package")
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cmds = commands(str(Path(tmp) / "registry.sqlite"))
        times: dict[str, list[float]] = {name: [] for name in cmds}
        for _ in range(a.runs + 1):  # the first round warms the caches and is not counted
            for name, argv in cmds.items():
                t = time.perf_counter()
                subprocess.run(argv, capture_output=True, cwd=ROOT)
                times[name].append(time.perf_counter() - t)
    base = statistics.median(times["python -c pass"][1:])
    print(f"{'command':<32} {'median ms':>10} {'x python -c pass':>17}")
    for name, values in times.items():
        med = statistics.median(values[1:])
        print(f"{name:<32} {1000 * med:>10.0f} {med / base:>17.2f}")
    mods = [m for m in imported(["-m", "hpcqa", "--help"]) if m.startswith("hpcqa")]
    bad = [m for m in mods if m == "hpcqa.core.config" or m.startswith("hpcqa.rank")]
    print(f"\n`hpcqa --help` imports {len(mods)} hpcqa modules: {', '.join(mods)}")
    print("the config model or a rank module among them: " + (", ".join(bad) if bad else "none"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
