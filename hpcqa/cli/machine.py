"""Verbs about the machine and the configs: stage, tune, scaling, topology, env, hosts, validate, doctor."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Sequence
from hpcqa.executors import hostprobe
from hpcqa import errors
from hpcqa.errors import HpcqaError, UsageError
from hpcqa.cli.say import plural, warn
from hpcqa.cli.submit import ranges_in
from hpcqa.core.states import State


def cmd_stage(args: argparse.Namespace) -> int:
    from hpcqa.core import config
    from hpcqa import stage
    cfg = config.load(args.config, args.overrides)
    if args.k8s:
        from hpcqa.executors import k8s
        cfg = k8s.pod_config(cfg)
    manifest = stage.stage(cfg, log=lambda m: print(errors.for_terminal(f"stage: {m}"), file=sys.stderr))
    if args.json:
        print(json.dumps(manifest, indent=2, sort_keys=True))
        return 0
    model = manifest["model"]
    cols = errors.terminal_width(sys.stdout)
    print(errors.fit(f"{model['name']} ({model['kind']}" + (f", revision {model['revision']}" if model.get("revision")
                                                             else "") + f"): {len(model['files'])} files, "
                       f"{sum(f['size'] for f in model['files']) / 1e6:.1f} MB in {model['path']}",
                       "model     ", " " * 10, cols))
    for s in manifest["dataset"]["splits"]:
        print(errors.fit(f"{s['split']}: {s['rows']} examples; features: {s['features']['rows']} "
                           f"({sum(f['size'] for f in s['features']['files']) / 1e6:.1f} MB)", "data      ", " " * 10,
                           cols))
    print(errors.fit(f"{manifest['path']}  ({manifest['seconds']} s)", "manifest  ", " " * 10, cols))
    return 0


def cmd_tune(args: argparse.Namespace) -> int:
    from hpcqa.core import config
    from hpcqa.record import tuned as tune
    from hpcqa.errors import UsageError
    from hpcqa.executors import tune as tuner
    if args.steps < 1 or args.warmup < 0:
        raise UsageError("--steps must be >= 1 and --warmup >= 0", "e.g. --steps 10 --warmup 3")
    if args.comm:
        return _tune_comm(args)
    base = config.load(args.config, args.overrides)
    if base.job.command:
        raise UsageError("hpcqa tune times layouts of hpcqa's own trainer; this config runs your program "
                         "(job.command), which ranks_per_socket = \"auto\" never takes a tuned layout for",
                         "time your program at a few launch.ranks_per_socket values (a sweep), or tune without "
                         "job.command; tune --comm measures the link whatever the program")
    cands = tune.parse_candidates(args.candidates, base.cores_per_domain) if args.candidates else None
    from rich.console import Console
    con = Console(stderr=True)

    def show(measured, cores, done):
        con.print(f"  measured {done}/{len(measured)}: " + ", ".join(
            f"{k}x{cores // k} " + ("-" if v is None else f"{v:.2f}") for k, v in sorted(measured.items()))
            + " samples/s", highlight=False)

    out = tuner.run(args.config, args.overrides, args.steps, args.warmup, cands, show)
    if args.json:
        print(json.dumps(out, indent=2, default=str))
        return 0
    from rich.table import Table
    t = Table(title="ranks x threads per socket", caption=f"steady train samples/s: {args.steps} steps after {args.warmup}")
    for col in ("layout", "samples/s", ""):
        t.add_column(col)
    for row in tune.table_rows(out["measured"], out["cores_per_domain"]):
        t.add_row(*row)
    Console().print(t)
    print(f"stored in {out['store']}: launch.ranks_per_socket = \"auto\" now uses "
          f"{out['entry']['ranks_per_socket']} for this model, data shape, batch and node shape")
    return 0


def _tune_comm(args: argparse.Namespace) -> int:
    from hpcqa.executors import tune as tuner
    from hpcqa.core import scaling
    out = tuner.run_comm(args.config, args.overrides)
    if args.json:
        print(json.dumps(out, indent=2, default=str))
        return 0
    link = out["link"]
    print(f"link: {scaling.human_rate(link['bandwidth_Bps'])}, latency {1e6 * link['latency_s']:.0f} us "
          f"(job {out['job']}: all-reduce among {link['nodes']} nodes)")
    for size, t in link["points"]:
        print(f"  {int(size):>10} bytes  {1e3 * t:9.3f} ms")
    print(f"stored in {out['store']} for {out['key']}: `hpcqa scaling --predict JOB` and multi-node submits use it")
    return 0


def cmd_scaling(args: argparse.Namespace) -> int:
    from hpcqa.record import registry, scalingview
    from hpcqa.executors.cancel import targets
    try:
        nodes = sorted({int(x) for x in args.nodes.split(",") if x.strip()})
    except ValueError:
        nodes = []
    if not nodes or nodes[0] < 1:
        raise UsageError(f"--nodes {args.nodes!r}: expected node counts", "e.g. --nodes 1,2,4,8")
    if args.id.endswith(".toml") or Path(args.id).is_file():
        return _scaling_from_reference(args, nodes)
    from hpcqa.executors import jobs
    from hpcqa.executors.slurmcli import Slurm
    reg = registry.Registry(args.registry, create=False)
    targets(reg, [args.id], None)          # an unknown id: the usual message
    jobs.collect(reg, Slurm(), [args.id])  # states as the scheduler sees them now (the registry follows)
    rows = targets(reg, [args.id], None)
    if len(rows) > 1 or rows[0].sweep_id == args.id:
        return _scaling_study(args, rows)
    if not args.predict:
        raise UsageError(f"job {args.id} is one run: nothing measured to compare",
                         f"hpcqa scaling --predict {args.id} predicts the other node counts from it")
    row = rows[0]
    if row.state != State.COMPLETED:
        raise UsageError(f"job {row.id} is {row.state}: predictions need a completed run", "pick a finished job")
    out = scalingview.predict_job(row, nodes, scalingview.link_of_run(row, args.bandwidth, args.latency_us))
    if args.json:
        print(json.dumps(prediction_json(out), indent=2, default=str))
        return 0
    print_prediction(out)
    return 0


def _scaling_from_reference(args: argparse.Namespace, nodes: list[int]) -> int:
    """`hpcqa scaling --predict CONFIG --epoch-time T --features N`: one node of the config's shape took T per
    epoch elsewhere (a published figure, another cluster); the config's model (its shapes, built on torch's meta
    device) gives the gradient buckets; the link is given or stored."""
    from hpcqa.core import config, scaling
    from hpcqa.core import plan as planmod
    from hpcqa.record import scalingview
    if not args.epoch_time or not args.features:
        raise UsageError(f"{args.id}: a prediction from a config needs one node's time per epoch and the features "
                         "in an epoch", "add --epoch-time 26m --features 88729 (SQuAD v1.1 at 384/128)")
    if args.features < 1 or not 0 < args.efficiency < 1:
        bad = f"--features {args.features}" if args.features < 1 else f"--efficiency {args.efficiency}"
        raise UsageError(f"{bad}: out of range", "--features is a count of 1 or more; --efficiency a share "
                                                 "between 0 and 1 (0.9: 90 % of linear)")
    epoch_s = scalingview.parse_duration(args.epoch_time)
    cfg = config.load(args.id, list(args.set))
    lp = planmod.build_plan(cfg, hostprobe.probe_host())
    from hpcqa.rank.train import commbench
    try:
        buckets = commbench.model_buckets(cfg)
    except (OSError, ValueError, RuntimeError) as e:
        raise UsageError(f"model.name_or_path = {cfg.model.name_or_path!r}: its config is not at hand here "
                         f"({str(e).splitlines()[0][:160]})", "hpcqa stage the config where the hub is reachable, "
                         "or --set model.name_or_path=DIR (a directory with the model's config.json)") from None
    batch = cfg.train.per_device_train_batch_size * cfg.train.gradient_accumulation_steps
    prof = scaling.profile_from_reference(lp.ranks_per_node, batch, args.features, epoch_s, buckets["bucket_bytes"])
    link = scalingview.link_for(lp.executor, cfg.cluster.partition, lp.backend.resolved, args.bandwidth,
                                args.latency_us)
    model = scaling.Model(prof, link)
    preds = model.predict(nodes)
    out = {"job": None, "source": f"{args.id}: 1 node x {lp.ranks_per_node} ranks, {args.epoch_time} per epoch of "
                                  f"{args.features:,} features (given)", "model": model, "predictions": preds,
           "best_layout": {}, "layouts": {}, "slower": scaling.slower_than_one(preds),
           "gradients": f"{buckets['model_type']}, {buckets['parameters'] / 1e6:.1f} M parameters: "
                        f"{buckets['grad_bytes'] / 1e6:.0f} MB of gradients in {len(buckets['bucket_bytes'])} buckets",
           "needed": {n: model.bandwidth_for(n, args.efficiency) for n in nodes if n > 1},
           "efficiency_target": args.efficiency}
    if args.json:
        print(json.dumps(prediction_json(out), indent=2, default=str))
        return 0
    print_prediction(out)
    return 0


def prediction_json(out: dict) -> dict:
    from dataclasses import asdict
    m = out["model"]
    return {"job": out["job"], "source": out.get("source"), "gradients": out.get("gradients"),
            "efficiency_target": out.get("efficiency_target"),
            "bandwidth_needed_Bps": {str(n): b for n, b in (out.get("needed") or {}).items()},
            "link": asdict(m.link), "profile": asdict(m.profile), "overlap": m.overlap,
            "overlap_source": m.overlap_source, "predictions": [asdict(p) for p in out["predictions"]],
            "best_layout": {str(n): {"ranks_per_node": b[0], "samples_per_second": b[1]}
                            for n, b in out["best_layout"].items() if b},
            "slower_than_one_node": [p.nodes for p in out["slower"]]}


def print_prediction(out: dict) -> None:
    from rich.console import Console
    from rich.table import Table
    from hpcqa.core import scaling
    m, con = out["model"], Console()
    prof = m.profile
    source = out.get("source") or f"job {out['job']} ({prof.nodes} node(s) x {prof.ranks_per_node} ranks"
    t = Table(title=f"predicted from {source}; {prof.t_local:.3f} s/step without the exposed all-reduce)"
              if not out.get("source") else f"predicted from {source}; {prof.t_local:.3f} s per step",
              caption=f"link {scaling.human_rate(m.link.bandwidth_Bps)}, {1e6 * m.link.latency_s:.0f} us "
                      f"({m.link.source}); overlap {m.overlap_source}")
    for col in ("nodes", "step s", "all-reduce s", "samples/s", "speedup", "efficiency", "time to train"):
        t.add_column(col, justify="right")
    for p in out["predictions"]:
        t.add_row(str(p.nodes), f"{p.step_time_s:.3f}", f"{p.exposed_s:.3f}", f"{p.samples_per_second:.2f}",
                  f"{p.speedup:.2f}x", f"{100 * p.efficiency:.0f} %",
                  duration(p.time_to_train_s) if p.time_to_train_s else "-")
    con.print(t)
    if out.get("gradients"):
        con.print(f"  gradients: {out['gradients']}", highlight=False)
    for n, need in (out.get("needed") or {}).items():
        con.print(f"  {100 * out['efficiency_target']:.0f} % of linear at {n} nodes needs " +
                  (f"a link of {scaling.human_rate(need)} or more (at {1e6 * m.link.latency_s:.0f} us)" if need
                   else f"less latency than {1e6 * m.link.latency_s:.0f} us: no bandwidth is enough"), highlight=False)
    for n, best in out["best_layout"].items():
        if best:
            con.print(f"  {n} node(s): fastest measured layout {best[0]} ranks per node ({best[1]:.2f} samples/s)",
                      highlight=False)
    for p in out["slower"]:
        con.print(f"[yellow]warning:[/] {p.nodes} nodes are predicted slower than 1 ({p.samples_per_second:.2f} vs "
                  f"{out['predictions'][0].samples_per_second:.2f} samples/s): the all-reduce outweighs the compute "
                  "each node adds", highlight=False)


def duration(s: float) -> str:
    return f"{s / 3600:.1f} h" if s >= 3600 else f"{s / 60:.1f} min" if s >= 60 else f"{s:.0f} s"


def _scaling_study(args: argparse.Namespace, rows) -> int:
    from hpcqa.record import scalingview
    link = None
    if args.predict:
        link = scalingview.link_of_run(min(rows, key=lambda r: r.nodes), args.bandwidth, args.latency_us)
    table = scalingview.study(rows, link)
    if not table:
        raise UsageError(f"sweep {args.id} has no completed run with a measured throughput", "hpcqa status "
                         f"{args.id} shows its tasks")
    if args.json:
        print(json.dumps({"sweep": args.id, "rows": table}, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table
    t = Table(title=f"sweep {args.id}: measured" + (" and predicted (from its smallest run)" if link else ""))
    for col in ("nodes", "job", "measured samples/s", "predicted", "measured / predicted"):
        t.add_column(col, justify="right")
    f = lambda x, fmt: "-" if x is None else fmt.format(x)  # noqa: E731
    for r in table:
        t.add_row(str(r["nodes"]), r["job"], f(r["measured"], "{:.2f}"), f(r["predicted"], "{:.2f}"),
                  f(r["ratio"], "{:.2f}"))
    Console().print(t)
    return 0


def cmd_topology(args: argparse.Namespace) -> int:
    from hpcqa.core import topology
    from hpcqa.errors import UsageError
    if args.sysfs and not Path(args.sysfs, "cpu").is_dir():
        raise UsageError(f"--sysfs {args.sysfs!r}: no cpu/ folder in it",
                         "pass a folder laid out like /sys/devices/system (cpu/cpuN/topology, node/nodeK)")
    allowed = topology.parse_cpu_list(args.allowed) if args.allowed else None
    node = topology.read_node(args.sysfs or "/sys/devices/system", allowed,
                              None if args.sysfs else "/proc/cpuinfo", saved=bool(args.sysfs))
    if not node.cpus:
        raise UsageError("no usable CPU: --allowed names none of the node's online CPUs", "check --allowed")
    view: dict[str, Any] = {"node": node.to_json()}
    if args.config:
        from hpcqa.core import config, plan
        from hpcqa.rank import wrapper as rank
        cfg = config.load(args.config, args.overrides)
        view = rank.node_view(plan.build_plan(cfg, hostprobe.probe_host()), node)
    if args.json:
        print(json.dumps(view, indent=2))
        return 0
    _print_topology(view)
    return 0


def _print_topology(view: dict) -> None:
    from rich.console import Console
    from rich.table import Table
    con, n = Console(), view["node"]
    con.print(f"this node: {len(n['sockets'])} socket(s), {len(n['numa_nodes'])} NUMA node(s), {n['cores']} cores, "
              f"{n['threads_per_core']} thread(s) per core", highlight=False)
    t = Table()
    for col in ("socket", "cores", "CPUs"):
        t.add_column(col)
    for s in n["sockets"]:
        t.add_row(str(s["socket"]), str(s["cores"]), s["cpus"])
    con.print(t)
    numa = "; ".join(f"node {x['node']}: {x['cpus']}" for x in n["numa_nodes"])
    con.print(f"NUMA: {numa}", highlight=False)
    con.print(f"allowed CPUs: {n['allowed']} (online {n['online']}); ISA: {', '.join(n['isa']) or 'none of note'}",
              highlight=False)
    if "ranks" not in view:
        return
    for note in view["notes"]:
        con.print(f"[yellow]note:[/] {note}")
    r = Table(title=f"local ranks (backend {view['backend']})")
    for col in ("rank", "socket", "NUMA", "CPUs", "CCL", "planned", "OMP_NUM_THREADS", "memory"):
        r.add_column(col)
    for x in view["ranks"]:
        r.add_row(str(x["local_rank"]), ",".join(map(str, x["socket"])), ",".join(map(str, x["numa"])),
                  topology_list(x["cpus"]), topology_list(x["ccl"]),
                  "same" if x["as_planned"] else topology_list(x["planned_cpus"]),
                  x["env"].get("OMP_NUM_THREADS", "-"), x["membind"])
    con.print(r)
    env = Table(title="environment of each local rank (as the rank wrapper sets it here)")
    env.add_column("rank", no_wrap=True)
    env.add_column("variable", no_wrap=True)
    env.add_column("value", overflow="fold")
    for x in view["ranks"]:
        for i, (k, v) in enumerate(sorted(x["env"].items())):
            env.add_row(str(x["local_rank"]) if i == 0 else "", k, ranges_in(str(v)))
    con.print(env)


def topology_list(cpus) -> str:
    from hpcqa.core.topology import cpu_list
    return cpu_list(cpus) if cpus else "-"


def cmd_env(args: argparse.Namespace) -> int:
    import socket
    from hpcqa.core import distenv
    d = distenv.detect(os.environ, socket.gethostname())
    if args.json:
        print(json.dumps(d.to_json(), indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table
    t = Table(title=f"launcher environment ({d.source})", show_header=False)
    for k, v in d.to_json().items():
        t.add_row(k, ",".join(v) if isinstance(v, list) else str(v))
    Console().print(t)
    return 0


def cmd_hosts(args: argparse.Namespace) -> int:
    from hpcqa.core import distenv
    from hpcqa.errors import UsageError
    text = args.nodelist or os.environ.get("SLURM_JOB_NODELIST", "")
    if not text:
        raise UsageError("no nodelist given and SLURM_JOB_NODELIST is not set",
                         "pass one: hpcqa hosts 'cn[01-04]'")
    print("\n".join(distenv.expand_nodelist(text)))
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from hpcqa.core import config, plan, sweep
    found = hostprobe.extensions()  # asked once, for every config
    bad = 0
    for path in args.configs:  # every file is checked: one line each, exit 2 if any is bad
        try:
            raw = config.load_raw(path, args.overrides)
            host = plan.HostProbe(has_sbatch=True)
            if sweep.has_sweep(raw):
                # every variant of a [sweep] is validated as submit would, swept keys included
                sp = sweep.build(raw, str(path), host,
                                 lambda p: (sweep.DEFAULT_MAX_ARRAY_SIZE, "assumed: validate asks no scheduler"))
                lp, what = sp.plans[0], f"{len(sp.variants)} variants, the first: "
            else:
                lp, what = plan.build_plan(config.validate(raw, path, args.overrides), host), ""
        except HpcqaError as e:
            print(errors.for_terminal(e.render()), file=sys.stderr)
            bad += 1
            continue
        cores = len(lp.local_ranks[0].compute)
        print(f"ok  {path}: {what}{plural(lp.world_size, 'rank')} ({lp.nodes} x {lp.ranks_per_node}), "
              f"{plural(cores, 'compute core')} per rank")
        for w in plan.extension_warnings(lp.config, found):
            warn(w)
    if bad and len(args.configs) > 1:
        print(f"{bad} of {len(args.configs)} configs are not valid", file=sys.stderr)
    return 2 if bad else 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from hpcqa import doctor
    cfg = None
    if args.config:
        from hpcqa.core import config
        cfg = config.load(args.config, args.overrides)
    checks = doctor.run_checks(cfg)
    if args.json:
        print(json.dumps([c.__dict__ for c in checks], indent=2))
    else:
        print_checks(checks)
    return 1 if any(c.level == "error" for c in checks) else 0


def print_checks(checks: Sequence[Any]) -> None:
    """doctor's lines: the mark in its own column, so that a wrapped message stays indented under its text."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table
    mark = {"ok": "[green]ok[/]", "warning": "[yellow]warning[/]", "error": "[red]error[/]"}
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    for c in checks:
        grid.add_row(mark[c.level], escape(f"{c.name}: {c.message}") + (f"\nfix: {escape(c.fix)}" if c.fix else ""))
    Console().print(grid, highlight=False)
