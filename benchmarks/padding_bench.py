"""hpcqa's default against run_qa.py's defaults on SQuAD-shaped data, side by side in one run.

    python benchmarks/padding_bench.py [--markdown] [--epochs 2] [--examples 1200] [--seeds 42] [--rows 1,2,3]
        [--precision false|true|auto]

Both rows are a real `hpcqa submit configs/quickstart.toml` on the local executor at the same pinned layout
(2 ranks x 1 core), the same model (all-MiniLM-L6-v2), precision (fp32), data (builtin:synthetic-squad with
data.synthetic_shape = "squad": contexts and questions as long as SQuAD v1.1's), max_seq_length 384, doc_stride 128,
per-device batch 12, the same seed and epochs:

- run_qa.py's defaults: every feature padded to 384 (its `pad_to_max_length = True`), random batches, DDP copying
  gradients into its buckets (what its TrainingArguments give);
- run_qa.py as a skilled user runs it: `--pad_to_max_length False` (each batch padded to its longest feature) and
  `--group_by_length` (transformers' LengthGroupedSampler, its batches dealt to the ranks round-robin);
- hpcqa's default: length-grouped batches in lockstep across the ranks, padded per batch to a multiple of
  data.pad_to_multiple_of, gradients as bucket views.

Both run_qa.py rows train with transformers' own step (SDPA attention, torch's dropout masks, autocast over fp32
weights under bf16), as run_qa.py does; hpcqa's row with its defaults (the fused attention, bulk masks, bf16 master
weights). The first row chosen (--rows) is the one the others are compared with.

Reported per row: steady train samples/s, the time to train the epochs (the Trainer's train runtime), EM/F1 on the
held-out questions, and MFU on text tokens and on all tokens. With several --seeds, each row runs once per seed
(interleaved) and the table gives each seed's F1, so the F1 difference can be read against the seed-to-seed noise.
"""

from __future__ import annotations

import argparse
import statistics
import sys

from _submit import submit

# run_qa.py's step is transformers' own: SDPA attention, torch's dropout masks, the Trainer's autocast over fp32
# weights (`--bf16`): neither peer row gets hpcqa's fused attention, bulk masks or bf16 master weights
STOCK_STEP = ["model.attention=sdpa", "model.dropout=torch", "train.bf16_weights=autocast"]
RUN_QA = STOCK_STEP + [
    "data.pad_to_max_length=true",
    "data.group_by_length=false",
    "train.ddp_bucket_view=false",
]
# the skilled peer: run_qa.py --pad_to_max_length False --group_by_length (transformers 5:
# --train_sampling_strategy group_by_length): each batch padded to its longest (no multiple on CPU), transformers'
# own LengthGroupedSampler dealt round-robin by accelerate
PEER = STOCK_STEP + [
    "data.pad_to_max_length=false",
    "data.group_by_length=true",
    "data.length_sampler=stock",
    "data.pad_to_multiple_of=1",
    "train.ddp_bucket_view=false",
]
HPCQA: list[str] = []


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--epochs", type=float, default=2.0)
    ap.add_argument(
        "--precision", choices=["auto", "true", "false"], default="false", help="train.bf16"
    )
    ap.add_argument("--examples", type=int, default=1200)
    ap.add_argument("--seeds", default="42", help="comma-separated train.seed values")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--rows", default="1,2,3", help="which rows, 1-based (1: run_qa.py's defaults)")
    a = ap.parse_args(argv)
    common = [
        "cluster.executor=local",
        "launch.ranks_per_socket=2",
        f"train.bf16={a.precision}",
        "model.name_or_path=builtin:minilm",
        "data.dataset=builtin:synthetic-squad",
        "data.synthetic_shape=squad",
        f"data.synthetic_train_examples={a.examples}",
        "data.synthetic_eval_examples=300",
        "train.max_seq_length=384",
        "train.doc_stride=128",
        "train.per_device_train_batch_size=12",
        f"train.num_train_epochs={a.epochs}",
        "train.learning_rate=1e-4",
        "train.save_steps=100000",
    ]
    seeds = [int(s) for s in a.seeds.split(",")]
    rows: dict[str, list[dict]] = {
        "run_qa.py's defaults (pad to 384, random batches)": [],
        "run_qa.py, skilled (dynamic padding, stock group_by_length)": [],
        "hpcqa default (length-grouped in lockstep, padded per batch)": [],
    }
    keep = [int(i) - 1 for i in a.rows.split(",")]
    extras = [e for i, e in enumerate((RUN_QA, PEER, HPCQA)) if i in keep]
    rows = {k: v for i, (k, v) in enumerate(rows.items()) if i in keep}
    for seed in seeds:
        for (name, runs), extra in zip(rows.items(), extras):
            res = submit("configs/quickstart.toml", common + extra + [f"train.seed={seed}"])
            runs.append(res)
            print(
                f"{name} seed {seed}: {res.get('steady_samples_per_second') or res}",
                file=sys.stderr,
            )
    base = (
        statistics.mean(r.get("steady_samples_per_second") or 0 for r in rows[next(iter(rows))])
        or None
    )
    if a.markdown:
        print(
            "| SQuAD-shaped, MiniLM, 2 ranks x 1 core, fp32, seq 384 | steady samples/s | vs run_qa.py's "
            "| train time | EM | F1 (per seed) | MFU text / all tokens |"
        )
        print("|---|---|---|---|---|---|---|")
    for name, runs in rows.items():
        ok = [r for r in runs if r.get("steady_samples_per_second")]
        if not ok:
            print(
                f"| {name} | failed: {runs[0].get('error')} |"
                if a.markdown
                else f"{name}: failed {runs}"
            )
            continue
        sps = statistics.mean(r["steady_samples_per_second"] for r in ok)
        t = statistics.mean(r.get("train_runtime_s") or 0 for r in ok)
        em = statistics.mean(r.get("exact_match", float("nan")) for r in ok)
        f1s = " / ".join(f"{r.get('f1', float('nan')):.1f}" for r in ok)
        eff = ok[0].get("efficiency") or {}
        mfu = (
            f"{100 * (eff.get('mfu') or 0):.1f} % / {100 * (eff.get('mfu_all_tokens') or 0):.1f} %"
        )
        cells = [
            name,
            f"{sps:.2f}",
            f"{sps / base:.2f}x" if base else "-",
            f"{t:.0f} s",
            f"{em:.1f}",
            f1s,
            mfu,
        ]
        print("| " + " | ".join(cells) + " |" if a.markdown else "  ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
