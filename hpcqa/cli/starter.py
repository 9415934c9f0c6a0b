"""init: an example config or program this hpcqa carries (package data), written into the current folder to edit."""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

from hpcqa import resources
from hpcqa.cli.outfile import output_target, write_whole
from hpcqa.cli.say import tell
from hpcqa.errors import UsageError
from hpcqa.text import shown


def summary(path: Path, width: int = 58) -> str:
    """What the example is: the first sentence of its leading comment (a config) or docstring (a program), cut at a
    word to fit a line."""
    text = resources.read_text(path)
    if path.suffix == ".py":
        try:
            words = (ast.get_docstring(ast.parse(text)) or "").split()
        except (SyntaxError, ValueError):
            words = []
    else:
        words = []
        for line in text.splitlines():
            if not line.startswith("#"):
                break
            words += line.lstrip("#").split()
    text = " ".join(words)
    text = text.split(": ")[0].split(". ")[0].rstrip(".")
    if len(text) > width:
        text = text[:width].rsplit(" ", 1)[0] + " ..."
    return text


def cmd_init(args: argparse.Namespace) -> int:
    configs, programs = resources.example_configs(), resources.example_programs()
    if args.list:
        for name, path in {**configs, **programs}.items():
            tell(f"{name:18} {summary(path)}")
        return 0
    name = args.example
    if name not in configs and name not in programs:
        raise UsageError(
            f"no example {name!r}",
            f"one of: {', '.join([*configs, *programs])} (hpcqa init --list says what each is)",
        )
    src = configs.get(name) or programs[name]
    file_name = src.name
    if args.output == "-":  # as render: "-" is stdout, never a file named "-"
        sys.stdout.write(resources.read_text(src))
        return 0
    out = Path(args.output or file_name)
    if out.is_dir() and not out.is_symlink():
        out = out / file_name
    output_target(out, suffixes=(src.suffix,))
    write_whole(out, resources.read_text(src), args.force)
    named = shown(out)  # the path given with -o, spelled out whole
    tell(f"wrote {named} (the example {name!r}: {summary(src)})")
    if name in configs:
        tell(f"next: hpcqa submit {named} --dry-run     (then without --dry-run to run it)")
    else:
        tell(f"next: hpcqa submit quickstart.toml -- python {named}")
        tell("  (the config: hpcqa init quickstart; the program's arguments: its docstring)")
    return 0
