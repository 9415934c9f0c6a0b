"""`hpcqa render`: standalone scripts (srun, mpirun, mpirun over ssh), the PyTorchJob and its Dockerfile."""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any
from hpcqa.executors import hostprobe
from hpcqa import errors
from hpcqa.errors import UsageError
from hpcqa.cli.say import say, warn


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
        warn(w)
    if isinstance(ex, RenderOnly):  # what only the render can tell (the YAML itself stays on stdout)
        for key, value in request.facts:
            print(errors.for_terminal(f"{key}: {value}"), file=sys.stderr)
    if args.submit:
        if isinstance(ex, RenderOnly):
            raise UsageError(*ex.refusal)
        if args.output:
            from hpcqa.fsutil import atomic_write_text
            atomic_write_text(args.output, request.scripts[0], mode=0o755)
        done = api.submit_request(ex, request, say=say, warn=warn)
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
