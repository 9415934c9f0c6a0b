"""A sweep's variants with their metrics: rows (pure), the scaling table, CSV, and the plot."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any, Sequence

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
        out.append(row)
    good = [x for x in out if isinstance(x.get(metric), (int, float))]
    lower_is_better = lower_better(metric)
    best = (min if lower_is_better else max)(good, key=lambda x: x[metric]) if good else None
    for x in out:
        x["best"] = x is best
    key = lambda x: (
        x[metric] is None,
        x[metric] if lower_is_better else -(x[metric] or 0),
        x["task"] or 0,
    )
    return sorted(out, key=key)


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


def plot(table: list[dict[str, Any]], keys: list[str], metric: str, path: str) -> None:
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
            ax.set_xscale("log")
    failed = [r for r in table if r not in done]
    ax.set_title(f"{metric} per variant" + (f" ({len(failed)} without result)" if failed else ""))


def _num(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan
