"""The measuring verbs: tune (each ranks-per-socket layout timed, or the link between nodes) and scaling (a run's
throughput at 1, 2, 4 ... nodes, predicted from a finished run or a published figure, or a sweep measured)."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from rich.table import Table

from hpcqa.cli.console import Console
from hpcqa.cli.say import say, tell
from hpcqa.core import config, plan, scaling
from hpcqa.core.states import State
from hpcqa.errors import UsageError
from hpcqa.executors import hostprobe, jobs
from hpcqa.executors import tune as tuner
from hpcqa.executors.cancel import chosen
from hpcqa.executors.slurm.cli import Slurm
from hpcqa.record import registry, scalingruns
from hpcqa.record import tuned as tune
from hpcqa.text import shown


def cmd_tune(args: argparse.Namespace) -> int:
    if args.steps < 1 or args.warmup < 0:
        raise UsageError("--steps must be >= 1 and --warmup >= 0", "e.g. --steps 10 --warmup 3")
    if args.comm:
        return _tune_comm(args)
    base = config.load(args.config, args.overrides)
    if base.job.command:
        raise UsageError(
            "hpcqa tune times layouts of hpcqa's own trainer; this config runs your program "
            '(job.command), which ranks_per_socket = "auto" never takes a tuned layout for',
            "time your program at a few launch.ranks_per_socket values (a sweep), or tune without "
            "job.command; tune --comm measures the link whatever the program",
        )
    cands = (
        tune.parse_candidates(args.candidates, base.cores_per_domain) if args.candidates else None
    )
    con = Console(stderr=True)

    def show(measured, cores, done):
        con.print(
            f"  measured {done}/{len(measured)}: "
            + ", ".join(
                f"{k}x{cores // k} " + ("-" if v is None else f"{v:.2f}")
                for k, v in sorted(measured.items())
            )
            + " samples/s",
            highlight=False,
        )

    out = tuner.run(args.config, args.overrides, args.steps, args.warmup, cands, show, say)
    if args.json:
        print(json.dumps(out, indent=2, default=str))
        return 0
    t = Table(
        title="ranks x threads per socket",
        caption=f"steady train samples/s: {args.steps} steps after {args.warmup}",
    )
    for col in ("layout", "samples/s", ""):
        t.add_column(col)
    for row in tune.table_rows(out["measured"], out["cores_per_domain"]):
        t.add_row(*row)
    Console().print(t)
    tell(
        f'stored in {shown(out["store"])}: launch.ranks_per_socket = "auto" now uses '
        f"{out['entry']['ranks_per_socket']} for this model, data shape, batch and node shape"
    )
    return 0


def _tune_comm(args: argparse.Namespace) -> int:
    out = tuner.run_comm(args.config, args.overrides, say)
    if args.json:
        print(json.dumps(out, indent=2, default=str))
        return 0
    link = out["link"]
    tell(
        f"link: {scaling.human_rate(link['bandwidth_Bps'])}, latency {1e6 * link['latency_s']:.0f} us "
        f"(job {out['job']}: all-reduce among {link['nodes']} nodes)"
    )
    for size, t in link["points"]:
        tell(f"  {int(size):>10} bytes  {1e3 * t:9.3f} ms")
    tell(
        f"stored in {shown(out['store'])} for {out['key']}: `hpcqa scaling --predict JOB` and multi-node submits use it"
    )
    return 0


def cmd_scaling(args: argparse.Namespace) -> int:
    try:
        nodes = sorted({int(x) for x in args.nodes.split(",") if x.strip()})
    except ValueError:
        nodes = []
    if not nodes or nodes[0] < 1:
        raise UsageError(f"--nodes {args.nodes!r}: expected node counts", "e.g. --nodes 1,2,4,8")
    if args.id.endswith(".toml") or Path(args.id).is_file():
        return _scaling_from_reference(args, nodes)
    reg = registry.Registry(args.registry, create=False)
    chosen(reg, [args.id], None)  # an unknown id: the usual message
    jobs.collect(
        reg, Slurm(), [args.id]
    )  # states as the scheduler sees them now (the registry follows)
    rows = chosen(reg, [args.id], None)
    if len(rows) > 1 or rows[0].sweep_id == args.id:
        return _scaling_study(args, rows)
    if not args.predict:
        raise UsageError(
            f"job {args.id} is one run: nothing measured to compare",
            f"hpcqa scaling --predict {args.id} predicts the other node counts from it",
        )
    row = rows[0]
    if row.state != State.COMPLETED:
        raise UsageError(
            f"job {row.id} is {row.state}: predictions need a completed run", "pick a finished job"
        )
    out = scalingruns.predict_job(
        row, nodes, scalingruns.link_of_run(row, args.bandwidth, args.latency_us)
    )
    if args.json:
        print(json.dumps(prediction_json(out), indent=2, default=str))
        return 0
    print_prediction(out)
    return 0


def _scaling_from_reference(args: argparse.Namespace, nodes: list[int]) -> int:
    """`hpcqa scaling --predict CONFIG --epoch-time T --features N`: one node of the config's shape took T per
    epoch elsewhere (a published figure, another cluster); the config's model (its shapes, built on torch's meta
    device) gives the gradient buckets; the link is given or stored."""
    _check_reference_args(args)
    epoch_s = scalingruns.parse_duration(args.epoch_time)
    cfg = config.load(args.id, list(args.overrides))
    lp = plan.build_plan(cfg, hostprobe.probe_host())
    buckets = _model_buckets(cfg)
    batch = cfg.train.per_device_train_batch_size * cfg.train.gradient_accumulation_steps
    prof = scaling.profile_from_reference(
        lp.ranks_per_node,
        batch,
        args.features,
        epoch_s,
        scaling.on_the_wire(buckets["bucket_bytes"], cfg.train.ddp_compress),
    )
    link = scalingruns.link_for(
        lp.executor, cfg.cluster.partition, lp.backend.resolved, args.bandwidth, args.latency_us
    )
    model = scaling.Model(prof, link)
    preds = model.predict(nodes)
    out = {
        "job": None,
        "source": f"{args.id}: 1 node x {lp.ranks_per_node} ranks, {args.epoch_time} per epoch of "
        f"{args.features:,} features (given)",
        "model": model,
        "predictions": preds,
        "best_layout": {},
        "layouts": {},
        "slower": scaling.slower_than_one(preds),
        "gradients": f"{buckets['model_type']}, {buckets['parameters'] / 1e6:.1f} M parameters: "
        f"{buckets['grad_bytes'] / 1e6:.0f} MB of gradients in {len(buckets['bucket_bytes'])} buckets"
        + (
            f", sent in {cfg.train.ddp_compress} (train.ddp_compress)"
            if cfg.train.ddp_compress != "none"
            else ""
        ),
        "needed": {n: model.bandwidth_for(n, args.efficiency) for n in nodes if n > 1},
        "efficiency_target": args.efficiency,
    }
    if args.json:
        print(json.dumps(prediction_json(out), indent=2, default=str))
        return 0
    print_prediction(out)
    return 0


def _check_reference_args(args: argparse.Namespace) -> None:
    if not args.epoch_time or not args.features:
        raise UsageError(
            f"{args.id}: a prediction from a config needs one node's time per epoch and the features "
            "in an epoch",
            "add --epoch-time 26m --features 88729 (SQuAD v1.1 at 384/128)",
        )
    if args.features < 1 or not 0 < args.efficiency < 1:
        bad = (
            f"--features {args.features}"
            if args.features < 1
            else f"--efficiency {args.efficiency}"
        )
        raise UsageError(
            f"{bad}: out of range",
            "--features is a count of 1 or more; --efficiency a share "
            "between 0 and 1 (0.9: 90 % of linear)",
        )


def _model_buckets(cfg: config.Config) -> dict:
    """The config's model's gradient buckets, from its shapes on torch's meta device (its config.json at hand)."""
    from hpcqa.rank.train import commbench

    try:
        return commbench.model_buckets(cfg)
    except (OSError, ValueError, RuntimeError) as e:
        raise UsageError(
            f"model.name_or_path = {cfg.model.name_or_path!r}: its config is not at hand here "
            f"({str(e).splitlines()[0][:160]})",
            "hpcqa stage the config where the hub is reachable, "
            "or --set model.name_or_path=DIR (a directory with the model's config.json)",
        ) from None


def prediction_json(out: dict) -> dict:
    m = out["model"]
    return {
        "job": out["job"],
        "source": out.get("source"),
        "gradients": out.get("gradients"),
        "efficiency_target": out.get("efficiency_target"),
        "bandwidth_needed_Bps": {str(n): b for n, b in (out.get("needed") or {}).items()},
        "link": asdict(m.link),
        "profile": asdict(m.profile),
        "overlap": m.overlap,
        "overlap_source": m.overlap_source,
        "predictions": [asdict(p) for p in out["predictions"]],
        "best_layout": {
            str(n): {"ranks_per_node": b[0], "samples_per_second": b[1]}
            for n, b in out["best_layout"].items()
            if b
        },
        "slower_than_one_node": [p.nodes for p in out["slower"]],
    }


def print_prediction(out: dict) -> None:

    m, con = out["model"], Console()
    prof = m.profile
    source = (
        out.get("source") or f"job {out['job']} ({prof.nodes} node(s) x {prof.ranks_per_node} ranks"
    )
    t = Table(
        title=f"predicted from {source}; {prof.t_local:.3f} s/step without the exposed all-reduce)"
        if not out.get("source")
        else f"predicted from {source}; {prof.t_local:.3f} s per step",
        caption=f"link {scaling.human_rate(m.link.bandwidth_Bps)}, {1e6 * m.link.latency_s:.0f} us "
        f"({m.link.source}); overlap {m.overlap_source}",
    )
    for col in (
        "nodes",
        "step s",
        "all-reduce s",
        "samples/s",
        "speedup",
        "efficiency",
        "time to train",
    ):
        t.add_column(col, justify="right")
    for p in out["predictions"]:
        t.add_row(
            str(p.nodes),
            f"{p.step_time_s:.3f}",
            f"{p.exposed_s:.3f}",
            f"{p.samples_per_second:.2f}",
            f"{p.speedup:.2f}x",
            f"{100 * p.efficiency:.0f} %",
            duration(p.time_to_train_s) if p.time_to_train_s else "-",
        )
    con.print(t)
    if out.get("gradients"):
        con.print(f"  gradients: {out['gradients']}", highlight=False)
    for n, need in (out.get("needed") or {}).items():
        con.print(
            f"  {100 * out['efficiency_target']:.0f} % of linear at {n} nodes needs "
            + (
                f"a link of {scaling.human_rate(need)} or more (at {1e6 * m.link.latency_s:.0f} us)"
                if need
                else f"less latency than {1e6 * m.link.latency_s:.0f} us: no bandwidth is enough"
            ),
            highlight=False,
        )
    for n, best in out["best_layout"].items():
        if best:
            con.print(
                f"  {n} node(s): fastest measured layout {best[0]} ranks per node ({best[1]:.2f} samples/s)",
                highlight=False,
            )
    for p in out["slower"]:
        con.print(
            f"[yellow]warning:[/] {p.nodes} nodes are predicted slower than 1 ({p.samples_per_second:.2f} vs "
            f"{out['predictions'][0].samples_per_second:.2f} samples/s): the all-reduce outweighs the compute "
            "each node adds",
            highlight=False,
        )


def duration(s: float) -> str:
    return f"{s / 3600:.1f} h" if s >= 3600 else f"{s / 60:.1f} min" if s >= 60 else f"{s:.0f} s"


def _scaling_study(args: argparse.Namespace, rows) -> int:
    link = None
    if args.predict:
        link = scalingruns.link_of_run(
            min(rows, key=lambda r: r.nodes), args.bandwidth, args.latency_us
        )
    table = scalingruns.study(rows, link)
    if not table:
        raise UsageError(
            f"sweep {args.id} has no completed run with a measured throughput",
            f"hpcqa status {args.id} shows its tasks",
        )
    if args.json:
        print(json.dumps({"sweep": args.id, "rows": table}, indent=2))
        return 0
    t = Table(
        title=f"sweep {args.id}: measured"
        + (" and predicted (from its smallest run)" if link else "")
    )
    for col in ("nodes", "job", "measured samples/s", "predicted", "measured / predicted"):
        t.add_column(col, justify="right")
    f = lambda x, fmt: "-" if x is None else fmt.format(x)  # noqa: E731
    for r in table:
        t.add_row(
            str(r["nodes"]),
            r["job"],
            f(r["measured"], "{:.2f}"),
            f(r["predicted"], "{:.2f}"),
            f(r["ratio"], "{:.2f}"),
        )
    Console().print(t)
    return 0
