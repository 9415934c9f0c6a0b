"""The fastest correct step: hpcqa's optimizer and DDP settings against run_qa.py's Trainer settings, at the same
pinned layout, with EM/F1.

    python benchmarks/step_bench.py [--markdown] [--epochs 2]

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
    ("run_qa.py's Trainer settings (fused AdamW, gradients copied into buckets)",
     ["train.optim=adamw_torch_fused", "train.ddp_bucket_view=false"]),
    ("per-parameter AdamW (transformers < 5 / torch < 2.8 default)",
     ["train.optim=adamw_torch", "train.ddp_bucket_view=false"]),
    ("hpcqa default (fused AdamW, gradients as bucket views)", []),
    ("hpcqa default, 100 MB buckets", ["train.ddp_bucket_cap_mb=100"]),
]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=float, default=2.0)
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args(argv)
    # every feature padded to max_seq_length in every row: the step's settings at fixed shapes (padding itself is
    # benchmarks/padding_bench.py's subject)
    common = ["cluster.executor=local", "train.bf16=false", f"train.num_train_epochs={a.epochs}", "train.seed=42",
              "data.pad_to_max_length=true"]
    rows = []
    for name, extra in VARIANTS:
        res = submit("configs/quickstart.toml", common + extra)
        rows.append((name, res))
        print(f"{name}: {res.get('steady_samples_per_second') or res}", file=sys.stderr)
    base = rows[0][1].get("steady_samples_per_second")
    if a.markdown:
        print("| step (2 ranks x 1 core, MiniLM, fp32) | steady samples/s | vs run_qa.py's | EM | F1 |")
        print("|---|---|---|---|---|")
    for name, res in rows:
        sps = res.get("steady_samples_per_second")
        cells = [name, f"{sps:.2f}" if sps else "failed", f"{sps / base:.3f}x" if sps and base else "-",
                 f"{res.get('exact_match', float('nan')):.1f}", f"{res.get('f1', float('nan')):.1f}"]
        print("| " + " | ".join(cells) + " |" if a.markdown else "  ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
