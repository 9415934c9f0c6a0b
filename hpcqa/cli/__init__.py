"""hpcqa command line: the only package that prints tables or turns errors into exit codes. Split by verb group:

    parser.py   the grammar (every verb, option and help)
    say.py      progress lines and warnings on stderr
    submit.py   submit: the dry run and the submission
    render.py   render: standalone scripts, the PyTorchJob, its Dockerfile
    machine.py  stage, tune, scaling, topology, env, hosts, validate, doctor
    jobs.py     status, logs, cancel, registry, results

Heavy modules (torch, transformers, datasets) are never imported here (each verb imports what it needs when it
runs); the training side imports them inside the ranks.
"""

from __future__ import annotations

import difflib
import json
import sys
from typing import Sequence

from hpcqa import errors
from hpcqa.errors import HpcqaError
from hpcqa.cli.parser import build_parser
from hpcqa.cli.submit import cmd_submit
from hpcqa.cli.render import cmd_render
from hpcqa.cli.machine import (cmd_doctor, cmd_env, cmd_hosts, cmd_scaling, cmd_stage, cmd_topology, cmd_tune,
                               cmd_validate)
from hpcqa.cli.jobs import cmd_cancel, cmd_logs, cmd_registry, cmd_results, cmd_status


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if argv and not argv[0].startswith("-") and argv[0] not in COMMANDS:
        close = difflib.get_close_matches(argv[0], list(COMMANDS), n=1, cutoff=0.6)
        print(errors.for_terminal(f"hpcqa: no command {argv[0][:40]!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
                               + "\n  fix: hpcqa --help lists the commands"), file=sys.stderr)
        return 2
    argv, program = split_program(argv)
    args = parser.parse_args(argv)
    if program is not None:
        if args.command not in ("submit", "render"):
            print(errors.for_terminal(f"hpcqa {args.command}: a program after -- is only for submit and render"
                                      "\n  fix: hpcqa submit CONFIG -- python my_train.py ..."), file=sys.stderr)
            return 2
        if not program:
            print(errors.for_terminal("hpcqa: nothing after --\n  fix: name the program every rank runs, e.g. "
                                      "-- python my_train.py --lr 3e-5"), file=sys.stderr)
            return 2
        args.overrides.append("job.command=" + json.dumps(program))
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


def split_program(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """`hpcqa submit CONFIG [options] -- PROGRAM ARGS...`: hpcqa's arguments, and the program's (None: no --)."""
    if "--" not in argv:
        return argv, None
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1:]


COMMANDS = {"submit": cmd_submit, "render": cmd_render, "stage": cmd_stage, "env": cmd_env, "topology": cmd_topology,
            "tune": cmd_tune, "registry": cmd_registry, "hosts": cmd_hosts, "validate": cmd_validate,
            "status": cmd_status, "logs": cmd_logs, "cancel": cmd_cancel, "doctor": cmd_doctor, "results": cmd_results,
            "scaling": cmd_scaling}
