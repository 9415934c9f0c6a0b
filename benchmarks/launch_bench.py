"""Throughput of launch layouts on this machine: pinned ranks vs unpinned/oversubscribed vs one rank.

    python benchmarks/launch_bench.py [--config configs/quickstart.toml] [--steps 30] [--model builtin:minilm]

Each variant is a real `hpcqa submit` on the local executor (training only, fixed number of steps);
the number is the Trainer's train_samples_per_second (all ranks together). Prints a table and, with
--markdown, the rows for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from _submit import markdown, submit  # noqa: E402


def variants(ncores: int) -> list[tuple[str, list[str]]]:
    half = max(ncores // 2, 1)
    return [
        (
            f"2 ranks pinned, {half} thread(s) each (hpcqa)",
            [
                "cluster.sockets_per_node=2",
                f"cluster.cores_per_socket={half}",
                "launch.ranks_per_socket=1",
            ],
        ),
        (
            f"2 ranks unpinned, {ncores} threads each (torch default: oversubscribed)",
            [
                "cluster.sockets_per_node=2",
                f"cluster.cores_per_socket={half}",
                "launch.ranks_per_socket=1",
                "launch.bind=false",
                f"launch.omp_num_threads={ncores}",
            ],
        ),
        (
            f"1 rank, {ncores} threads (all cores)",
            [
                "cluster.sockets_per_node=1",
                f"cluster.cores_per_socket={ncores}",
                "launch.ranks_per_socket=1",
            ],
        ),
    ]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="configs/quickstart.toml")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--model", default="builtin:minilm")
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    ncores = len(os.sched_getaffinity(0))
    base = [
        f"train.max_steps={a.steps}",
        "train.do_eval=false",
        f"model.name_or_path={a.model}",
        f"train.max_seq_length={a.seq}",
        f"train.doc_stride={a.seq // 4}",
        "train.per_device_train_batch_size=8",
        "train.save_steps=100000",
        "data.synthetic_train_examples=1200",
    ]
    rows = []
    for precision in ("false", "true"):
        for name, ov in variants(ncores):
            res = submit(a.config, base + ov + [f"train.bf16={precision}"])
            sps = res.get("train_samples_per_second")
            rows.append((name, "bf16" if precision == "true" else "fp32", sps, res.get("error")))
            print(
                f"{name:<62} {rows[-1][1]:<5} "
                + (f"{sps:8.2f} samples/s" if sps else f"FAILED {res.get('error')}"),
                flush=True,
            )
    if a.markdown:
        markdown(
            f"layout ({ncores} cores, {a.model}, seq {a.seq}, batch 8/rank, {a.steps} steps)",
            "train samples/s",
            rows,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
