"""What the step's recipe switches buy and cost, end to end: the quickstart (2 pinned ranks, MiniLM, 1,200
generated questions, 2 epochs) per variant and seed, interleaved, with train samples/s, loss and EM/F1.

    python benchmarks/recipe_bench.py [--seeds 42,43] [--variants 1,2,3,4] [--precision auto|true|false]
        [--seq 128] [--markdown]

The first variant is the baseline (the step before model.attention / model.dropout existed: torch's SDPA and
bernoulli_ masks). The two-seed spread of the baseline is the noise a variant's EM/F1 is judged against.
"""

from __future__ import annotations

import argparse
import statistics
import sys

from _submit import recipe_shape, submit

VARIANTS = [
    ("sdpa + bernoulli_ masks (before)", ["model.attention=sdpa", "model.dropout=torch"]),
    ("hpcqa attention + bulk masks (fallback)", ["model.attention=hpcqa"]),
    ("hpcqa, attention dropout 0", ["model.attention_dropout=0"]),
    ("hpcqa, all dropout 0", ["model.attention_dropout=0", "model.hidden_dropout=0"]),
    ("eager + bernoulli_ masks", ["model.attention=eager", "model.dropout=torch"]),
    ("fused attention + bulk masks (default)", []),
]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--seeds", default="42,43")
    ap.add_argument("--variants", default="1,2,3,4")
    ap.add_argument(
        "--precision", choices=["auto", "true", "false"], default="auto", help="train.bf16"
    )
    ap.add_argument(
        "--seq", type=int, default=128, help="384: the recipe's shape (benchmarks/_submit.py)"
    )
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args(argv)
    chosen = [VARIANTS[int(i) - 1] for i in a.variants.split(",")]
    seeds = [int(s) for s in a.seeds.split(",")]
    runs: dict[str, list[dict]] = {name: [] for name, _ in chosen}
    for seed in seeds:
        for name, extra in chosen:
            res = submit(
                "configs/quickstart.toml",
                [f"train.seed={seed}", f"train.bf16={a.precision}"] + recipe_shape(a.seq) + extra,
            )
            runs[name].append(res)
            print(
                f"{name}, seed {seed}: {res.get('steady_samples_per_second')} samples/s, "
                f"EM {res.get('exact_match')}, F1 {res.get('f1')}, loss {res.get('train_loss')}",
                file=sys.stderr,
            )

    def mean(name: str, key: str) -> float:
        got = [r.get(key) for r in runs[name]]
        return (
            statistics.mean(got) if all(isinstance(g, (int, float)) for g in got) else float("nan")
        )

    base = mean(chosen[0][0], "steady_samples_per_second")
    cols = [
        "variant",
        "samples/s",
        "vs first",
        "train loss",
        "EM (per seed)",
        "F1 (per seed)",
        "bf16",
    ]
    if a.markdown:
        print("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for name, _ in chosen:
        sps = mean(name, "steady_samples_per_second")
        per = lambda k: ", ".join(f"{r.get(k, float('nan')):.2f}" for r in runs[name])  # noqa: E731
        cells = [
            name,
            f"{sps:.2f}",
            f"{sps / base:.2f}x",
            f"{mean(name, 'train_loss'):.4f}",
            f"{mean(name, 'exact_match'):.2f} ({per('exact_match')})",
            f"{mean(name, 'f1'):.2f} ({per('f1')})",
            str(runs[name][-1].get("bf16")),
        ]
        print("| " + " | ".join(cells) + " |" if a.markdown else "  ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
