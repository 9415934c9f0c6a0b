"""stdout and stderr for one run of main(): a write that fails (a full disk, /dev/full, a terminal that went away)
ends the run with one line on stderr and exit 1, a reader that left (`hpcqa ... | head`) ends it quietly; never a
traceback, nor Python's "Exception ignored" when the interpreter flushes at its exit."""

from __future__ import annotations

import os
import sys
from typing import Any, Callable, TextIO, cast

from hpcqa import errors


class OutputFailed(Exception):
    """A write to stdout or stderr failed. Not an OSError: a verb's `except OSError` is about its own files, and
    argparse's help swallows an OSError (`hpcqa --help > /dev/full` said nothing and exited 0)."""

    def __init__(self, stream: str, error: OSError) -> None:
        super().__init__(f"{stream}: {error}")
        self.stream = stream
        self.error = error


class Guarded:
    """A standard stream whose failed write or flush is an OutputFailed naming it; the rest is the stream's own."""

    def __init__(self, stream: Any, name: str) -> None:
        self._stream = stream
        self._name = name

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as e:
            raise OutputFailed(self._name, e) from e

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as e:
            raise OutputFailed(self._name, e) from e

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding, buffer ...
        return getattr(self._stream, name)


def guarded(run: Callable[[], int]) -> int:
    """run()'s exit code, with stdout and stderr guarded while it runs and flushed before this returns (buffered
    output is written here, not at the interpreter's exit where a failure could only be "Exception ignored").
    argparse's SystemExit (--help, a usage error) passes through once its output is written."""
    saved = sys.stdout, sys.stderr
    out, err = (None if s is None else Guarded(s, n) for s, n in zip(saved, ("stdout", "stderr")))
    sys.stdout, sys.stderr = cast(TextIO, out), cast(TextIO, err)
    try:
        try:
            return run()
        finally:
            for stream in (out, err):
                if stream is not None:
                    stream.flush()
    except OutputFailed as e:
        return said(e, *saved)
    finally:
        sys.stdout, sys.stderr = saved


def said(failed: OutputFailed, out: Any, err: Any) -> int:
    """The exit code for a failed write, its one line said on stderr: 0 and nothing for a closed pipe (the reader
    has what it wanted), 1 otherwise, silently when stderr is the stream that failed. The failed stream's
    descriptor is pointed at /dev/null (the recipe of Python's docs on SIGPIPE), so that what its buffer still
    holds goes there at exit instead of failing again."""
    _to_devnull(out if failed.stream == "stdout" else err)
    if isinstance(failed.error, BrokenPipeError):
        return 0
    if failed.stream == "stderr" or err is None:
        return 1
    e = failed.error
    why = f"{e.strerror} (errno {e.errno})" if e.strerror else str(e)
    try:
        err.write(errors.for_terminal(f"hpcqa: cannot write the output: {why}", err) + "\n")
        err.flush()
    except OSError:
        _to_devnull(err)
    return 1


def _to_devnull(stream: Any) -> None:
    try:
        fd = stream.fileno()
    except (AttributeError, ValueError, OSError):  # a StringIO (a test's), a closed stream
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)
