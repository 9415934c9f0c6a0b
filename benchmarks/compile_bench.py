"""train.compile (torch.compile, Inductor's C++ kernels on CPU) against eager, side by side in one run.

    python benchmarks/compile_bench.py [--markdown] [--epochs 1] [--examples 600] [--seeds 42]

Both rows are a real `hpcqa submit configs/quickstart.toml` on the local executor at the same layout (2 ranks x 1
core), model (all-MiniLM-L6-v2), precision (fp32), SQuAD-shaped data (data.synthetic_shape = "squad"), max_seq_length
384, per-device batch 12, seed and epochs: hpcqa's default batching (length-grouped in lockstep, each batch padded
to a multiple of 8, so the shapes vary from batch to batch) with train.compile off and on.

Reported per row: steady samples/s (after the warm-up steps), the compile time (the warm-up steps' time beyond
steady steps), the graphs Dynamo made, the whole training time (what a user waits for: compile included), EM/F1.
Compile pays where the steady gain over the run's length exceeds the compile time.
"""

from __future__ import annotations

import argparse
import statistics
import sys

from _submit import submit


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--epochs", type=float, default=1.0)
    ap.add_argument("--examples", type=int, default=600)
    ap.add_argument("--seeds", default="42")
    ap.add_argument("--model", default="builtin:minilm")
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args(argv)
    common = [
        "cluster.executor=local",
        "launch.ranks_per_socket=2",
        "train.bf16=false",
        f"model.name_or_path={a.model}",
        "data.dataset=builtin:synthetic-squad",
        "data.synthetic_shape=squad",
        f"data.synthetic_train_examples={a.examples}",
        "data.synthetic_eval_examples=200",
        "train.max_seq_length=384",
        "train.doc_stride=128",
        "train.per_device_train_batch_size=12",
        f"train.num_train_epochs={a.epochs}",
        "train.learning_rate=1e-4",
        "train.save_steps=100000",
        "train.comm_probe_steps=0",
    ]
    rows: dict[str, list[dict]] = {
        "eager (train.compile = false)": [],
        "compiled (train.compile = true)": [],
    }
    for seed in [int(s) for s in a.seeds.split(",")]:
        for (name, runs), flag in zip(rows.items(), ("false", "true")):
            res = submit(
                "configs/quickstart.toml", common + [f"train.compile={flag}", f"train.seed={seed}"]
            )
            runs.append(res)
            print(
                f"{name} seed {seed}: {res.get('steady_samples_per_second') or res}",
                file=sys.stderr,
            )
    if a.markdown:
        print(
            "| MiniLM, SQuAD-shaped, 2 ranks x 1 core, fp32 | steady samples/s | compile | graphs | train time "
            "| EM | F1 |"
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
        comp = [r.get("compile") or {} for r in ok]
        cells = [
            name,
            f"{statistics.mean(r['steady_samples_per_second'] for r in ok):.2f}",
            f"{statistics.mean(c.get('compile_s') or 0 for c in comp):.0f} s" if any(comp) else "-",
            str(comp[0].get("graphs", "-")) if any(comp) else "-",
            f"{statistics.mean(r.get('train_runtime_s') or 0 for r in ok):.0f} s",
            f"{statistics.mean(r.get('exact_match', float('nan')) for r in ok):.1f}",
            " / ".join(f"{r.get('f1', float('nan')):.1f}" for r in ok),
        ]
        print("| " + " | ".join(cells) + " |" if a.markdown else "  ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
