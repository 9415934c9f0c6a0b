"""How the CLI talks while it works: progress lines and warnings on stderr, wrapped at a terminal."""

from __future__ import annotations

import sys

from hpcqa import errors


def say(line: str) -> None:
    print(errors.for_terminal(line), file=sys.stderr)


def warn(note: str) -> None:
    print(errors.for_terminal(f"warning: {note}"), file=sys.stderr)


def stop_like_ctrl_c(signum, frame) -> None:
    raise KeyboardInterrupt


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")
