"""How the CLI talks: progress lines and warnings on stderr, wrapped at a terminal; lines of text on stdout. Each
spells out the control characters of what it repeats (text.shown: a name that came from outside is text, never an
escape sequence sent to the terminal). A single name (a path) is spelled out whole where it enters a message, with
shown(), so that a line break in it cannot start a line of its own."""

from __future__ import annotations

import sys

from hpcqa import errors
from hpcqa.text import shown_lines


def say(line: str) -> None:
    print(errors.for_terminal(line), file=sys.stderr)


def tell(text: str) -> None:
    """Lines of text on stdout (not JSON, a script or CSV, which go as they are): control characters spelled out,
    line breaks kept."""
    print(shown_lines(text))


def warn(note: str) -> None:
    print(errors.for_terminal(f"warning: {note}"), file=sys.stderr)


def stop_like_ctrl_c(signum, frame) -> None:
    raise KeyboardInterrupt
