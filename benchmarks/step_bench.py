"""The fastest correct step: hpcqa's optimizer and DDP settings against run_qa.py's Trainer settings, at the same
pinned layout, with EM/F1.

    python benchmarks/step_bench.py [--markdown] [--epochs 2] [--rows 1,3 --repeat 2]

Each row is a real `hpcqa submit configs/quickstart.toml` on the local executor (2 ranks pinned, 1 core each,
MiniLM, fp32, the same seed), run one after another on a quiet machine:

- run_qa.py's step: what transformers' TrainingArguments give run_qa.py by default (AdamW fused on torch >= 2.8,
  DDP copying gradients into its buckets, 25 MB buckets);
- the per-parameter AdamW loop (the default of transformers < 5 or torch < 2.8);
- hpcqa's default: fused AdamW, gradients as views into DDP's buckets (no copy per step);
- the same with 100 MB buckets (one all-reduce for MiniLM's 90 MB of gradients instead of four).
"""

from __future__ import annotations

import argparse
import sys

from _submit import submit

VARIANTS = [
    (
        "run_qa.py's Trainer settings (fused AdamW, gradients copied into buckets)",
        ["train.optim=adamw_torch_fused", "train.ddp_bucket_view=false"],
    ),
    (
        "per-parameter AdamW (transformers < 5 / torch < 2.8 default)",
        ["train.optim=adamw_torch", "train.ddp_bucket_view=false"],
    ),
    ("hpcqa default (fused AdamW, gradients as bucket views)", []),
    ("hpcqa default, 100 MB buckets", ["train.ddp_bucket_cap_mb=100"]),
]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--epochs", type=float, default=2.0)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument(
        "--rows",
        default="",
        help="which rows, 1-based and comma-separated (the first is the baseline "
        "the others are compared with; default: all)",
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="passes over the rows, interleaved; the table shows the "
        "mean and each pass's samples/s",
    )
    a = ap.parse_args(argv)
    chosen = [VARIANTS[int(i) - 1] for i in a.rows.split(",")] if a.rows else VARIANTS
    # every feature padded to max_seq_length in every row: the step's settings at fixed shapes (padding itself is
    # benchmarks/padding_bench.py's subject)
    common = [
        "cluster.executor=local",
        "train.bf16=false",
        f"train.num_train_epochs={a.epochs}",
        "train.seed=42",
        "data.pad_to_max_length=true",
    ]
    runs: dict[str, list[dict]] = {name: [] for name, _ in chosen}
    for _ in range(max(a.repeat, 1)):
        for name, extra in chosen:
            res = submit("configs/quickstart.toml", common + extra)
            runs[name].append(res)
            print(f"{name}: {res.get('steady_samples_per_second') or res}", file=sys.stderr)

    def mean_sps(results: list[dict]) -> float | None:
        got = [
            r["steady_samples_per_second"] for r in results if r.get("steady_samples_per_second")
        ]
        return sum(got) / len(got) if len(got) == len(results) else None

    base = mean_sps(runs[chosen[0][0]])
    if a.markdown:
        print(
            "| step (2 ranks x 1 core, MiniLM, fp32) | steady samples/s | vs run_qa.py's | EM | F1 |"
        )
        print("|---|---|---|---|---|")
    for name, results in runs.items():
        sps, last = mean_sps(results), results[-1]
        each = ", ".join(f"{r.get('steady_samples_per_second') or 0:.2f}" for r in results)
        passes = f" ({each})" if len(results) > 1 else ""
        cells = [
            name,
            (f"{sps:.2f}" if sps else "failed") + passes,
            f"{sps / base:.3f}x" if sps and base else "-",
            f"{last.get('exact_match', float('nan')):.1f}",
            f"{last.get('f1', float('nan')):.1f}",
        ]
        print("| " + " | ".join(cells) + " |" if a.markdown else "  ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
