"""Ranks per socket x precision on this machine, and where a rank's non-OpenMP threads run.

    python benchmarks/layout_bench.py [--steps 30] [--model builtin:minilm] [--seq 256] [--markdown]

Every row is a real `hpcqa submit` on the local executor of configs/quickstart.toml with the node
declared as it is (one socket, all allowed cores), batch 8 per rank, training only. The number is
hpcqa's steady train samples/s: optimizer steps after a 3-step warm-up, all ranks together (not
start-up, not checkpointing). The placement rows compare the rank's main thread widened back to its
pool after OpenMP starts (hpcqa) against leaving it where OpenMP bound it (HPCQA_KEEP_OPENMP_BINDING=1,
the old behaviour: DataLoader workers and gloo threads then share OpenMP thread 0's core).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from _submit import markdown, submit  # noqa: E402


def run(overrides: list[str], env: dict[str, str] | None = None) -> dict:
    # features padded to the sequence length: every step the same work, so the layouts are compared on equal terms
    return submit("configs/quickstart.toml", ["data.pad_to_max_length=true", *overrides], env)


def main() -> int:
    from hpcqa.record.tuned import default_candidates

    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--model", default="builtin:minilm")
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument(
        "--precisions",
        default="fp32,bf16",
        help="bf16 is emulated (very slow) without AMX/avx512_bf16",
    )
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    cores = len(os.sched_getaffinity(0))
    base = [
        f"train.max_steps={a.steps + 3}",
        "train.timing_warmup_steps=3",
        "train.do_eval=false",
        f"model.name_or_path={json.dumps(a.model)}",
        f"train.max_seq_length={a.seq}",
        f"train.doc_stride={a.seq // 4}",
        "train.per_device_train_batch_size=8",
        "cluster.sockets_per_node=1",
        f"cluster.cores_per_socket={cores}",
        "data.synthetic_train_examples=1200",
    ]
    rows = []
    for precision in ["false" if x == "fp32" else "true" for x in a.precisions.split(",")]:
        for rps in default_candidates(cores):
            res = run(base + [f"launch.ranks_per_socket={rps}", f"train.bf16={precision}"])
            rows.append(
                (
                    f"{rps} rank(s) x {cores // rps} thread(s)",
                    "bf16" if precision == "true" else "fp32",
                    res.get("steady_samples_per_second"),
                    res.get("error"),
                )
            )
            print(rows[-1], flush=True)
    placement = base + [
        "launch.ranks_per_socket=1",
        "train.bf16=false",
        "train.dataloader_num_workers=2",
    ]
    for name, env in (
        ("1 rank, 2 DataLoader workers: main thread widened to the pool (hpcqa)", {}),
        (
            "1 rank, 2 DataLoader workers: left on OpenMP's first core (before)",
            {"HPCQA_KEEP_OPENMP_BINDING": "1"},
        ),
    ):
        res = run(placement, env)
        rows.append((name, "fp32", res.get("steady_samples_per_second"), res.get("error")))
        print(rows[-1], flush=True)
    if a.markdown:
        markdown(
            f"layout ({cores} cores, {a.model}, seq {a.seq}, batch 8/rank, {a.steps} timed steps)",
            "steady train samples/s",
            rows,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
