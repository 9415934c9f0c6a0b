"""hpcqa command line. The only module that prints tables or turns errors into exit codes.

Heavy modules (torch, transformers, datasets) are never imported here; the training side imports
them inside the ranks.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import sys
from pathlib import Path
from typing import Any, Sequence

from hpcqa.version import __version__
from hpcqa.executors import hostprobe
from hpcqa.core import states
from hpcqa import errors
from hpcqa.errors import HpcqaError, UsageError
from hpcqa.record.jobdir import SUBMISSION

EPILOG = """examples:
  # train on this machine (the local executor)
  hpcqa submit configs/quickstart.toml
  # every rank's CPUs and environment, and the sbatch script; nothing runs
  hpcqa submit configs/squad_spr.toml --dry-run
  # change keys for one submission
  hpcqa submit configs/squad_spr.toml --set cluster.nodes=2 \\
      --set train.learning_rate=5e-5
  # a standalone script for sbatch, ranks started by Intel MPI's mpirun
  hpcqa render configs/squad_spr.toml --launcher mpirun -o job.sbatch
  # inside srun/salloc: what this process's environment maps to
  hpcqa env --json
"""


def _add_config(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", help="job config (TOML), e.g. configs/quickstart.toml")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key; VALUE is parsed as TOML, else taken as a string "
                        "(repeatable): --set train.learning_rate=5e-5")


def _add_tune(sub: Any) -> None:
    p = sub.add_parser("tune", help="time each ranks-per-socket layout for a few steps; \"auto\" then uses the fastest")
    _add_config(p)
    p.add_argument("--steps", type=int, default=10, help="timed optimizer steps per layout (default 10)")
    p.add_argument("--warmup", type=int, default=3, help="steps before timing starts (default 3)")
    p.add_argument("--candidates", metavar="LIST", help="ranks per socket to try, e.g. 1,2,4 (default: 1, "
                                                          "powers of two, one per core)")
    p.add_argument("--comm", action="store_true", help="instead: measure the link between 2 nodes (or the "
                                                       "config's nodes) with the job's backend and store it for "
                                                       "`hpcqa scaling --predict` and submit's warnings")
    p.add_argument("--json", action="store_true", help="the measured layouts (or link) as one JSON object")

    p = sub.add_parser("scaling", help="a run's throughput at 1, 2, 4, ... nodes: predicted from one finished run "
                                       "and the measured link, or a sweep over cluster.nodes measured vs predicted")
    p.add_argument("id", help="a finished training job (predict from it) or a sweep over cluster.nodes")
    p.add_argument("--predict", action="store_true", help="predict from the run and the link (`hpcqa tune --comm`); "
                                                          "for a sweep: predicted next to measured")
    p.add_argument("--nodes", default="1,2,4,8,16", metavar="LIST", help="node counts to predict (default 1,2,4,8,16)")
    p.add_argument("--bandwidth", metavar="RATE", help="assume this link instead of the measured one: 10gbit, 100mbit")
    p.add_argument("--latency-us", type=float, metavar="US", help="with --bandwidth: the link's latency (default: "
                                                                   "the measured one, else 50)")
    p.add_argument("--registry", default=None, help="job registry (default: $HPCQA_REGISTRY, else logs/registry.sqlite)")
    p.add_argument("--json", action="store_true", help="the prediction as one JSON object")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hpcqa", description="Distributed question-answering fine-tuning on Xeon CPU clusters:\n"
                                  "one TOML file -> one rank per socket, pinned, on Slurm or locally.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"hpcqa {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("submit", help="run a config (Slurm through submitit, or the local executor)")
    _add_config(p)
    p.add_argument("--dry-run", action="store_true", help="print the launch plan; run nothing")
    p.add_argument("--json", action="store_true", help="with --dry-run: the plan as one JSON object")
    p.add_argument("--no-wait", action="store_true", help="Slurm: return after submission")
    p.add_argument("--no-snapshot", action="store_true", help="the ranks import the live hpcqa tree when they start "
                                                               "(default: a copy made at submit, kept with the job)")
    p.add_argument("--check", action="store_true", help="Slurm: ask sbatch --test-only whether it would accept the exact "
                                                        "request (partition, account, QOS, time, nodes); queue nothing")
    p.add_argument("--registry", help="registry file for this job (default: job.registry, else $HPCQA_REGISTRY or "
                                      "logs/registry.sqlite); the same as --set job.registry=PATH")

    p = sub.add_parser("render", help="write a standalone sbatch script (srun or mpirun), a Kubernetes PyTorchJob "
                                      "or its Dockerfile")
    _add_config(p)
    p.add_argument("-o", "--output", help="write the script here (default: stdout)")
    p.add_argument("--target", choices=["script", "pytorchjob", "dockerfile"], default="script",
                   help="script (default): sbatch/mpirun; pytorchjob: a Kubeflow PyTorchJob and its ConfigMap (YAML, "
                        "kubectl apply -f); dockerfile: the image that PyTorchJob runs")
    p.add_argument("--launcher", choices=["srun", "mpirun"], help="default: launch.launcher")
    p.add_argument("--python", default=None, help="interpreter on the nodes (default: cluster.python, else python3)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--hosts", metavar="NODELIST", help="plain machines, no Slurm: a script for mpirun over ssh on "
                                                            "these hosts (Slurm nodelist syntax, e.g. 'n[1-2]')")
    where.add_argument("--hostfile", metavar="FILE", help="like --hosts, one host per line")
    p.add_argument("--submit", action="store_true", help="sbatch the script and register the job: status, logs "
                                                         "and cancel then work as for `submit`")

    _add_stage(sub)
    _add_tune(sub)
    p = sub.add_parser("topology", help="this node's sockets, NUMA nodes and cores; with CONFIG, each rank's pool")
    p.add_argument("config", nargs="?", help="also show the CPU pool and environment of each local rank")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key, e.g. --set train.max_steps=20 (repeatable)")
    p.add_argument("--sysfs", metavar="DIR", help="read a saved tree laid out like /sys/devices/system")
    p.add_argument("--allowed", metavar="LIST", help="CPUs this process may use, e.g. 4-11,36-43 "
                                                       "(default: its affinity mask)")
    p.add_argument("--json", action="store_true", help="the node and every rank's CPUs and environment as JSON")

    p = sub.add_parser("env", help="what this process's launcher environment maps to")
    p.add_argument("--json", action="store_true", help="one JSON object")

    p = sub.add_parser("hosts", help="expand a Slurm nodelist, one host per line")
    p.add_argument("nodelist", nargs="?", help="default: $SLURM_JOB_NODELIST")

    _add_job_verbs(sub)
    return parser


def _add_stage(sub) -> None:
    p = sub.add_parser("stage", help="on a machine with network: model, dataset and tokenised features into the shared "
                                     "caches, with a manifest that submit checks (compute nodes then run offline)")
    _add_config(p)
    p.add_argument("--k8s", action="store_true", help="stage for the PyTorchJob: the pods' paths (k8s.mount_path); run "
                                                      "it where the PVC is mounted there")
    p.add_argument("--json", action="store_true", help="print the manifest")


def _add_job_verbs(sub) -> None:
    """Verbs about submitted jobs and sweeps, and the checks."""
    p = sub.add_parser("status", help="jobs: state, why pending, progress, EM/F1; JOB: attempts, ranks, resource use "
                                      "(no torch import)")
    p.add_argument("jobs", nargs="*", help="job ids: the detail view (default: a list of the 20 most recent)")
    p.add_argument("--all", action="store_true", help="every job in the registry")
    p.add_argument("--json", action="store_true", help="a JSON list of job objects")
    p.add_argument("--watch", action="store_true", help="refresh every few seconds until all are finished")
    p.add_argument("--wide", action="store_true", help="every column, nothing shortened (default: fits the terminal)")
    p.add_argument("--registry", help="registry file (default: $HPCQA_REGISTRY or logs/registry.sqlite)")

    p = sub.add_parser("logs", help="a rank's log (stderr; --stdout for stdout)")
    p.add_argument("job", help="job id (as `hpcqa status` lists it; a sweep task: 900_1)")
    p.add_argument("--rank", type=int, default=None, help="default: the first rank that failed, else 0")
    p.add_argument("--stdout", action="store_true", help="the rank's stdout instead of its stderr")
    p.add_argument("-n", "--lines", type=int, default=0, help="only the last N lines")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing until the job ends")
    p.add_argument("--all-attempts", action="store_true", help="the whole log, not only the current attempt's")
    p.add_argument("--registry", help="registry file (default: $HPCQA_REGISTRY or logs/registry.sqlite)")

    p = sub.add_parser("cancel", help="cancel a job or a sweep (scancel; local: stop every rank)")
    p.add_argument("jobs", nargs="+", help="job ids (a sweep: all its tasks; 900_1: one task)")
    p.add_argument("--task", type=int, help="with a sweep id: only this variant")
    p.add_argument("--registry", help="registry file (default: $HPCQA_REGISTRY or logs/registry.sqlite)")

    p = sub.add_parser("results", help="a sweep's variants with their metrics, best marked")
    p.add_argument("sweep", help="the sweep's job id (or array id)")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="the table as a JSON list")
    fmt.add_argument("--csv", action="store_true", help="the table as CSV")
    p.add_argument("--plot", metavar="FILE.png", help="draw the metric against the swept parameter(s)")
    p.add_argument("--metric", default="f1", help="f1 (default), exact_match, train_samples_per_second, ...")
    p.add_argument("--registry", help="registry file (default: $HPCQA_REGISTRY or logs/registry.sqlite)")

    p = sub.add_parser("doctor", help="check Slurm, accounting, node topology, libraries, torch, backend")
    p.add_argument("config", nargs="?", help="also check this config against the partition's nodes")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key, e.g. --set train.max_steps=20 (repeatable)")
    p.add_argument("--json", action="store_true", help="every check as JSON")

    p = sub.add_parser("registry", help="check the job registry, or recover a damaged one")
    p.add_argument("action", choices=["check", "recover"], help="check: integrity; recover: rebuild a damaged registry from the job folders")
    p.add_argument("--registry", help="registry file (default: $HPCQA_REGISTRY or logs/registry.sqlite)")

    p = sub.add_parser("validate", help="check configs, each of them; exit 2 if any is bad")
    p.add_argument("configs", nargs="+", help="config files (a sweep file: every variant)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key, e.g. --set train.max_steps=20 (repeatable)")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if argv and not argv[0].startswith("-") and argv[0] not in COMMANDS:
        close = difflib.get_close_matches(argv[0], list(COMMANDS), n=1, cutoff=0.6)
        print(errors.for_terminal(f"hpcqa: no command {argv[0][:40]!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
                               + "\n  fix: hpcqa --help lists the commands"), file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 0
    try:
        return int(COMMANDS[args.command](args) or 0)
    except HpcqaError as e:
        print(errors.for_terminal(e.render()), file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `hpcqa ... | head`
        return 0


# ------------------------------------------------------------------------------------------ verbs

def _say(line: str) -> None:
    print(errors.for_terminal(line), file=sys.stderr)


def _warn(note: str) -> None:
    print(errors.for_terminal(f"warning: {note}"), file=sys.stderr)


def _stop_like_ctrl_c(signum, frame) -> None:
    raise KeyboardInterrupt


def cmd_submit(args: argparse.Namespace) -> int:
    from hpcqa import api
    import signal
    # a closed terminal (SIGHUP) or a runner stopping us (SIGTERM) is a Ctrl-C: a local job stops every rank, a
    # Slurm job keeps running and we stop watching it
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _stop_like_ctrl_c)
    if args.json and not args.dry_run:
        raise UsageError("--json prints the dry run's plan; a real submit prints the job id",
                         "add --dry-run (or drop --json)")
    overrides = args.overrides + ([f"job.registry={json.dumps(args.registry)}"] if args.registry else [])
    sp = api.submission(args.config, overrides)
    ex, request = api.dry_run(sp, snapshot=not args.no_snapshot)
    if args.check:
        ok, answer = ex.check(request)
        if not ok:
            raise UsageError(f"Slurm would refuse this request: {answer}",
                             "fix the key it names (cluster.partition, account, qos, time_limit_min, nodes ...); "
                             "nothing was queued")
        print(f"Slurm would accept it: {answer}" if ex.asks_slurm else answer)
        return 0
    if args.dry_run:
        _print_request(ex, request, args.json)
        return 0
    done = api.submit_request(ex, request, say=_say, warn=_warn)
    if done.sweep_id:
        if not ex.runs_here:
            print(done.sweep_id)
        return done.exit_code
    if args.no_wait:
        if ex.runs_here:
            _say(f"  runs on in the background: hpcqa status {done.ids[0]} / hpcqa logs {done.ids[0]} -f / "
                 f"hpcqa cancel {done.ids[0]}")
        print(done.ids[0])
        return 0
    return ex.wait(done, _say)


def _print_request(ex: Any, request: Any, as_json: bool) -> None:
    """`submit --dry-run`: the request `submit` would be given (plan, files, scripts, commands), nothing run."""
    sp = request.sweep
    if as_json:
        out = sp.plans[0].to_json()
        out["plan_digest"] = sp.plans[0].digest
        scripts = list(request.scripts) or None
        out["sbatch"] = scripts[0] if scripts and not sp.is_sweep else scripts
        out["request"] = request.to_json()
        out["submission"] = request.submission
        if sp.is_sweep:
            out["sweep"] = sp.to_json()
        print(json.dumps(out, indent=2, sort_keys=True))
    elif sp.is_sweep:
        _print_sweep(ex, request)
    else:
        _print_plan(ex, request)


def _print_sweep(ex: Any, request: Any) -> None:
    from rich.console import Console
    from rich.table import Table
    from hpcqa.core import sweep
    sp = request.sweep
    con = Console()
    keys = sweep.swept_keys(list(sp.variants))
    known = sp.max_array_size_known
    assumed = known.startswith("assumed")
    limit = f"MaxArraySize {sp.max_array_size}" + (" assumed: Slurm could not be asked" if assumed else "")
    shape = "one after another, on this machine" if ex.runs_here else \
        f"{len(sp.arrays)} array(s) ({limit}; parallelism {sp.parallelism or 'unlimited'})"
    t = Table(title=f"sweep: {len(sp.variants)} variants, {shape} -- dry run, nothing submitted")
    t.add_column("#", no_wrap=True)
    for key in keys:  # the whole key, wrapped at its dots and underscores rather than cut
        t.add_column(key.replace(".", ".\n"), overflow="fold")
    t.add_column("ranks", no_wrap=True)
    several = len(sp.arrays) > 1
    if several:
        t.add_column("array", no_wrap=True)
    array_of = {v.index: n for n, a in enumerate(sp.arrays) for v in a.variants}

    def value(cfg, key):
        section, _, name = key.partition(".")
        return cfg.to_dict().get(section, {}).get(name, "-")

    for v, p in list(zip(sp.variants, sp.plans))[:50]:
        t.add_row(str(v.index), *[repr(value(v.config, k)) for k in keys], str(p.world_size),
                  *([str(array_of[v.index])] if several else []))
    con.print(t)
    if len(sp.variants) > 50:
        con.print(f"... and {len(sp.variants) - 50} more variants (--json lists them all)")
    if ex.runs_here:
        con.print(f"local executor: the {len(sp.variants)} variants run one after another")
        return
    if assumed:
        con.print(f"MaxArraySize {known}", style="dim", highlight=False)
    for i, (a, command, line) in enumerate(zip(sp.arrays, request.commands, sp.array_lines())):
        con.print(f"array {i}: {len(a.variants)} task(s), {line}: {' '.join(command)}", highlight=False)
    if request.scripts:
        _print_script(con, request.scripts[0], "sbatch script of array 0 (as it will be submitted)")


def cmd_render(args: argparse.Namespace) -> int:
    from dataclasses import replace
    from hpcqa.core import config
    from hpcqa.core import plan as planmod
    from hpcqa.executors import k8s
    # a rendered script (or PyTorchJob) is not run by the local executor, whatever the config names: a local
    # config with cluster.nodes > 1 is a valid thing to render
    raw = config.load_raw(args.config, args.overrides)
    if raw.get("cluster", {}).get("executor") == "local":
        raw["cluster"]["executor"] = "slurm"
    cfg = config.validate(raw, args.config, args.overrides)
    if args.target == "dockerfile":
        _no_script_options(args)
        return _write_rendered(args, k8s.dockerfile(cfg), "Dockerfile",
                               f"docker build -f {args.output} -t <registry>/hpcqa:<tag> <hpcqa checkout>")
    if args.target == "pytorchjob":
        _no_script_options(args)
        lp = planmod.build_plan(k8s.pod_config(cfg), k8s.image_host(hostprobe.probe_host(), cfg), launcher="pytorchjob")
        return _render_request(args, lp, "script", {}, f"kubectl apply -f {args.output}")
    launcher = args.launcher or cfg.launch.launcher
    hosts = _render_hosts(args, cfg, launcher)
    # a standalone script is for Slurm (or plain machines with --hosts), whatever executor the config names
    cfg = replace(cfg, cluster=replace(cfg.cluster, executor="slurm"))
    # the script runs where it is taken: its interpreter is cluster.python, else python3 (not this host's own path)
    lp = planmod.build_plan(cfg, replace(hostprobe.probe_host(), python="python3"), launcher=launcher)
    how = f"run it on {hosts[0]}: bash {args.output}" if hosts else f"submit with: sbatch {args.output}"
    return _render_request(args, lp, "hosts" if hosts else "script", {"hosts": hosts, "python": args.python}, how)


def _no_script_options(args: argparse.Namespace) -> None:
    if args.submit or args.hosts or args.hostfile or args.launcher:
        raise UsageError(f"--target {args.target} takes none of --submit, --hosts, --hostfile, --launcher",
                         "apply the YAML with kubectl apply -f; drop those options")


def _render_request(args: argparse.Namespace, lp: Any, mode: str, options: dict, how: str) -> int:
    """The rendering executor's request for this plan: its script is what render writes, and what --submit sends."""
    from hpcqa import api
    from hpcqa.core import sweep
    from hpcqa.executors import table
    from hpcqa.executors.interface import RenderOnly
    ex = table.choose(lp, mode, **options)
    request = ex.dry_run(sweep.single(lp))
    for w in lp.warnings + request.notes:
        _warn(w)
    if isinstance(ex, RenderOnly):  # what only the render can tell (the YAML itself stays on stdout)
        for key, value in request.facts:
            print(errors.for_terminal(f"{key}: {value}"), file=sys.stderr)
    if args.submit:
        if isinstance(ex, RenderOnly):
            raise UsageError(*ex.refusal)
        if args.output:
            from hpcqa.fsutil import atomic_write_text
            atomic_write_text(args.output, request.scripts[0], mode=0o755)
        done = api.submit_request(ex, request, say=_say, warn=_warn)
        print(done.ids[0])
        return 0
    return _write_rendered(args, request.scripts[0], request.summary, how, executable=not isinstance(ex, RenderOnly))


def _write_rendered(args: argparse.Namespace, text: str, what: str, how: str, executable: bool = True) -> int:
    """A script is written executable (0755: it is run); YAML and a Dockerfile are read, not run (0644)."""
    if not args.output:
        sys.stdout.write(text)
        return 0
    from hpcqa.fsutil import atomic_write_text
    atomic_write_text(args.output, text, mode=0o755 if executable else 0o644)
    print(errors.for_terminal(f"wrote {args.output} ({what}); {how}"), file=sys.stderr)
    return 0


def _render_hosts(args: argparse.Namespace, cfg: Any, launcher: str) -> tuple[str, ...]:
    """--hosts / --hostfile -> the hosts of a plain-machine script (checked against the config)."""
    from hpcqa.core import distenv
    from hpcqa.executors import table
    if not (args.hosts or args.hostfile):
        return ()
    if not table.supports("slurm", launcher, "hosts"):
        raise UsageError("--hosts/--hostfile make a script for plain machines, started with mpirun over ssh",
                         "add --launcher mpirun")
    try:
        if args.hostfile:
            with open(args.hostfile, encoding="utf-8") as f:
                hosts = tuple(h.split()[0].split(":")[0] for h in f if h.strip() and not h.lstrip().startswith("#"))
        else:
            hosts = tuple(distenv.expand_nodelist(args.hosts))
    except (OSError, ValueError) as e:
        raise UsageError(f"can't read the hosts: {e}", "give --hosts 'n[1-2]' or a hostfile with one host per "
                                                       "line") from None
    if not hosts or len(set(hosts)) != len(hosts) or any(not re.fullmatch(r"[A-Za-z0-9._-]+", h) for h in hosts):
        raise UsageError(f"hosts {list(hosts)!r}: expected distinct host names", "e.g. --hosts 'n[1-2]'")
    if len(hosts) != cfg.cluster.nodes:
        raise UsageError(f"{len(hosts)} host(s) given, the config plans cluster.nodes = {cfg.cluster.nodes}",
                         f"add --set cluster.nodes={len(hosts)}, or list {cfg.cluster.nodes} hosts")
    return hosts


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
    if row.state != "COMPLETED":
        raise UsageError(f"job {row.id} is {row.state}: predictions need a completed run", "pick a finished job")
    out = scalingview.predict_job(row, nodes, scalingview.link_of_run(row, args.bandwidth, args.latency_us))
    if args.json:
        print(json.dumps(_prediction_json(out), indent=2, default=str))
        return 0
    _print_prediction(out)
    return 0


def _prediction_json(out: dict) -> dict:
    from dataclasses import asdict
    m = out["model"]
    return {"job": out["job"], "link": asdict(m.link), "profile": asdict(m.profile), "overlap": m.overlap,
            "overlap_source": m.overlap_source, "predictions": [asdict(p) for p in out["predictions"]],
            "best_layout": {str(n): {"ranks_per_node": b[0], "samples_per_second": b[1]}
                            for n, b in out["best_layout"].items() if b},
            "slower_than_one_node": [p.nodes for p in out["slower"]]}


def _print_prediction(out: dict) -> None:
    from rich.console import Console
    from rich.table import Table
    from hpcqa.core import scaling
    m, con = out["model"], Console()
    prof = m.profile
    t = Table(title=f"predicted from job {out['job']} ({prof.nodes} node(s) x {prof.ranks_per_node} ranks, "
                    f"{prof.t_local:.3f} s/step without the exposed all-reduce)",
              caption=f"link {scaling.human_rate(m.link.bandwidth_Bps)}, {1e6 * m.link.latency_s:.0f} us "
                      f"({m.link.source}); overlap {m.overlap_source}")
    for col in ("nodes", "step s", "all-reduce s", "samples/s", "speedup", "efficiency", "time to train"):
        t.add_column(col, justify="right")
    for p in out["predictions"]:
        t.add_row(str(p.nodes), f"{p.step_time_s:.3f}", f"{p.exposed_s:.3f}", f"{p.samples_per_second:.2f}",
                  f"{p.speedup:.2f}x", f"{100 * p.efficiency:.0f} %",
                  _duration(p.time_to_train_s) if p.time_to_train_s else "-")
    con.print(t)
    for n, best in out["best_layout"].items():
        if best:
            con.print(f"  {n} node(s): fastest measured layout {best[0]} ranks per node ({best[1]:.2f} samples/s)",
                      highlight=False)
    for p in out["slower"]:
        con.print(f"[yellow]warning:[/] {p.nodes} nodes are predicted slower than 1 ({p.samples_per_second:.2f} vs "
                  f"{out['predictions'][0].samples_per_second:.2f} samples/s): the all-reduce outweighs the compute "
                  "each node adds", highlight=False)


def _duration(s: float) -> str:
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
        print(f"ok  {path}: {what}{_n(lp.world_size, 'rank')} ({lp.nodes} x {lp.ranks_per_node}), "
              f"{_n(cores, 'compute core')} per rank")
        for w in plan.extension_warnings(lp.config, found):
            _warn(w)
    if bad and len(args.configs) > 1:
        print(f"{bad} of {len(args.configs)} configs are not valid", file=sys.stderr)
    return 2 if bad else 0


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def cmd_status(args: argparse.Namespace) -> int:
    import time
    from hpcqa.executors import jobs
    from hpcqa.record import registry
    from hpcqa.executors.slurmcli import Slurm
    reg, slurm = registry.Registry(args.registry, create=False), Slurm()
    unreachable_since = None
    while True:
        views, source = jobs.collect(reg, slurm, args.jobs, args.all) if reg.exists else ([], states.NOBODY)
        if args.jobs and not views:
            from hpcqa.errors import UsageError
            raise UsageError(f"no job {', '.join(args.jobs)} in {reg.path}", "`hpcqa status --all` lists the jobs")
        if args.json:
            print(json.dumps([v.to_json() for v in views], indent=2, default=str))
        else:
            if args.watch:
                if source.answered:
                    unreachable_since = None
                elif unreachable_since is None:
                    unreachable_since = time.strftime("%H:%M:%S")
                _watch_header(unreachable_since)
            _print_status(views, source, reg.path, args.jobs, wide=args.wide)
        if reg.damaged:
            _warn(f"{len(reg.damaged)} damaged row(s) in {reg.path} skipped (hpcqa registry check names them; "
                  "hpcqa registry recover keeps the rest)")
        if not args.watch or all(states.is_final(v.state) for v in views):
            return 0
        time.sleep(WATCH_S)


WATCH_S = 5


def _watch_header(unreachable_since: str | None) -> None:
    """--watch: each refresh says when it was taken, and that Slurm is not answering, since when."""
    import time
    from rich.console import Console
    con = Console()
    if con.is_terminal:
        con.clear()
    line = f"hpcqa status at {time.strftime('%H:%M:%S')}, every {WATCH_S} s (Ctrl-C stops)"
    if unreachable_since:
        line += f"; Slurm not answering since {unreachable_since}, still asking"
    con.print(line, style="bold", highlight=False)


def _print_status(views, source: states.Answer, path, asked: list[str] | None = None, wide: bool = False) -> None:
    """The detail view for the jobs asked for by id (a sweep task, 900_1, is a job too); the list otherwise, and
    for a whole sweep (its tasks listed under it)."""
    from rich.console import Console
    from hpcqa.record import statusview
    con = Console()
    whole_sweep = any(v.sweep_id and v.sweep_id in (asked or []) for v in views)
    if asked and views and not whole_sweep:
        statusview.print_detail(con, views, source)
    else:
        statusview.print_list(con, views, source, path, expand=bool(asked), wide=wide)


def _find_job(reg_path, job_id: str):
    from hpcqa.record import registry
    from hpcqa.executors.cancel import targets
    reg = registry.Registry(reg_path, create=False)
    return reg, targets(reg, [job_id], None)[0]


def cmd_logs(args: argparse.Namespace) -> int:
    from hpcqa.record.jobdir import JobDir
    reg, row = _find_job(args.registry, args.job)
    jd = JobDir(Path(row.folder))
    if not jd.path.is_dir():
        raise UsageError(f"job {row.id}'s folder {jd.path} is gone (deleted or moved): its logs went with it",
                         "hpcqa status JOB shows what the registry and Slurm still know")
    rank = args.rank
    if rank is None:
        failed = jd.failed_ranks()
        rank = int(failed[0]["rank"]) if failed else 0
        if failed:
            print(errors.for_terminal(f"first failure: rank {rank} on {failed[0].get('host')}: {failed[0].get('error')}"),
                  file=sys.stderr)
    if not 0 <= rank < row.world_size:
        raise UsageError(f"job {row.id} has ranks 0-{row.world_size - 1}, not {rank}", "pass --rank N in that range")
    stream = "out" if args.stdout else "err"
    if jd.log(rank, stream) is None and not args.follow:
        raise UsageError(f"no log for rank {rank} in {jd.path} yet", "the job may still be pending; try -f")
    _follow(reg, row, jd, rank, stream, args)
    return 0


def _follow(reg: Any, row: Any, jd: Any, rank: int, stream: str, args: argparse.Namespace) -> None:
    """Print the log (from the current attempt's start, or its last N lines); with -f, what is appended, until the
    job is final -- and then what was written before it ended."""
    import time
    from hpcqa.executors import jobs
    from hpcqa.executors.slurmcli import Slurm
    import codecs
    pos, slurm, first = 0, Slurm(), True
    decode = codecs.getincrementaldecoder("utf-8")(errors="replace").decode  # a character split across reads
    while True:
        final = False
        if args.follow:  # asked before reading, so that the last read comes after the end
            views, _ = jobs.collect(reg, slurm, [row.id])
            final = bool(views) and states.is_final(views[0].state)
        path = jd.log(rank, stream)
        if path:
            with open(path, "rb") as f:
                f.seek(pos)
                data = f.read()
            pos += len(data)
            chunk = decode(data, final=final or not args.follow)
            if first and not args.all_attempts:  # from the current attempt's start (logs append)
                chunk = chunk[_attempt_start(chunk):]
            if first and args.lines:
                chunk = "\n".join(chunk.splitlines()[-args.lines:]) + "\n"
            first = first and not data
            sys.stdout.write(chunk)
            sys.stdout.flush()
        if not args.follow or final:
            return
        time.sleep(1)


def _attempt_start(text: str) -> int:
    import re
    starts = [m.start() for m in re.finditer(r"^.*\] attempt \d+ starts$", text, re.M)]
    return starts[-1] if len(starts) > 1 else 0


def cmd_cancel(args: argparse.Namespace) -> int:
    from hpcqa.record import registry
    from hpcqa.executors import cancel
    from hpcqa.executors.slurmcli import Slurm
    reg = registry.Registry(args.registry, create=False)
    for line in cancel.cancel(cancel.targets(reg, args.jobs, args.task), args.task is None, Slurm()):
        print(line)
    return 0


def cmd_registry(args: argparse.Namespace) -> int:
    from hpcqa.record import registry
    if args.action == "recover":
        path = registry.resolve_path(args.registry)
        try:
            jobs, verdict = registry.Registry(path, create=False).check()
            if verdict in ("ok", "no registry yet"):
                print(f"{path}: readable, {jobs} job(s), nothing to recover")
                return 0
        except HpcqaError as e:
            if "is not an hpcqa job registry" in e.message:
                raise
        new, aside, n, bad = registry.recover(path)
        print(f"{new}: fresh registry with {n} job(s) read back" + (f", {bad} damaged row(s) left out" if bad else "")
              + f"; the damaged file is kept as {aside}")
        return 0
    reg = registry.Registry(args.registry, create=False)
    jobs, verdict = reg.check()
    if verdict not in ("ok", "no registry yet"):
        from hpcqa.errors import RegistryError
        raise RegistryError(f"job registry {reg.path}: SQLite integrity check: {verdict}",
                            f"hpcqa registry recover --registry {reg.path}")
    print(f"{reg.path}: {verdict}, {jobs} job(s)")
    return 0


def cmd_results(args: argparse.Namespace) -> int:
    from hpcqa.executors import jobs
    from hpcqa.record import registry, results
    from hpcqa.errors import UsageError
    reg = registry.Registry(args.registry, create=False)
    if not reg.exists or not reg.jobs(sweep_id=args.sweep):
        raise UsageError(f"no sweep {args.sweep!r} in {reg.path}", "`hpcqa status --all` lists jobs and sweeps")
    from hpcqa.executors.slurmcli import Slurm
    views, _ = jobs.collect(reg, Slurm(), [args.sweep])
    views = [v for v in views if v.sweep_id == args.sweep]
    keys = []
    for v in views:
        keys += [k for k in (v.variant or {}) if k not in keys]
    table = results.rows(views, args.metric)
    if args.metric not in results.NUMERIC and not any(isinstance(r.get(args.metric), (int, float)) for r in table):
        raise UsageError(f"no variant has a metric {args.metric!r}",
                         f"use one of: {', '.join(results.NUMERIC)}")
    sc = results.scaling(table)
    if args.plot:
        results.plot(table, keys, args.metric, args.plot)
        print(f"wrote {args.plot}", file=sys.stderr)
    if args.json:
        print(json.dumps({"sweep": args.sweep, "metric": args.metric, "variants": table, "scaling": sc}, indent=2))
        return 0
    if args.csv:
        sys.stdout.write(results.to_csv(table, keys, args.metric))
        return 0
    from rich.console import Console
    from rich.table import Table
    con = Console()
    t = Table(title=f"sweep {args.sweep}: {len(table)} variants, sorted by {args.metric}")
    for col in ["", "task", *keys, "state", "EM", "F1", "train samples/s", "wall s"]:
        t.add_column(col)
    f = lambda x, d=2: "-" if x is None else f"{x:.{d}f}"  # noqa: E731
    for r in table:
        t.add_row("[bold green]best[/]" if r["best"] else "", str(r["task"]), *[repr(r["params"].get(k)) for k in keys],
                  r["state"], f(r["exact_match"]), f(r["f1"]), f(r["train_samples_per_second"]),
                  f(r["wall_time_s"], 0))
    con.print(t)
    if sc:
        predicted, why = _predicted_for_sweep(reg, args.sweep)
        s2 = Table(title="scaling vs 1 node")
        for col in ("nodes", "train samples/s", "speedup", "efficiency", "predicted steady samples/s"):
            s2.add_column(col)
        for r in sc:
            p = predicted.get(r["nodes"])
            s2.add_row(str(r["nodes"]), f"{r['train_samples_per_second']:.2f}", f"{r['speedup']:.2f}x",
                       f"{100 * r['efficiency']:.0f} %", f"{p:.2f}" if p else "-")
        con.print(s2)
        if why:
            con.print(why, style="dim", highlight=False)
    return 0


def _predicted_for_sweep(reg, sweep_id: str) -> tuple[dict[int, float], str]:
    """{nodes: predicted samples/s} from the sweep's smallest run and the stored link; or why there is none."""
    from hpcqa.record import scalingview
    rows = reg.jobs(sweep_id=sweep_id)
    try:
        base = min((r for r in rows if r.state == "COMPLETED"), key=lambda r: r.nodes)
        table = scalingview.study(rows, scalingview.link_of_run(base))
    except (ValueError, UsageError) as e:
        return {}, f"no prediction: {e.message if isinstance(e, UsageError) else e}"
    return {r["nodes"]: r["predicted"] for r in table if r["predicted"]}, ""


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
        _print_checks(checks)
    return 1 if any(c.level == "error" for c in checks) else 0


def _print_checks(checks: Sequence[Any]) -> None:
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


COMMANDS = {"submit": cmd_submit, "render": cmd_render, "stage": cmd_stage, "env": cmd_env, "topology": cmd_topology, "tune": cmd_tune, "registry": cmd_registry, "hosts": cmd_hosts,
            "validate": cmd_validate, "status": cmd_status, "logs": cmd_logs, "cancel": cmd_cancel,
            "doctor": cmd_doctor, "results": cmd_results, "scaling": cmd_scaling}


# ------------------------------------------------------------------------------------------ output

def _print_plan(ex: Any, request: Any) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.panel import Panel
    from rich.table import Table

    con = Console()
    lp = request.sweep.plans[0]
    c = lp.config.cluster
    res = Table.grid(padding=(0, 2))
    res.add_row("config", lp.config.source)
    res.add_row("executor", f"{lp.executor}" + (f" (cluster.executor = {c.executor})" if c.executor != lp.executor else "")
                + f"; submitted by the {request.executor} executor")
    dom = lp.config.launch.rank_domain
    res.add_row("ranks", f"{lp.world_size} = {lp.nodes} node(s) x {lp.config.domains_per_node} {dom}(s) x "
                         f"{lp.ranks_per_domain} rank(s) per {dom}")
    res.add_row("layout", lp.layout_source)
    res.add_row("per rank", f"{lp.cpus_per_task} CPUs allocated, {len(lp.local_ranks[0].compute)} compute "
                            f"cores, {len(lp.local_ranks[0].ccl)} CCL cores")
    res.add_row("ddp backend", f"{lp.backend.resolved} ({lp.backend.reason})")
    res.add_row("python", escape(lp.python))
    if c.setup:
        res.add_row("setup", escape("\n".join(c.setup)) + ("" if not ex.runs_here else
                                                   "\n(Slurm jobs and rendered scripts only: the local "
                                                   "executor runs in this shell's environment)"))
    for k, v in request.facts:
        res.add_row(k, escape(v))
    for k, v in lp.deferred_env.items():
        res.add_row(k, v)
    res.add_row("job folder", lp.job_dir_pattern.replace(SUBMISSION, request.submission)
                + "  (%j = job id; the rest: this submission's token)")
    m = lp.config.model.name_or_path
    d = lp.config.data.dataset or lp.config.data.train_file
    res.add_row("job", f"{m} on {d}")
    from hpcqa import stage
    staged = stage.check(lp.config)
    if staged["manifest"]:
        res.add_row("staged", "\n".join(f"{k}: {state} ({escape(detail)})" for k, (state, detail) in
                                         staged["items"].items()) + "\nchecked again by submit before queueing")
    else:
        res.add_row("staged", f"nothing: no manifest {escape(str(stage.manifest_path(lp.config)))} (`hpcqa stage CONFIG` "
                              "puts model, data and features in the shared caches for offline nodes)")
    con.print(Panel(res, title="hpcqa plan (dry run: nothing submitted)", expand=False))
    for w in lp.warnings:
        con.print(f"[yellow]warning:[/] {w}")
    if request.notes:
        for w in request.notes:
            con.print(f"[yellow]warning (this node):[/] {w}", highlight=False)
    from hpcqa import api
    for w in api.scaling_notes([lp]):
        con.print(f"[yellow]warning (prediction):[/] {w}", highlight=False)
    _print_ranks(con, lp)
    if request.scripts:
        _print_script(con, request.scripts[0], "sbatch script (as it will be submitted)")
        con.print("submitted with: " + " ".join(request.commands[0]), highlight=False)


def _print_script(con: Any, script: str, title: str) -> None:
    """A script as it will be submitted, between two rules: its lines are never wrapped or framed by hpcqa (a long
    line is the terminal's to wrap), so what is copied from the screen is the script."""
    con.rule(title, style="dim")
    con.print(script.rstrip("\n"), markup=False, highlight=False, soft_wrap=True, emoji=False)
    con.rule(style="dim")


def ranges_in(value: str) -> str:
    """Runs of 4+ comma-separated CPU numbers shown as ranges (0,1,2,...,55 -> 0-55): the human view only."""
    import re
    from hpcqa.core.topology import cpu_list
    return re.sub(r"\d+(?:,\d+){3,}", lambda m: cpu_list(int(x) for x in m.group(0).split(",")), value)


def _print_ranks(con: Any, lp: Any) -> None:
    """Every node runs the same local ranks: one row per local rank (its global ranks follow from the node), CPU
    lists as ranges. `--json` has every rank's exact values."""
    from rich.table import Table
    from hpcqa.core.topology import cpu_list

    derived = {"RANK", "NODE_RANK"}
    common = dict(lp.ranks[0].env)
    for r in lp.ranks[1:]:
        common = {k: v for k, v in common.items() if r.env.get(k) == v}
    if common:
        t = Table(title="environment shared by every rank", show_header=False)
        t.add_column("name", no_wrap=True)
        t.add_column("value", overflow="fold")
        for k, v in common.items():
            t.add_row(k, ranges_in(v))
        con.print(t)
    ppn = lp.ranks_per_node
    t = Table(title=f"ranks: RANK = NODE_RANK x {ppn} + LOCAL_RANK on each of {lp.nodes} nodes"
                    if lp.nodes > 1 else "ranks")
    for col in ("local", "ranks", "CPUs"):
        t.add_column(col, no_wrap=True)
    t.add_column("environment of this local rank", overflow="fold")
    for r in lp.ranks[:ppn]:
        ranks = [str(r.rank + n * ppn) for n in range(lp.nodes)]
        shown = ",".join(ranks) if len(ranks) <= 4 else f"{ranks[0]},{ranks[1]},…,{ranks[-1]}"
        own = "\n".join(f"{k}={ranges_in(v)}" for k, v in r.env.items() if k not in common and k not in derived)
        t.add_row(str(r.local_rank), shown, cpu_list(r.cpus) if r.cpus else "unbound", own)
    con.print(t)
    con.print("CPU lists shown as ranges; `--json` has every rank's exact values.", style="dim", highlight=False)
