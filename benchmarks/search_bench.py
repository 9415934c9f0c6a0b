"""A search against the grid of the same space: the node-hours each needs to reach the grid's best F1.

    python benchmarks/search_bench.py [--markdown] [--strategy tpe] [--pruner median] [--trials N] [--examples 600]
        [--model builtin:minilm] [--seed 0] [--pruner-warmup 0] [--rows]

Both are real `hpcqa submit`s of configs/search_quickstart.toml's job on the local executor (2 ranks x 1 core,
SQuAD-shaped generated data): first the grid of the space below (every combination, `strategy = "grid"`), then the
search (default: TPE + the median pruner, as many trials as the grid has combinations, evaluations every
`--eval-steps`). Node-hours are nodes x each job's wall time (results.json), summed in the order the trials ran;
the search's "to reach" is the node-hours up to the first completed trial whose F1 is at least the grid's best
(or "not reached"). The search's own overhead per batch: the submit's wall time minus its trials' wall times, over
its batches (asking the study, planning and starting each trial's processes).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPACE = {
    "train.learning_rate": [5e-5, 1.5e-4, 4e-4],
    "train.num_train_epochs": [1.0, 2.0],
    "train.warmup_ratio": [0.0, 0.1],
}


def run(args: list[str], env: dict) -> tuple[str, float]:
    t0 = time.time()
    r = subprocess.run(
        [sys.executable, "-m", "hpcqa", *args], capture_output=True, text=True, cwd=ROOT, env=env
    )
    if r.returncode not in (0, 1):
        sys.exit(f"hpcqa {' '.join(args[:2])} failed: {(r.stderr or r.stdout).strip()[-2000:]}")
    return r.stdout + r.stderr, time.time() - t0


def trials_of(said: str, env: dict) -> list[dict]:
    sweep = re.search(r"hpcqa results (local-\d+)", said).group(1)
    out, _ = run(["results", sweep, "--json"], env)
    rows = json.loads(out[out.index("{") :])["variants"]
    return sorted(rows, key=lambda r: r.get("trial") if r.get("trial") is not None else r["task"])


def node_hours(row: dict) -> float:
    return (row.get("nodes") or 1) * (row.get("wall_time_s") or 0) / 3600


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--strategy", default="tpe", choices=["tpe", "random"])
    ap.add_argument("--pruner", default="median", choices=["median", "halving", "none"])
    ap.add_argument("--trials", type=int, default=0, help="0: as many as the grid's combinations")
    ap.add_argument("--examples", type=int, default=600)
    ap.add_argument("--eval-steps", type=int, default=10)
    ap.add_argument("--pruner-warmup", type=int, default=0, help="sweep.pruner_warmup_steps")
    ap.add_argument("--model", default="builtin:minilm")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument(
        "--rows", action="store_true", help="also every trial: values, state, F1, wall time"
    )
    a = ap.parse_args(argv)
    grid_size = 1
    for values in SPACE.values():
        grid_size *= len(values)
    with tempfile.TemporaryDirectory() as tmp:
        env = {
            **os.environ,
            "HPCQA_REGISTRY": f"{tmp}/reg.sqlite",
            "HPCQA_CACHE": os.environ.get("HPCQA_CACHE", f"{tmp}/cache"),
        }
        common = [
            f"job.output_dir={json.dumps(tmp)}",
            f"model.name_or_path={json.dumps(a.model)}",
            f"data.synthetic_train_examples={a.examples}",
            f"train.eval_steps={a.eval_steps}",
            f"train.save_steps={a.eval_steps}",
            "train.save_model=false",
        ]
        base = (ROOT / "configs/search_quickstart.toml").read_text().split("[sweep]")[0]
        space = "".join(f"{k} = {json.dumps(v)}\n" for k, v in SPACE.items())
        grid_cfg, search_cfg = Path(tmp, "grid.toml"), Path(tmp, "search.toml")
        grid_cfg.write_text(
            base.replace('name = "search-quickstart"', 'name = "grid"') + "[sweep]\n" + space
        )
        search_cfg.write_text(
            base
            + "[sweep]\n"
            + f'strategy = "{a.strategy}"\npruner = "{a.pruner}"\ntrials = {a.trials or grid_size}\n'
            + f"parallelism = 2\nseed = {a.seed}\n"
            + (f"pruner_warmup_steps = {a.pruner_warmup}\n" if a.pruner_warmup else "")
            + space
        )
        sets = [x for o in common for x in ("--set", o)]
        grid_said, grid_wall = run(["submit", str(grid_cfg), *sets], env)
        grid = trials_of(grid_said, env)
        search_said, search_wall = run(["submit", str(search_cfg), *sets], env)
        search = trials_of(search_said, env)
    report(a, grid, grid_wall, search, search_wall, search_said)
    if a.rows:
        for name, rows in (("grid", grid), ("search", search)):
            for r in rows:
                values = ", ".join(f"{k.split('.')[-1]}={v:.3g}" for k, v in r["params"].items())
                f1 = f"{r['f1']:.2f}" if r.get("f1") is not None else "-"
                print(
                    f"{name} {r.get('trial', r.get('task'))}: {values}  {r['state']}  F1 {f1}  "
                    f"{r.get('steps') or '-'} steps  {r.get('wall_time_s') or 0:.0f} s"
                )
    return 0


def report(
    a, grid: list[dict], grid_wall: float, search: list[dict], search_wall: float, said: str
) -> None:
    best_grid = max((r["f1"] for r in grid if r.get("f1") is not None), default=None)
    grid_nh = sum(node_hours(r) for r in grid)
    spent, reached, best = 0.0, None, None
    for r in search:
        spent += node_hours(r)
        if r["state"] == "COMPLETED" and r.get("f1") is not None:
            best = r["f1"] if best is None else max(best, r["f1"])
            if reached is None and best_grid is not None and r["f1"] >= best_grid:
                reached = spent
    batches = max(
        1,
        len(re.findall(r"trial \d+ \{", said))
        // max(1, int(re.search(r"batches of (\d+)", said).group(1))),
    )
    overhead = (search_wall - sum(r.get("wall_time_s") or 0 for r in search)) / batches
    pruned = sum(1 for r in search if r["state"] == "PRUNED")
    rows = [
        ("grid (every combination)", len(grid), 0, best_grid, grid_nh, grid_nh, None),
        (
            f"{a.strategy} + {a.pruner} pruner"
            + (f" from step {a.pruner_warmup}" if a.pruner_warmup else ""),
            len(search),
            pruned,
            best,
            spent,
            reached,
            overhead,
        ),
    ]
    if a.markdown:
        print(
            "| run | trials | pruned | best F1 | node-hours in all | node-hours to the grid's best F1 | vs grid | overhead per batch |"
        )
        print("|---|---|---|---|---|---|---|---|")
    for name, n, p, f1, total, to_best, over in rows:
        cells = [
            name,
            str(n),
            str(p),
            f"{f1:.2f}" if f1 is not None else "-",
            f"{total:.4f}",
            f"{to_best:.4f}" if to_best is not None else "not reached",
            f"{to_best / grid_nh:.2f}x" if to_best is not None and grid_nh else "-",
            f"{over:.1f} s" if over is not None else "-",
        ]
        print("| " + " | ".join(cells) + " |" if a.markdown else "  ".join(cells))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
