"""hpcqa command line: the only package that prints tables or turns errors into exit codes. Split by verb group:

    parser.py       the grammar (every verb, option and help)
    say.py          progress lines and warnings on stderr, lines of text on stdout
    console.py      the rich Console the verbs print with: what it renders is spelled out
    submit.py       submit: the dry run and the submission
    report.py       what submit prints while a job runs and when it ends
    render.py       render: standalone scripts, the Kubernetes objects, their image's Dockerfile
    jobs.py         status, logs, cancel, registry, results
    statusview.py   status on a terminal: the job list (80 columns, --wide) and the detail view
    node.py         topology, env
    hosts.py        hosts (light: the mpirun job script runs it on the first node)
    followup.py     a search's follow-up job on Slurm (python -m hpcqa.cli.followup STATE)
    tune.py         tune, scaling
    checks.py       doctor
    validate.py     validate (no rich: it runs wherever the config model imports)
    staging.py      stage
    starter.py      init (an example config the package carries, written here to edit)
    outfile.py      a file named with -o (init, render): written whole, only over a regular file
    output.py       stdout and stderr guarded: a failed write is one line and exit 1, a closed pipe is quiet

A verb's module is imported when that verb runs (VERBS), and imports what it needs at its top: `hpcqa --help`
loads the grammar alone. Heavy modules (torch, transformers, datasets) are imported only by the verbs that need
them (stage; scaling from a config's model); the training side imports them inside the ranks.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import json
import sys
from typing import Callable, Sequence

from hpcqa import errors, fsutil
from hpcqa.cli import output
from hpcqa.cli.parser import build_parser
from hpcqa.errors import HpcqaError
from hpcqa.text import shown

# verb -> "module:function": the module is imported only when its verb runs
VERBS = {
    "submit": "submit:cmd_submit",
    "render": "render:cmd_render",
    "stage": "staging:cmd_stage",
    "env": "node:cmd_env",
    "topology": "node:cmd_topology",
    "hosts": "hosts:cmd_hosts",
    "tune": "tune:cmd_tune",
    "scaling": "tune:cmd_scaling",
    "validate": "validate:cmd_validate",
    "doctor": "checks:cmd_doctor",
    "status": "jobs:cmd_status",
    "logs": "jobs:cmd_logs",
    "cancel": "jobs:cmd_cancel",
    "registry": "jobs:cmd_registry",
    "results": "jobs:cmd_results",
    "init": "starter:cmd_init",
}


def verb(name: str) -> Callable[..., int]:
    module, _, function = VERBS[name].partition(":")
    return getattr(importlib.import_module(f"hpcqa.cli.{module}"), function)


def main(argv: Sequence[str] | None = None) -> int:
    """`hpcqa ARGV...` (the console script's entry): its exit code. Every verb's output is guarded: a write to stdout
    or stderr that fails is one line and exit 1, a closed pipe ends it quietly (cli/output.py)."""
    return output.guarded(lambda: run(argv))


def run(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if argv and not argv[0].startswith("-") and argv[0] not in VERBS:
        close = difflib.get_close_matches(argv[0], list(VERBS), n=1, cutoff=0.6)
        print(
            errors.for_terminal(
                f"hpcqa: no command {argv[0][:40]!r}"
                + (f" (did you mean {close[0]!r}?)" if close else "")
                + "\n  fix: hpcqa --help lists the commands"
            ),
            file=sys.stderr,
        )
        return 2
    argv, program = split_program(argv)
    args = parser.parse_args(argv)
    if program is not None and (refused := _take_program(args, program)):
        return refused
    if not args.command:
        parser.print_help()
        return 0
    try:
        adopt_legacy_registry(args)
        return int(verb(args.command)(args) or 0)
    except HpcqaError as e:
        if program is not None:
            e = _from_the_program(e)
        print(errors.for_terminal(e.render()), file=sys.stderr)
        return e.exit_code
    # a path of another user's, met where no check named it: still one line
    except PermissionError as e:
        print(
            errors.for_terminal(
                f"error: {shown(e.filename or 'a file')}: permission denied\n  fix: check who may read it "
                "and its folders (ls -ld), or name a path of yours"
            ),
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    # a full disk, a quota, a file-size limit or a read-only mount met where no check named it: one line, exit 1
    except OSError as e:
        print(errors.for_terminal(f"error: {fsutil.failure(e)}"), file=sys.stderr)
        return 1


def _from_the_program(e: HpcqaError) -> HpcqaError:
    """An error in job.command when the program came after `--` (_take_program passes it on as --set job.command):
    said of the program after --, not of a --set the user never typed."""
    if (
        isinstance(e, errors.ConfigError)
        and e.key.startswith("job.command")
        and e.source.startswith("--set")
    ):
        return errors.ConfigError(
            e.key, e.detail, e.hint, e.source.replace("--set", "the program after --", 1)
        )
    return e


def _take_program(args: argparse.Namespace, program: list[str]) -> int:
    """The program after `--` as job.command (and the job named after it): 0, or 2 with one line said."""
    if args.command not in ("submit", "render"):
        print(
            errors.for_terminal(
                f"hpcqa {args.command}: a program after -- is only for submit and render"
                "\n  fix: hpcqa submit CONFIG -- python my_train.py ..."
            ),
            file=sys.stderr,
        )
        return 2
    if not program:
        print(
            errors.for_terminal(
                "hpcqa: nothing after --\n  fix: name the program every rank runs, e.g. "
                "-- python my_train.py --lr 3e-5"
            ),
            file=sys.stderr,
        )
        return 2
    if any(o.split("=", 1)[0].strip() == "job.command" for o in args.overrides):
        print(
            errors.for_terminal(
                "hpcqa: the program is given twice, by --set job.command and after --\n  fix: "
                "keep one of them"
            ),
            file=sys.stderr,
        )
        return 2
    args.overrides.append("job.command=" + json.dumps(program))
    if not any(o.strip().startswith("job.name") for o in args.overrides):
        # named after its program (run_qa, not the config's name), unless --set job.name says otherwise
        from hpcqa.core.command import program_name

        if name := program_name(program):
            args.overrides.append("job.name=" + json.dumps(name))
    return 0


def split_program(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """`hpcqa submit CONFIG [options] -- PROGRAM ARGS...`: hpcqa's arguments, and the program's (None: no --)."""
    if "--" not in argv:
        return argv, None
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1 :]


# the verbs that read or write the job registry
REGISTRY_VERBS = {"submit", "status", "logs", "cancel", "registry", "results", "scaling"}


def adopt_legacy_registry(args) -> None:
    """A registry an older hpcqa kept in this folder (logs/registry.sqlite): its jobs are copied into the user's
    default registry, with one line, when this verb uses the default (no --registry, no $HPCQA_REGISTRY)."""
    import os

    if (
        args.command not in REGISTRY_VERBS
        or getattr(args, "registry", None)
        or os.environ.get("HPCQA_REGISTRY")
    ):
        return
    if any(o.startswith("job.registry=") for o in getattr(args, "overrides", None) or ()):
        return
    from hpcqa.record import registry, registryfix

    old, copied, note = registryfix.adopt_legacy()
    if note:
        print(errors.for_terminal(f"hpcqa: {note}"), file=sys.stderr)
    elif copied:
        print(
            errors.for_terminal(
                f"hpcqa: copied {copied} job(s) from {old} (an older hpcqa's registry of this "
                f"folder) into your registry {registry.default_path()}; the old file is left "
                "as it was"
            ),
            file=sys.stderr,
        )
