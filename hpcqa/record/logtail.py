"""Where `hpcqa logs` starts printing a rank's log, found from the file's end in bounded memory.

A log can be gigabytes (a program that prints every step, a job requeued many times). Reading it whole to print
its last lines cost 3x the file in memory; these functions read it backwards in 1 MiB blocks and only ever hold
one block, so the cost is the part that is printed, not the file.
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path
from typing import BinaryIO

from hpcqa import fsutil

BLOCK = 1 << 20
NEEDLE = b"] attempt "
MARKER = re.compile(
    rb"\] attempt \d+ starts(?:\r?\n|$)"
)  # the rank's own line as each attempt starts
MARKER_TAIL = 40  # bytes after NEEDLE that a marker can need (digits, " starts", the newline)


def _size(f: BinaryIO) -> int:
    f.seek(0, 2)
    return f.tell()


def line_start(f: BinaryIO, offset: int) -> int:
    """The offset of the start of the line that holds byte `offset`."""
    end = offset
    while end > 0:
        start = max(0, end - BLOCK)
        f.seek(start)
        i = f.read(end - start).rfind(b"\n")
        if i >= 0:
            return start + i + 1
        end = start
    return 0


def markers(f: BinaryIO, want: int = 2) -> list[int]:
    """Line starts of the last `want` attempt markers, newest first (fewer when the log has fewer)."""
    size, end, found = _size(f), _size(f), []
    while end > 0 and len(found) < want:
        start = max(0, end - BLOCK)
        f.seek(start)
        buf = f.read(
            min(end + MARKER_TAIL, size) - start
        )  # a little past `end`: a marker cut by the block edge
        i = min(end - start, len(buf))
        while len(found) < want:
            i = buf.rfind(
                NEEDLE, 0, i + len(NEEDLE) - 1
            )  # a needle that starts before i (rfind: wholly inside)
            if i < 0:
                break
            if MARKER.match(buf, i):
                nl = buf.rfind(b"\n", 0, i)
                found.append(start + nl + 1 if nl >= 0 or start == 0 else line_start(f, start))
        end = start
    return found


def attempt_offset(f: BinaryIO) -> int:
    """Where the current attempt's lines start: its marker when there are two or more attempts, else the file's
    start (what a first attempt printed before its marker, imports and warnings, is its own)."""
    found = markers(f, 2)
    return found[0] if len(found) > 1 else 0


def tail_offset(f: BinaryIO, lines: int) -> int:
    """Where the last `lines` lines start (a final newline ends the last line, it does not start another)."""
    size = _size(f)
    end, seen = size, 0
    if size:
        f.seek(size - 1)
        if f.read(1) == b"\n":
            end = size - 1
    pos = end
    while pos > 0:
        start = max(0, pos - BLOCK)
        f.seek(start)
        buf = f.read(pos - start)
        i = len(buf)
        while True:
            i = buf.rfind(b"\n", 0, i)
            if i < 0:
                break
            seen += 1
            if seen == lines:
                return start + i + 1
        pos = start
    return 0


def start_offset(f: BinaryIO, lines: int = 0, all_attempts: bool = False) -> int:
    """`hpcqa logs`' first byte: the current attempt's start (unless all_attempts), then its last `lines` lines."""
    begin = 0 if all_attempts else attempt_offset(f)
    return max(begin, tail_offset(f, lines)) if lines > 0 else begin


def open_log(path: Path) -> BinaryIO:
    """A rank's log, opened for reading only if it is the regular file a job writes: not a link (a program could
    point it at /dev/zero, which never ends, or at another user's file), not a folder or a FIFO. OSError naming why
    otherwise."""
    try:
        return os.fdopen(fsutil.open_regular(path), "rb")
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise OSError(e.errno, "a link, not the file the job wrote") from None
        raise
