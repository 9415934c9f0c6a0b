"""`hpcqa render`: standalone scripts (srun, mpirun, mpirun over ssh), the PyTorchJob and its Dockerfile."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from hpcqa import api, errors, fsutil
from hpcqa.cli.outfile import output_target, write_whole
from hpcqa.cli.say import say, warn
from hpcqa.core import command, config, distenv, sweep
from hpcqa.errors import UsageError
from hpcqa.executors import hostprobe, table
from hpcqa.executors.interface import RenderOnly
from hpcqa.executors.k8s import image, manifest, trainjob
from hpcqa.text import shown


def cmd_render(args: argparse.Namespace) -> int:
    if args.old_kind:  # the option's name before 0.2: it chose a file kind, not where the job runs
        print(f"hpcqa: render --target is now --kind (--kind {args.old_kind})", file=sys.stderr)
        args.kind = args.old_kind
    output_target(args.output, ((args.config, "the config being read"),))
    named = shown(args.output)  # the -o path as the lines below name it, spelled out whole
    cfg = _render_config(args)
    if args.kind != table.RENDER_SCRIPT:
        _no_script_options(args)
    if args.kind == table.RENDER_DOCKERFILE:
        return _write_rendered(
            args,
            image.dockerfile(cfg),
            "Dockerfile",
            f"docker build -f {named} -t <registry>/hpcqa:<tag> <hpcqa checkout>",
        )
    if args.kind == table.RENDER_STAGE_JOB:
        return _write_rendered(
            args,
            manifest.to_yaml([trainjob.stage_job(cfg)]),
            "the staging Job",
            f"kubectl apply -f {named}, then wait until it is Complete or Failed "
            "(docs/kubernetes.md: `kubectl wait --for=condition=complete` sits out its timeout on "
            "a failed Job)",
            executable=False,
        )
    if args.kind == table.RENDER_TRAININGRUNTIME:
        ex, lp = table.render(cfg, hostprobe.probe_host(), args.kind)
        return _render_request(
            args,
            ex,
            lp,
            f"kubectl apply -f {named}, then the TrainJob (render --kind "
            "trainjob) once the Trainer admits it: docs/kubernetes.md",
            which=1,
        )
    if args.kind in table.RENDER_K8S:
        ex, lp = table.render(cfg, hostprobe.probe_host(), args.kind)
        first = (
            " after its TrainingRuntime (render --kind trainingruntime): docs/kubernetes.md"
            if args.kind == table.RENDER_TRAINJOB
            else ""
        )
        return _render_request(args, ex, lp, f"kubectl apply -f {named}{first}")
    hosts = _render_hosts(args, cfg, args.launcher or cfg.launch.launcher)
    ex, lp = table.render(cfg, hostprobe.probe_host(), args.kind, args.launcher, hosts, args.python)
    how = f"run it on {hosts[0]}: bash {named}" if hosts else f"submit with: sbatch {named}"
    return _render_request(args, ex, lp, how)


def _render_config(args: argparse.Namespace) -> Any:
    """The config as render uses it; --python, the ranks' interpreter, held to cluster.python's rules."""
    if args.python:
        args.overrides = [*args.overrides, "cluster.python=" + json.dumps(args.python)]
    try:
        raw = table.render_config(config.load_raw(args.config, args.overrides))
        return config.validate(raw, args.config, args.overrides)
    except errors.ConfigError as e:  # said of --python, which the user typed
        if e.key == "cluster.python" and args.python and e.source.startswith("--set"):
            raise errors.ConfigError(e.key, e.detail, e.hint, "--python") from None
        raise


def _no_script_options(args: argparse.Namespace) -> None:
    if args.submit or args.hosts or args.hostfile or args.launcher:
        raise UsageError(
            f"--kind {args.kind} takes none of --submit, --hosts, --hostfile, --launcher",
            "apply the YAML with kubectl apply -f; drop those options",
        )


def _render_request(args: argparse.Namespace, ex: Any, lp: Any, how: str, which: int = 0) -> int:
    """The rendering executor's request for this plan: its script is what render writes, and what --submit sends
    (`which`: a TrainJob request's second document is its TrainingRuntime)."""
    request = ex.dry_run(sweep.single(lp))
    for w in lp.warnings + request.notes + _missing_program(lp, args.submit):
        warn(w)
    if isinstance(
        ex, RenderOnly
    ):  # what only the render can tell (the YAML itself stays on stdout)
        for key, value in request.facts:
            print(errors.for_terminal(f"{key}: {value}"), file=sys.stderr)
    if args.submit:
        if isinstance(ex, RenderOnly):
            raise UsageError(*ex.refusal)
        if args.output:
            write_whole(Path(args.output), request.scripts[0], force=True, mode=0o755)
        done = api.submit_request(ex, request, say=say, warn=warn)
        print(done.ids[0])
        return 0
    summary = request.summary if which == 0 else "the TrainJob's TrainingRuntime"
    return _write_rendered(
        args, request.scripts[which], summary, how, executable=not isinstance(ex, RenderOnly)
    )


def _missing_program(lp: Any, submitting: bool) -> tuple[str, ...]:
    """A script runs the command in job.workdir when the job starts: a program named by a relative path that is not
    there now is a warning (it may be put there before then); queued at once (--submit), it is refused, as submit
    refuses it."""
    if not lp.command or not lp.executor_kind.sees_submit_files or not lp.work.get("dir"):
        return ()  # a pod runs its command in its image, not in this folder
    missing = command.missing_program(lp.command, lp.python, lp.work["dir"])
    if not missing:
        return ()
    where = f"job.command: {missing} is not in {lp.work['dir']}, the folder the script runs it in"
    if submitting:
        raise UsageError(
            f"{where}: the job could never start, so nothing was submitted",
            "render from the program's folder (or set job.workdir to it), or name the program by "
            "its absolute path",
        )
    return (f"{where}: put it there before the job starts, or name it by its absolute path",)


def _write_rendered(
    args: argparse.Namespace, text: str, what: str, how: str, executable: bool = True
) -> int:
    """A script is written executable (0755: it is run); YAML and a Dockerfile are read, not run (0644)."""
    if not args.output:
        sys.stdout.write(text)
        return 0
    write_whole(Path(args.output), text, force=True, mode=0o755 if executable else 0o644)
    print(errors.for_terminal(f"wrote {shown(args.output)} ({what}); {how}"), file=sys.stderr)
    return 0


HOSTFILE_MAX_BYTES = 4 << 20  # a million hosts of a few characters; /dev/zero is not read whole


def _render_hosts(args: argparse.Namespace, cfg: Any, launcher: str) -> tuple[str, ...]:
    """--hosts / --hostfile -> the hosts of a plain-machine script (checked against the config)."""
    if not (args.hosts or args.hostfile):
        return ()
    if not table.renders_for_hosts(launcher):
        raise UsageError(
            "--hosts/--hostfile make a script for plain machines, started with mpirun over ssh",
            "add --launcher mpirun",
        )
    try:
        if args.hostfile:
            lines = fsutil.read_text(args.hostfile, HOSTFILE_MAX_BYTES, follow=True).splitlines()
            hosts = tuple(
                h.split()[0].split(":")[0]
                for h in lines
                if h.strip() and not h.lstrip().startswith("#")
            )
        else:
            hosts = tuple(distenv.expand_nodelist(args.hosts))
    except OSError as e:
        raise UsageError(
            f"can't read the hostfile {args.hostfile}: {e.strerror or e}",
            "give a regular file with one host per line (or --hosts 'n[1-2]')",
        ) from None
    except ValueError as e:
        raise UsageError(
            f"can't read the hosts: {e}",
            "give --hosts 'n[1-2]' or a hostfile with one host per line",
        ) from None
    if (
        not hosts
        or len(set(hosts)) != len(hosts)
        or any(not re.fullmatch(r"[A-Za-z0-9._-]+", h) for h in hosts)
    ):
        raise UsageError(
            f"hosts {list(hosts)!r}: expected distinct host names", "e.g. --hosts 'n[1-2]'"
        )
    if len(hosts) != cfg.cluster.nodes:
        raise UsageError(
            f"{len(hosts)} host(s) given, the config plans cluster.nodes = {cfg.cluster.nodes}",
            f"add --set cluster.nodes={len(hosts)}, or list {cfg.cluster.nodes} hosts",
        )
    return hosts
