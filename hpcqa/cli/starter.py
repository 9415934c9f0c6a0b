"""init: an example config this hpcqa carries (package data), written into the current folder to edit."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from hpcqa import resources
from hpcqa.errors import UsageError


def summary(path: Path, width: int = 58) -> str:
    """What the example is: the first sentence of its leading comment, cut at a word to fit a line."""
    words = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        words += line.lstrip("#").split()
    text = " ".join(words)
    text = text.split(": ")[0].split(". ")[0].rstrip(".")
    if len(text) > width:
        text = text[:width].rsplit(" ", 1)[0] + " ..."
    return text


def cmd_init(args: argparse.Namespace) -> int:
    examples = resources.example_configs()
    if args.list:
        for name, path in examples.items():
            print(f"{name:18} {summary(path)}")
        return 0
    if args.example not in examples:
        raise UsageError(f"no example config {args.example!r}",
                         f"one of: {', '.join(examples)} (hpcqa init --list says what each is)")
    out = Path(args.output or f"{args.example}.toml")
    if out.is_dir():
        out = out / f"{args.example}.toml"
    text = examples[args.example].read_text(encoding="utf-8")
    try:
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if args.force else os.O_EXCL), 0o644)
    except FileExistsError:
        raise UsageError(f"{out} exists: nothing was written", "edit it, pass -o OTHER.toml, or --force to replace it") \
            from None
    except OSError as e:
        raise UsageError(f"cannot write {out}: {e.strerror or e}", "pass -o with a writable path") from None
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {out} (the example {args.example!r}: {summary(examples[args.example])})")
    print(f"next: hpcqa submit {out} --dry-run     (then without --dry-run to run it)")
    return 0
