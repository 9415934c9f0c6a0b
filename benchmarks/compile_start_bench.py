"""What train.compile's first compile costs on a node with no Inductor cache: hpcqa's choice (the modules'
float settings specialized) against torch's default (left symbolic), interleaved A B A B.

    python benchmarks/compile_start_bench.py [--runs 2] [--markdown]

Each run is a real `hpcqa submit configs/quickstart.toml` on the local executor: the tiny model, 1 rank on every
CPU, fp32, 8 steps, train.compile = true, with an Inductor cache folder of its own (TORCHINDUCTOR_CACHE_DIR, made
empty: a cold compile, g++ included). Torch's default is put back for the B runs through torch's own override,
TORCH_COMPILE_OVERRIDE_DYNAMO_CONFIGS, which the ranks inherit. Printed per run: the compile time hpcqa reports
(the warm-up steps' time beyond steady steps), the rank's CPU seconds (its children, g++ among them, included),
the graphs Dynamo made and the training loss (the same model either way: it must match).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile

from _submit import submit
from import_bench import machine

SETTINGS = [
    "cluster.executor=local",
    "model.name_or_path=builtin:tiny-bert",
    "data.synthetic_train_examples=240",
    "data.synthetic_eval_examples=60",
    "train.num_train_epochs=1",
    "train.max_steps=8",
    "train.save_steps=100000",
    "train.do_eval=false",
    "train.bf16=false",
    "train.comm_probe_steps=0",
    "launch.ranks_per_socket=1",
    "train.compile=true",
]
VARIANTS = {
    "hpcqa: floats specialized": {},
    "torch's default: floats symbolic": {
        "TORCH_COMPILE_OVERRIDE_DYNAMO_CONFIGS": "0-1000:specialize_float=False"
    },
}


def one(env: dict[str, str]) -> dict:
    with tempfile.TemporaryDirectory() as cache:
        res = submit(
            "configs/quickstart.toml", SETTINGS, env={**env, "TORCHINDUCTOR_CACHE_DIR": cache}
        )
    if "error" in res:
        return res
    usage = (res.get("rank_usage") or [{}])[0] or {}
    comp = res.get("compile") or {}
    return {
        "compile_s": comp.get("compile_s"),
        "graphs": comp.get("graphs"),
        "cpu_s": usage.get("cpu_s"),
        "loss": res.get("train_loss"),
    }


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args(argv)
    got: dict[str, list[dict]] = {name: [] for name in VARIANTS}
    for k in range(a.runs):
        for name, env in VARIANTS.items():
            got[name].append(one(env))
            print(f"run {k + 1}, {name}: {got[name][-1]}", file=sys.stderr)
    print(f"machine: {machine()}; {a.runs} runs each, interleaved, each with a cold Inductor cache")
    if a.markdown:
        print("| tiny model, 1 rank, cold | compile (s) | rank CPU (s) | graphs | loss |")
        print("|---|---|---|---|---|")
    for name, runs in got.items():
        ok = [r for r in runs if "error" not in r]
        if not ok:
            print(f"{name}: failed {runs[0].get('error')}")
            continue
        cells = [
            name,
            " / ".join(f"{r['compile_s']:.1f}" for r in ok),
            " / ".join(f"{r['cpu_s']:.1f}" for r in ok),
            str(ok[0]["graphs"]),
            f"{statistics.mean(r['loss'] for r in ok):.6f}",
        ]
        print("| " + " | ".join(cells) + " |" if a.markdown else "  ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
