"""Error types, and how a message reaches a person. Only the CLI turns errors into messages and exit codes.

Messages at a terminal are wrapped to its width, continuation lines indented under the text (for_terminal). Piped
or redirected output (scripts, `grep`, the ranks' logs) keeps one line per message. Words are never broken, so a
path or a value longer than a line stays whole on a line of its own and can be copied."""

from __future__ import annotations

import os
import sys
import textwrap
from typing import TextIO

from hpcqa.text import shown


class HpcqaError(Exception):
    """Base of every error hpcqa raises on purpose; exit code 2 means bad input."""

    exit_code = 1

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def render(self) -> str:
        text = f"error: {self.message}"
        if self.hint:
            text += f"\n  fix: {self.hint}"
        return text


class ConfigError(HpcqaError):
    """A config file, a --set override or a value in them is wrong."""

    exit_code = 2

    def __init__(self, key: str, message: str, hint: str = "", source: str = "") -> None:
        # the source is a file name no check refuses: spelled out whole, a line break in it too
        where = ": ".join(p for p in (shown(source), key) if p)
        super().__init__(f"{where}: {message}" if where else message, hint)
        self.key = key
        self.source = source
        self.detail = message


class UsageError(HpcqaError):
    """Bad command-line input that is not a config key (missing file, bad flag value)."""

    exit_code = 2


class PlanError(HpcqaError):
    """The config is valid but cannot be laid out (e.g. not enough cores)."""

    exit_code = 2


class DistEnvError(HpcqaError):
    """The launcher's environment is malformed or inconsistent."""

    exit_code = 2


class SubmitError(HpcqaError):
    """The scheduler refused or failed a submission."""

    exit_code = 1


class SchedulerUnreachable(HpcqaError):
    """The scheduler's controller does not answer: nothing was submitted."""

    exit_code = 2


class JobFailed(HpcqaError):
    """A job ran and failed."""

    exit_code = 1


class RankError(HpcqaError):
    """A rank cannot run the plan it was given (backend missing on this node, plan mismatch)."""

    exit_code = 2


class RegistryError(HpcqaError):
    """The job registry file is missing its place, damaged, or not a registry."""

    exit_code = 2


# ------------------------------------------------------------------ messages for a person


def terminal_width(stream: TextIO | None = None) -> int | None:
    """The terminal's columns, or None when `stream` is not a terminal (no wrapping)."""
    stream = stream or sys.stderr
    try:
        if not stream.isatty():
            return None
    except (AttributeError, ValueError):
        return None
    return max(_columns(), 40)


def _columns() -> int:
    """shutil.get_terminal_size's rule ($COLUMNS, else the terminal of stdout, else 80) without importing shutil
    (and the archive modules it pulls in) on `hpcqa --help`'s path."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            out = sys.__stdout__  # None under pythonw and some embedders
            columns = os.get_terminal_size(out.fileno()).columns if out is not None else 0
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


def fit(text: str, first: str = "", indent: str = "  ", columns: int | None = None) -> str:
    """`first` + `text`, wrapped at `columns` (None: unwrapped), later lines indented by `indent`."""
    if columns is None:
        return first + text
    return "\n".join(
        textwrap.wrap(
            first + text,
            columns,
            subsequent_indent=indent,
            break_long_words=False,
            break_on_hyphens=False,
            replace_whitespace=False,
            drop_whitespace=True,
        )
        or [first.rstrip()]
    )


def for_terminal(text: str, stream: TextIO | None = None) -> str:
    """A multi-line message (an error and its `  fix:` line): each line wrapped and indented past its label, and
    each control character in it spelled out (a message names what the user or a job folder gave: a job id that is
    an escape sequence reaches the terminal as text, not as a command to it)."""
    columns = terminal_width(stream)
    out = []
    for line in text.split("\n"):
        line = shown(line)
        body = line.lstrip(" ")
        lead = line[: len(line) - len(body)]
        label, sep, rest = body.partition(": ")
        if sep and len(label) <= 12 and " " not in label:  # "error: ", "fix: ", "warning: "
            out.append(fit(rest, f"{lead}{label}: ", lead + " " * (len(label) + 2), columns))
        else:
            out.append(fit(body, lead, lead + "  ", columns))
    return "\n".join(out)
