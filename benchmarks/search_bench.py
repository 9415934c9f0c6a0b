"""A search against the grid of the same space: the node-hours each needs to reach the grid's best F1.

    python benchmarks/search_bench.py [--markdown] [--strategy tpe] [--pruner median] [--trials N] [--examples 600]
        [--model builtin:minilm] [--seed 0] [--pruner-warmup 0] [--rows] [--spaces points,ranges] [--grid small]

Both are real `hpcqa submit`s of configs/search_quickstart.toml's job on the local executor (2 ranks x 1 core,
SQuAD-shaped generated data): first the grid of the space below (every combination, `strategy = "grid"`), then the
search (default: TPE + the median pruner, as many trials as the grid has combinations, evaluations every
`--eval-steps`). Node-hours are nodes x each job's wall time (results.json), summed in the order the trials ran;
the search's "to reach" is the node-hours up to the first completed trial whose F1 is at least the grid's best
(or "not reached"). The search's own overhead per batch: the submit's wall time minus its trials' wall times, over
its batches (asking the study, planning and starting each trial's processes).

`--spaces` names the searches run against the one grid: "points" searches the grid's own values (lists), "ranges"
the same box as ranges (learning rate log-uniform between the grid's lowest and highest, warm-up uniform; epochs
stay a choice), which a grid cannot cover; "none" runs the grid alone (with --keep: the curves search_replay.py
replays); --grid-from DIR reads such a kept grid's results instead of running the grid again.
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
SPACES = {  # --grid: the grid's space; "issue" is issue 74's 4 x 3 x 3 (36 full fine-tunes)
    "small": {
        "train.learning_rate": [5e-5, 1.5e-4, 4e-4],
        "train.num_train_epochs": [1.0, 2.0],
        "train.warmup_ratio": [0.0, 0.1],
    },
    "issue": {
        "train.learning_rate": [5e-5, 1e-4, 2e-4, 4e-4],
        "train.num_train_epochs": [1.0, 2.0, 3.0],
        "train.warmup_ratio": [0.0, 0.1, 0.2],
    },
}


def ranges_of(space: dict) -> dict:
    """The grid's box as ranges: every key but the epochs becomes {low, high} (log when low > 0)."""
    out: dict = {}
    for key, values in space.items():
        if key == "train.num_train_epochs":
            out[key] = values
        else:
            lo, hi = min(values), max(values)
            out[key] = {"low": lo, "high": hi, **({"log": True} if lo > 0 else {})}
    return out


def toml_value(v) -> str:
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + "}"
    return "true" if v is True else json.dumps(v)


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


def kept_grid(folder: Path) -> list[dict]:
    """The rows of a grid run before with --keep, from its tasks' results.json, in the order they finished."""
    rows = []
    for res_path in sorted(folder.glob("grid/*/results.json"), key=lambda p: p.stat().st_mtime):
        res = json.loads(res_path.read_text())
        rows.append(
            {
                "task": len(rows),
                "params": res["variant"],
                "state": res["status"],
                "f1": res.get("f1"),
                "nodes": res.get("nodes"),
                "wall_time_s": res.get("wall_time_s"),
            }
        )
    if not rows:
        sys.exit(f"no grid results under {folder}/grid")
    return rows


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
        "--grid", default="small", choices=sorted(SPACES), help="the space (see SPACES)"
    )
    ap.add_argument(
        "--spaces", default="points", help="comma-separated searches: points (lists), ranges"
    )
    ap.add_argument(
        "--rows", action="store_true", help="also every trial: values, state, F1, wall time"
    )
    ap.add_argument(
        "--keep",
        default="",
        help="run in this folder and keep it (the trials' checkpoints: search_replay.py)",
    )
    ap.add_argument(
        "--grid-from",
        default="",
        help="a grid run before with --keep (its results, in the order it ran): the grid is not run again",
    )
    a = ap.parse_args(argv)
    grid_space = SPACES[a.grid]
    grid_size = 1
    for values in grid_space.values():
        grid_size *= len(values)
    with tempfile.TemporaryDirectory() as scratch:
        tmp = a.keep or scratch
        Path(tmp).mkdir(parents=True, exist_ok=True)
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
        grid_cfg = Path(tmp, "grid.toml")
        grid_cfg.write_text(
            base.replace('name = "search-quickstart"', 'name = "grid"')
            + "[sweep]\n"
            + space_toml(grid_space)
        )
        sets = [x for o in common for x in ("--set", o)]
        if a.grid_from:
            grid = kept_grid(Path(a.grid_from))
        else:
            grid_said, grid_wall = run(["submit", str(grid_cfg), *sets], env)
            grid = trials_of(grid_said, env)
        searches = []
        for kind in [k for k in a.spaces.split(",") if k != "none"]:
            space = grid_space if kind == "points" else ranges_of(grid_space)
            cfg = Path(tmp, f"search-{kind}.toml")
            cfg.write_text(
                base.replace('name = "search-quickstart"', f'name = "search-{kind}"')
                + "[sweep]\n"
                + f'strategy = "{a.strategy}"\npruner = "{a.pruner}"\ntrials = {a.trials or grid_size}\n'
                + f"parallelism = 2\nseed = {a.seed}\n"
                + (f"pruner_warmup_steps = {a.pruner_warmup}\n" if a.pruner_warmup else "")
                + space_toml(space)
            )
            said, wall = run(["submit", str(cfg), *sets], env)
            searches.append((kind, trials_of(said, env), wall, said))
    report(a, grid, searches)
    if a.rows:
        for name, rows in [("grid", grid)] + [(k, r) for k, r, _, _ in searches]:
            for r in rows:
                values = ", ".join(f"{k.split('.')[-1]}={v:.3g}" for k, v in r["params"].items())
                f1 = f"{r['f1']:.2f}" if r.get("f1") is not None else "-"
                print(
                    f"{name} {r.get('trial', r.get('task'))}: {values}  {r['state']}  F1 {f1}  "
                    f"{r.get('steps') or '-'} steps  {r.get('wall_time_s') or 0:.0f} s"
                )
    return 0


def space_toml(space: dict) -> str:
    return "".join(f"{k} = {toml_value(v)}\n" for k, v in space.items())


def report(a, grid: list[dict], searches: list[tuple[str, list[dict], float, str]]) -> None:
    best_grid = max((r["f1"] for r in grid if r.get("f1") is not None), default=None)
    grid_nh = sum(node_hours(r) for r in grid)
    rows = [("grid (every combination)", len(grid), 0, best_grid, grid_nh, grid_nh, None)]
    for kind, search, search_wall, said in searches:
        rows.append(search_row(a, kind, best_grid, search, search_wall, said))
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


def search_row(a, kind: str, best_grid, search: list[dict], search_wall: float, said: str) -> tuple:
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
    name = f"{a.strategy} over {kind} + {a.pruner} pruner" + (
        f" from step {a.pruner_warmup}" if a.pruner_warmup else ""
    )
    return (name, len(search), pruned, best, spent, reached, overhead)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
