"""`hpcqa scaling`: the scaling model (hpcqa.core.scaling) fed with what was recorded -- a finished run's
results.json and config (registry), the link `hpcqa tune --comm` stored, the layouts `hpcqa tune` measured -- and
the warning a multi-node submission gets when that model says more nodes would be slower."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Sequence

from hpcqa.core import config as configmod
from hpcqa.core import plan as planmod
from hpcqa.core import ranklayout, scaling
from hpcqa.core.states import State
from hpcqa.errors import UsageError
from hpcqa.record import links, tuned
from hpcqa.record.jobdir import JobDir
from hpcqa.record.jobfiles.results import Results

RECENT = 200  # registry rows searched for a run of the same shape (newest first)


def parse_rate(text: str) -> float:
    """'10gbit', '100mbit', '1.5gbit', '117MB/s' -> bytes/s."""
    t = text.strip().lower().replace(" ", "")
    for unit, mult in (
        ("gbit", 1e9 / 8),
        ("mbit", 1e6 / 8),
        ("kbit", 1e3 / 8),
        ("gb/s", 1e9),
        ("mb/s", 1e6),
    ):
        if t.endswith(unit):
            try:
                rate = float(t[: -len(unit)]) * mult
            except ValueError:
                break
            if math.isfinite(rate) and rate > 0:  # 0gbit, nangbit, -1gbit: no link
                return rate
            break
    raise UsageError(
        f"--bandwidth {text!r}: not a link speed", "write it as 10gbit, 100mbit or 117MB/s"
    )


DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?$")


def parse_duration(text: str) -> float:
    """'26m', '7m30s', '1560s', '1560', '1.5h' -> seconds."""
    m = DURATION.match(text.strip().lower().replace(" ", "").replace("min", "m"))
    total = sum(float(x) * unit for x, unit in zip(m.groups(), (3600, 60, 1)) if x) if m else 0.0
    if total <= 0:
        raise UsageError(
            f"--epoch-time {text!r}: not a duration", "write it as 26m, 7m30s, 1560s or 1.5h"
        )
    return total


def results_of(row: Any) -> Results:
    """A run's results.json (an empty one when there is none that can be used)."""
    return JobDir(Path(row.folder)).read_results() or Results()


def link_for(
    executor: str,
    partition: str,
    backend: str,
    bandwidth: str | None = None,
    latency_us: float | None = None,
) -> scaling.Link:
    """The given link, else the one stored for this executor, partition and backend; UsageError naming the fix."""
    k = links.key(executor, partition, backend)
    stored = links.lookup(k)
    if bandwidth:
        lat = (
            latency_us * 1e-6 if latency_us is not None else (stored or {}).get("latency_s", 50e-6)
        )
        return scaling.Link(
            parse_rate(bandwidth),
            lat,
            "given: --bandwidth" + (" --latency-us" if latency_us else ""),
        )
    if not stored:
        raise UsageError(
            f"no link measured for {k} (store {links.caches.link_store()})",
            "run `hpcqa tune --comm CONFIG` on that partition (it measures the link between 2 nodes "
            "with the job's backend), or give --bandwidth 10gbit [--latency-us 20]",
        )
    lat = stored["latency_s"] if latency_us is None else latency_us * 1e-6
    return scaling.Link(
        stored["bandwidth_Bps"], lat, f"`hpcqa tune --comm` job {stored.get('job')}"
    )


def link_of_run(
    row: Any, bandwidth: str | None = None, latency_us: float | None = None
) -> scaling.Link:
    """link_for the executor, partition and backend a recorded run had."""
    return link_for(
        row.executor,
        (row.config.get("cluster") or {}).get("partition", ""),
        results_of(row).backend or "gloo",
        bandwidth,
        latency_us,
    )


def model_for(res: Results, cfg: configmod.Config, link: scaling.Link) -> scaling.Model:
    try:
        t = cfg.train
        prof = scaling.profile_from_results(
            res.to_json(), t.num_train_epochs if t.max_steps < 0 else 0.0, max(t.max_steps, 0)
        )
    except ValueError as e:
        raise UsageError(
            f"cannot predict from this run: {e}",
            "predict from a completed training run of this hpcqa version",
        ) from None
    return scaling.Model.from_run(prof, link)


def job_config(row: Any) -> configmod.Config:
    return configmod.from_dict(row.config, source=row.source)


def measured_layouts(cfg: configmod.Config, prof: scaling.Profile) -> dict[int, float]:
    """{ranks per node: per-rank seconds per step on one node} for the layouts `hpcqa tune` measured for this shape
    (one node, so the intra-node all-reduce is in them), plus the run's own."""
    out = {prof.ranks_per_node: prof.t_local}
    hit = tuned.load_store().get(ranklayout.shape_key(cfg)) or {}
    for rps, sps in (hit.get("samples_per_second") or {}).items():
        if sps:
            r = int(rps) * cfg.domains_per_node
            out[r] = r * prof.samples_per_rank_step / float(sps)
    return out


def predict_job(row: Any, nodes: Sequence[int], link: scaling.Link) -> dict:
    """The prediction from one finished run: per node count, and the best measured layout at each."""
    res, cfg = results_of(row), job_config(row)
    if res.task == "comm":
        raise UsageError(
            f"job {row.id} measured a link; it trained nothing to predict from",
            "give the id of a finished training run",
        )
    model = model_for(res, cfg, link)
    preds = model.predict(nodes)
    layouts = measured_layouts(cfg, model.profile)
    best = {n: model.best_layout(n, layouts) for n in nodes} if len(layouts) > 1 else {}
    return {
        "job": row.id,
        "model": model,
        "predictions": preds,
        "best_layout": best,
        "layouts": layouts,
        "slower": scaling.slower_than_one(preds),
    }


def _rate(res: Results) -> float | None:
    """A run's samples/s (steady, else the Trainer's): a positive number, or None."""
    for v in (res.steady_samples_per_second, res.train_samples_per_second):
        if v is not None and v > 0:
            return float(v)
    return None


def study(rows: Sequence[Any], link: scaling.Link | None) -> list[dict]:
    """A sweep over cluster.nodes: measured samples/s per node count, and (with a link) the prediction from its
    smallest run, with measured/predicted."""
    done = [(r, results_of(r)) for r in rows if r.state == State.COMPLETED]
    done = [(r, res) for r, res in done if _rate(res) is not None]
    if not done:
        return []
    done.sort(key=lambda x: x[1].nodes or x[0].nodes)
    base_row, base_res = done[0]
    pred = {}
    if link is not None:
        model = model_for(base_res, job_config(base_row), link)
        pred = {
            p.nodes: p for p in model.predict(sorted({res.nodes or r.nodes for r, res in done}))
        }
    out = []
    for r, res in done:
        n = res.nodes or r.nodes
        measured = _rate(res) or 0.0
        p = pred.get(n)
        out.append(
            {
                "nodes": n,
                "job": r.id,
                "measured": measured,
                "predicted": p.samples_per_second if p else None,
                "ratio": measured / p.samples_per_second if p else None,
            }
        )
    return out


def same_shape_run(reg: Any, cfg: configmod.Config) -> Any | None:
    """The newest completed training run of this config's shape (model, data shape, batch, precision, node) whose
    results the model can use: a one-node run if there is one (the model's reference: its compute is not mixed
    with a link's), else the newest multi-node run."""
    want, fallback = ranklayout.shape_key(cfg), None
    for row in reg.jobs(limit=RECENT) if reg.exists else []:
        # the registry's state may lag (no one asked Slurm since): a results.json that says COMPLETED counts
        if (row.final and row.state != State.COMPLETED) or (row.config.get("job") or {}).get(
            "task", "train"
        ) != "train":
            continue
        try:
            if ranklayout.shape_key(job_config(row)) != want:
                continue
        except Exception:  # a config an older hpcqa wrote: not comparable
            continue
        res = results_of(row)
        if res.status == State.COMPLETED and res.comm and res.comm.bucket_bytes and res.step_time_s:
            if (res.nodes or row.nodes) == 1:
                return row
            fallback = fallback or row
    return fallback


def warnings_for(plan: planmod.LaunchPlan, reg: Any) -> list[str]:
    """A multi-node plan the model says would train slower than one node: say so before it is queued. Needs a
    stored link for its partition and backend and a finished run of its shape; silent otherwise."""
    if plan.nodes < 2 or plan.config.job.task != "train":
        return []
    stored = links.lookup(
        links.key(plan.executor, plan.config.cluster.partition, plan.backend.resolved)
    )
    if not stored:
        return []
    row = same_shape_run(reg, plan.config)
    if row is None:
        return []
    link = scaling.Link(
        stored["bandwidth_Bps"], stored["latency_s"], f"tune --comm job {stored.get('job')}"
    )
    try:
        model = model_for(results_of(row), job_config(row), link)
    except UsageError:
        return []
    one, here = model.predict([1, plan.nodes])
    if here.samples_per_second >= one.samples_per_second:
        return []
    return [
        f"predicted slower on {plan.nodes} nodes than on 1: {here.samples_per_second:.1f} vs "
        f"{one.samples_per_second:.1f} train samples/s (the gradient all-reduce, {here.allreduce_s:.2f} s per "
        f"step over the {scaling.human_rate(link.bandwidth_Bps)} link measured by {link.source}, against "
        f"{model.profile.t_local:.2f} s of compute; from job {row.id}). `hpcqa scaling --predict {row.id}` "
        "shows every node count; fewer nodes, a larger per-rank batch or a faster partition would help"
    ]
