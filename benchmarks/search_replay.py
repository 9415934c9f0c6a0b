"""A search replayed over a grid's recorded trials, for many seeds: how often, and for how many node-hours, it
reaches the best F1 the grid found.

    python benchmarks/search_bench.py --grid issue --spaces none --examples 400 --keep DIR   # the grid, kept
    python benchmarks/search_replay.py DIR [--seeds 40] [--trials 18] [--variants tpe:median:20,...] [--markdown]

One real search (search_bench.py) is one draw: its sampler's seed decides which points it proposes. This replays
hpcqa's own search loop -- record/study.py's peek, claim, the trial's reports and the pruner's answer through
the same Optuna Trial the ranks use, tell -- on a real journal file, with each trial's training replaced by what
its grid point recorded: the F1 at every evaluation (the newest checkpoint's trainer_state.json) and the final
one (results.json). Training is deterministic for given values (the config's seed; search_bench.py's runs gave a
point the same F1 to the hundredth every time it ran), so a trial's reports are the ones it would make. A
batch's trials run one after another, each told as it ends (the local executor), or with --slurm side by side,
reporting in step order, told when the batch ends (an array and its follow-up job). A pruned trial's wall time:
the fixed part of a trial (start, final evaluation; least squares of wall time against steps over the grid) plus
its point's time per step up to the step it was stopped at. Node-hours add up in the order the trials were asked,
as in search_bench.py.

A variant is strategy:pruner:warmup[:option...]; options: "lastprune" (the pruner may stop a trial at its last
evaluation, as before this change), "min=N" (sweep.pruner_min_trials = N: the median pruner judges a step once N
completed trials reported there), "startup=N" (TPE's random trials before its model), "mv" (multivariate TPE). Each row: how many seeds
reached the grid's best F1 at all and within half the grid's node-hours, the median node-hours to it (an
unreached seed counts its whole spend), the same for an F1 within --within of the best, and the median spend.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hpcqa.core import search  # noqa: E402
from hpcqa.record import study  # noqa: E402

MADE = (study.sampler,)  # hpcqa's own: a variant's TPE options wrap it


def load_grid(folder: Path) -> dict[str, dict]:
    """Every finished grid task under folder: its values, steps, wall time, F1 curve."""
    points: dict[str, dict] = {}
    for res_path in sorted(folder.glob("*/results.json")):
        res = json.loads(res_path.read_text())
        if res.get("f1") is None or not res.get("variant"):
            continue
        curve = {}
        states = sorted(
            res_path.parent.glob("checkpoints/checkpoint-*/trainer_state.json"),
            key=lambda p: int(p.parent.name.split("-")[1]),
        )
        if states:
            for h in json.loads(states[-1].read_text())["log_history"]:
                if "eval_f1" in h:
                    curve[int(h["step"])] = float(h["eval_f1"])
        steps = int(res["global_steps"])
        curve[steps] = float(res["f1"])
        points[study._point(res["variant"])] = {
            "params": res["variant"],
            "steps": steps,
            "wall": float(res["wall_time_s"]),
            "nodes": int(res.get("nodes") or 1),
            "curve": sorted(curve.items()),
            "f1": float(res["f1"]),
        }
    return points


def fixed_seconds(points: dict[str, dict]) -> float:
    """The part of a trial's wall time that does not grow with its steps (least squares over the grid)."""
    xs = [p["steps"] for p in points.values()]
    ys = [p["wall"] for p in points.values()]
    slope = statistics.covariance(xs, ys) / statistics.variance(xs)
    return statistics.mean(ys) - slope * statistics.mean(xs)


def wall_at(p: dict, step: int, fixed: float) -> float:
    return p["wall"] if step >= p["steps"] else fixed + (p["wall"] - fixed) * step / p["steps"]


class Variant:
    def __init__(self, text: str) -> None:
        parts = text.split(":")
        self.text = text
        self.strategy, self.pruner = parts[0], parts[1] if len(parts) > 1 else "median"
        self.warmup = int(parts[2]) if len(parts) > 2 and parts[2] else 0
        opts = parts[3:]
        self.last_prune = "lastprune" in opts
        self.min_trials = next((int(o[4:]) for o in opts if o.startswith("min=")), None)
        self.startup = next((int(o[8:]) for o in opts if o.startswith("startup=")), None)
        self.multivariate = "mv" in opts

    def spec(self, space: dict, trials: int, seed: int, parallelism: int) -> search.Search:
        sw = {"strategy": self.strategy, "trials": trials, "seed": seed, "pruner": self.pruner}
        if self.warmup:
            sw["pruner_warmup_steps"] = self.warmup
        if self.min_trials:
            sw["pruner_min_trials"] = self.min_trials
        spec = search.parse(sw, space, parallelism)
        assert spec is not None
        return spec


def run_batch(
    spec, name, url, batch, points, v: Variant, local: bool
) -> dict[int, tuple[str, int]]:
    """The batch's trials report their curves and are told how they ended; -> number: (state, step stopped at).
    local: one after another, each told as it ends (the local executor); else side by side, reports interleaved
    by step, told when the batch has ended (a Slurm array and its follow-up job)."""
    out: dict[int, tuple[str, int]] = {}
    groups = [[t] for t in batch] if local else [batch]
    for group in groups:
        stopped = report_curves(spec, name, url, group, points, v)
        for n, p in group:
            pruned, final = n in stopped, points[study._point(p)]
            told = study.tell(spec, name, url, n, pruned, None if pruned else final["f1"])
            out[n] = (told, stopped.get(n, final["steps"]))
    return out


def report_curves(spec, name, url, group, points, v: Variant) -> dict[int, int]:
    """Each trial's recorded evaluations, reported through the Optuna Trial the ranks use (study.reporter) in step
    order; the pruner asked as the rank asks it. -> number: the step a pruned trial stopped at."""
    trials = {n: study.reporter(spec.trial_ref(n, name, url)) for n, _ in group}
    curves = {n: points[study._point(p)]["curve"] for n, p in group}
    stopped: dict[int, int] = {}
    for i in range(max(len(c) for c in curves.values())):
        for n, _ in group:
            if n in stopped or i >= len(curves[n]):
                continue
            step, value = curves[n][i]
            trials[n].report(value, step)
            last = i == len(curves[n]) - 1
            if (v.last_prune or not last) and trials[n].should_prune():
                stopped[n] = step
    return stopped


def replay(points, space, v: Variant, trials: int, seed: int, tmp: Path, local: bool) -> list[dict]:
    """One search, run to its end: its trials in the order asked (repeats cost nothing)."""
    spec = v.spec(space, trials, seed, 2)
    name, url = spec.digest, str(tmp / f"{v.text.replace(':', '_')}-{seed}.journal")
    fixed = FIXED[0]
    rows: list[dict] = []
    while True:
        peeked = study.peek(spec, name, url)
        if not (peeked.batch or peeked.repeats or peeked.refused):
            return rows
        study.claim(
            spec, name, url, peeked.batch, len(peeked.trials), peeked.refused, peeked.repeats
        )
        for n, p, of in peeked.repeats:
            rows.append({"n": n, "params": p, "state": "REPEAT", "f1": None, "nh": 0.0})
        for n, (told, step) in run_batch(spec, name, url, peeked.batch, points, v, local).items():
            p = points[study._point(dict(peeked.batch)[n])]
            nh = p["nodes"] * wall_at(p, step, fixed) / 3600
            f1 = p["f1"] if told == "COMPLETE" else None
            rows.append(
                {"n": n, "params": p["params"], "state": told, "f1": f1, "nh": nh, "step": step}
            )


FIXED = [0.0]


def outcome(rows: list[dict], best: float) -> tuple[float, bool]:
    spent = 0.0
    for r in sorted(rows, key=lambda r: r["n"]):
        spent += r["nh"]
        if r["f1"] is not None and r["f1"] >= best - 1e-9:
            return spent, True
    return spent, False


def with_sampler(v: Variant):
    """study.sampler, with the variant's TPE options."""
    made = MADE[0]

    def sampler(spec, asked: int):
        s = made(spec, asked)
        if spec.strategy == "tpe" and (v.startup is not None or v.multivariate):
            import optuna

            seed = (spec.seed + asked) % 2**32
            startup = v.startup if v.startup is not None else s._n_startup_trials
            return optuna.samplers.TPESampler(
                seed=seed, n_startup_trials=startup, multivariate=v.multivariate
            )
        return s

    return sampler


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("folder", type=Path, help="search_bench.py --keep's folder")
    ap.add_argument("--seeds", type=int, default=40)
    ap.add_argument("--trials", type=int, default=18)
    ap.add_argument("--variants", default="tpe:median:20,tpe:median:20:lastprune,random:none")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument(
        "--within", type=float, default=2.0, help="also: F1 within this of the grid's best"
    )
    ap.add_argument(
        "--slurm",
        action="store_true",
        help="a batch's trials side by side, told when it ends (default: one after another, as locally)",
    )
    ap.add_argument("--show", type=int, default=-1, help="print this seed's trials (each variant)")
    a = ap.parse_args(argv)
    import warnings

    import optuna

    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    points = load_grid(a.folder / "grid")
    if not points:
        sys.exit(f"no finished grid tasks under {a.folder / 'grid'}")
    FIXED[0] = fixed_seconds(points)
    space: dict[str, list] = {}
    for p in points.values():
        for k, x in p["params"].items():
            space.setdefault(k, [])
            if x not in space[k]:
                space[k].append(x)
    import itertools

    missing = [
        dict(zip(space, values))
        for values in itertools.product(*space.values())
        if study._point(dict(zip(space, values))) not in points
    ]
    if missing:
        sys.exit(f"the grid is not finished: {len(missing)} points missing, e.g. {missing[0]}")
    best = max(p["f1"] for p in points.values())
    grid_nh = sum(p["nodes"] * p["wall"] / 3600 for p in points.values())
    print(
        f"grid: {len(points)} points, best F1 {best:.2f}, {grid_nh:.4f} node-hours; "
        f"a trial's fixed part {FIXED[0]:.1f} s; {a.trials} trials, {a.seeds} seeds"
    )
    table(a, points, space, best, grid_nh)
    return 0


def table(a, points, space, best: float, grid_nh: float) -> None:
    """One row a variant: for the grid's best F1, then for F1 within --within of it, the seeds that reached it, those
    that did within half the grid's node-hours, and the median node-hours to it (x the grid's; an unreached seed
    counts its whole spend); then the median spend of the whole search."""
    near = f"F1 >= {best - a.within:.2f}"
    heads = ["variant", f"best ({best:.2f}) reached", "in <= 0.5x", "median to it"]
    heads += [f"{near} reached", "in <= 0.5x", "median to it", "median spend"]
    if a.markdown:
        print("| " + " | ".join(heads) + " |")
        print("|" + "---|" * len(heads))
    else:
        print("  ".join(heads))
    for text in a.variants.split(","):
        v = Variant(text)
        study.sampler = with_sampler(v)
        runs = []
        with tempfile.TemporaryDirectory() as tmp:
            for seed in range(a.seeds):
                rows = replay(points, space, v, a.trials, seed, Path(tmp), not a.slurm)
                runs.append(rows)
                if seed == a.show:
                    show(rows)
        cells = [text]
        for target in (best, best - a.within):
            got = [outcome(rows, target) for rows in runs]
            cells += [
                f"{sum(ok for _, ok in got)}/{a.seeds}",
                f"{sum(1 for f, ok in got if ok and f / grid_nh <= 0.5)}/{a.seeds}",
                f"{statistics.median(f for f, _ in got) / grid_nh:.2f}x",
            ]
        cells.append(
            f"{statistics.median(sum(r['nh'] for r in rows) for rows in runs) / grid_nh:.2f}x"
        )
        print("| " + " | ".join(cells) + " |" if a.markdown else "  ".join(cells), flush=True)


def show(rows: list[dict]) -> None:
    for r in sorted(rows, key=lambda r: r["n"]):
        values = ", ".join(f"{k.split('.')[-1]}={x:.3g}" for k, x in r["params"].items())
        f1 = f"{r['f1']:.2f}" if r["f1"] is not None else "-"
        print(f"  {r['n']}: {values}  {r['state']}  F1 {f1}  step {r.get('step', '-')}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
