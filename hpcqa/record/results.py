"""A sweep's variants with their metrics: rows (pure), the scaling table, CSV, and the plot."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any, Sequence

from hpcqa.core.states import State
from hpcqa.fsutil import atomic_write_bytes
from hpcqa.record.jobfiles.results import SCORES as NUMERIC
from hpcqa.record.jobfiles.results import V2_SPLITS, Results


def rows(views: Sequence[Any], metric: str) -> list[dict[str, Any]]:
    """One row per task: index, params, state, metrics; sorted by metric (best first, failed last)."""
    out = []
    for v in views:
        r: Results = v.results or Results()
        row = {
            "task": v.task_index,
            "id": v.id,
            "state": v.state,
            "params": dict(v.variant or {}),
            "nodes": v.nodes,
            "world_size": v.world_size,
        }
        for k in NUMERIC:
            row[k] = r.number(k)
        for k in V2_SPLITS:
            if r.number(k) is not None:
                row[k] = r.number(k)
        row["model"] = dict(v.outputs).get(
            "trained model"
        )  # the folder as found, not as results.json says
        row[metric] = r.number(metric)
        if r.trial is not None:  # a search's trial: its number, how far it trained, what it cost
            row.update(
                trial=r.trial.number, steps=r.extra.get("global_steps"), node_hours=node_hours(v, r)
            )
        out.append(row)
    if any(
        "trial" in x for x in out
    ):  # a search: a trial with no results yet is numbered by its task index
        for x in out:
            x.setdefault("trial", x["task"])
            x.setdefault("steps", None)
            x.setdefault("node_hours", None)
    # a pruned trial is never the best: its pruner judged it behind (Optuna's best is among the completed)
    good = [
        x for x in out if isinstance(x.get(metric), (int, float)) and x["state"] != State.PRUNED
    ]
    lower_is_better = lower_better(metric)
    # ties: the earliest task (Optuna's best too is the first to reach it)
    sign = 1 if lower_is_better else -1
    best = min(good, key=lambda x: (sign * x[metric], x["task"] or 0)) if good else None
    for x in out:
        x["best"] = x is best
    key = lambda x: (
        x[metric] is None,
        x[metric] if lower_is_better else -(x[metric] or 0),
        x["task"] or 0,
    )
    return sorted(out, key=key)


def node_hours(v: Any, r: Results) -> float | None:
    """Nodes x the job's wall time, in hours (what a search is measured in)."""
    return v.nodes * r.wall_time_s / 3600 if r.wall_time_s is not None and v.nodes else None


def lower_better(metric: str) -> bool:
    """Times, losses, errors and perplexities are better low; everything else (EM, F1, throughput, accuracy) high."""
    name = metric.lower()
    return (
        name in ("wall_time_s", "train_runtime_s")
        or name.endswith("_s")
        or any(w in name for w in ("loss", "error", "perplexity", "time"))
    )


def scaling(table: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """Speedup and efficiency against the 1-node run, when cluster.nodes is what the sweep varies."""
    if not table or set().union(*(r["params"].keys() for r in table)) != {"cluster.nodes"}:
        return None
    done = {r["params"]["cluster.nodes"]: r for r in table if r.get("train_samples_per_second")}
    if 1 not in done:
        return None
    base = done[1]["train_samples_per_second"]
    out = []
    for n in sorted(done):
        sp = done[n]["train_samples_per_second"] / base
        out.append(
            {
                "nodes": n,
                "train_samples_per_second": done[n]["train_samples_per_second"],
                "speedup": sp,
                "efficiency": sp / n,
            }
        )
    return out


# OWASP's rule against CSV injection: a text cell starting with one of these is a formula to a spreadsheet
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def as_text(cell: Any) -> Any:
    """A cell a spreadsheet would evaluate (a swept value `=HYPERLINK(...)`, a path starting with `-`) as text, with a
    leading single quote; numbers stay numbers (-0.5 is a number, not a formula)."""
    return "'" + cell if isinstance(cell, str) and cell.startswith(FORMULA_START) else cell


def to_csv(table: list[dict[str, Any]], keys: list[str], metric: str) -> str:
    """The variants as CSV, one row each; a text cell a spreadsheet would evaluate is written as text (as_text)."""
    buf = io.StringIO()
    w = csv.writer(buf)
    cols = [
        "task",
        "id",
        "state",
        *keys,
        "exact_match",
        "f1",
        "train_samples_per_second",
        "wall_time_s",
        *[k for k in V2_SPLITS if any(k in r for r in table)],
        "model",
        "best",
    ]
    if metric not in cols:
        cols.insert(-1, metric)
    w.writerow([as_text(c) for c in cols])
    for r in table:
        w.writerow([as_text(r["params"].get(c) if c in keys else r.get(c)) for c in cols])
    return buf.getvalue()


def plot(
    table: list[dict[str, Any]],
    keys: list[str],
    metric: str,
    path: str,
    log_keys: Sequence[str] = (),
) -> None:
    """The sweep's figure at `path`: scaling, a search's history and keys (log_keys: searched on a log scale, drawn
    on one), or a grid's metric per variant."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=110)
    sc = scaling(table)
    if sc:
        n = [r["nodes"] for r in sc]
        ax.plot(n, [r["speedup"] for r in sc], "o-", label="measured")
        ax.plot(n, n, "--", color="grey", label="linear (ideal)")
        ax.set_xlabel("nodes")
        ax.set_ylabel("speedup vs 1 node (train samples/s)")
        ax.set_title("scaling")
    elif any(r.get("trial") is not None for r in table):
        plt.close(fig)
        fig = _plot_trials(plt, table, keys, metric, log_keys)
        ax = fig.axes[0]
    else:
        _plot_variants(ax, table, keys, metric)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    fig.tight_layout()
    buf = (
        io.BytesIO()
    )  # drawn in memory, then written whole (its suffix, checked by the CLI, is the format)
    fig.savefig(buf, format=Path(path).suffix.lstrip(".").lower() or "png")
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


def _plot_trials(
    plt: Any,
    table: list[dict[str, Any]],
    keys: list[str],
    metric: str,
    log_keys: Sequence[str] = (),
) -> Any:
    """A search: the optimisation history (each trial's metric by trial number, pruned ones hollow, the best so far
    as a step line), then the metric against each searched key."""
    fig, axes = plt.subplots(
        1, 1 + len(keys), figsize=(4.2 * (1 + len(keys)), 3.8), dpi=110, squeeze=False
    )
    axes = axes[0]
    trials = sorted((r for r in table if r.get("trial") is not None), key=lambda r: r["trial"])
    scored = [r for r in trials if isinstance(r.get(metric), (int, float))]
    for pruned, style in ((False, "o"), (True, "o")):
        rs = [r for r in scored if (r["state"] == State.PRUNED) == pruned]
        axes[0].plot(
            [r["trial"] for r in rs],
            [r[metric] for r in rs],
            style,
            color="C1" if pruned else "C0",
            mfc="none" if pruned else None,
            label="pruned" if pruned else "completed",
        )
    best_so_far, line = None, []
    pick = min if lower_better(metric) else max
    for r in scored:
        if r["state"] != State.PRUNED:
            best_so_far = r[metric] if best_so_far is None else pick(best_so_far, r[metric])
        line.append((r["trial"], best_so_far))
    kept = [(n, b) for n, b in line if b is not None]
    if kept:
        axes[0].step(
            [n for n, _ in kept],
            [b for _, b in kept],
            where="post",
            color="grey",
            label="best so far",
        )
    axes[0].set_xlabel("trial")
    axes[0].xaxis.set_major_locator(plt.MaxNLocator(integer=True))  # trials are whole numbers
    axes[0].set_ylabel(metric)
    axes[0].set_title("optimisation history")
    _plot_keys(axes[1:], scored, keys, metric, log_keys)
    return fig


def _plot_keys(
    axes: Any,
    scored: list[dict[str, Any]],
    keys: list[str],
    metric: str,
    log_keys: Sequence[str] = (),
) -> None:
    """The metric against each searched key: pruned trials hollow (as in the history), the best starred."""
    for ax, key in zip(axes, keys):
        for pruned in (False, True):  # as in the history: pruned ones hollow
            rs = [r for r in scored if (r["state"] == State.PRUNED) == pruned]
            ax.plot(
                [_num(r["params"].get(key)) for r in rs],
                [r[metric] for r in rs],
                "o",
                color="C1" if pruned else "C0",
                mfc="none" if pruned else None,
            )
        best = [r for r in scored if r.get("best")]
        if best:
            ax.plot(
                [_num(best[0]["params"].get(key))],
                [best[0][metric]],
                "*",
                markersize=14,
                color="gold",
                markeredgecolor="black",
            )
        ax.set_xlabel(key)
        xs = [_num(r["params"].get(key)) for r in scored]
        if xs and all(x > 0 for x in xs) and (key in log_keys or max(xs) / min(xs) >= 10):
            _log_axis(ax)  # searched on a log scale, or spanning 10x
        ax.grid(alpha=0.3)


def _plot_variants(ax: Any, table: list[dict[str, Any]], keys: list[str], metric: str) -> None:
    """A sweep's metric against its first swept key, a line per value of the others, the best starred."""
    done = [r for r in table if isinstance(r.get(metric), (int, float))]
    x_key = keys[0] if keys else None
    other = keys[1:]
    groups: dict[tuple, list] = {}
    for r in done:
        groups.setdefault(tuple(r["params"].get(k) for k in other), []).append(r)
    for g, rs in sorted(groups.items(), key=lambda kv: str(kv[0])):
        rs = sorted(rs, key=lambda r: _num(r["params"].get(x_key)))
        xs = [_num(r["params"].get(x_key)) for r in rs]
        label = ", ".join(f"{k}={v}" for k, v in zip(other, g)) or None
        ax.plot(xs, [r[metric] for r in rs], "o-", label=label)
    best = next((r for r in done if r["best"]), None)
    if best:
        ax.plot(
            [_num(best["params"].get(x_key))],
            [best[metric]],
            "*",
            markersize=16,
            color="gold",
            markeredgecolor="black",
            label="best",
        )
    ax.set_xlabel(x_key or "variant")
    ax.set_ylabel(metric)
    if (
        x_key
        and all(
            isinstance(_num(r["params"].get(x_key)), float) and _num(r["params"].get(x_key)) > 0
            for r in done
        )
        and len(done) > 1
    ):
        vals = [_num(r["params"].get(x_key)) for r in done]
        if max(vals) / min(vals) >= 10:
            _log_axis(ax)
    failed = [r for r in table if r not in done]
    ax.set_title(f"{metric} per variant" + (f" ({len(failed)} without result)" if failed else ""))


def _log_axis(ax: Any) -> None:
    """A log x axis ticked at 1, 2 and 5 of each decade, written as numbers (0.0002, 0.0005, 0.001): matplotlib's
    own labelled every minor tick of a range within a decade in scientific notation, one over another."""
    from matplotlib import ticker

    ax.set_xscale("log")
    ax.xaxis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(ticker.NullFormatter())


def _num(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan
