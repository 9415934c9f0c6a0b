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
from hpcqa.core import values

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


def markers(f: BinaryIO, want: int = 2, floor: int = 0) -> list[int]:
    """Line starts of the last `want` attempt markers, newest first (fewer when the log has fewer), read backwards
    from the end down to about `floor`."""
    size, end = _size(f), _size(f)
    found: list[int] = []
    while end > floor and len(found) < want:
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


def _marker_in(f: BinaryIO, start: int, end: int) -> bool:
    """Whether an attempt marker starts in [start, end) (read a little past `end`: a marker cut by the edge)."""
    f.seek(start)
    buf = f.read(end - start + MARKER_TAIL)
    i = buf.find(NEEDLE)
    while 0 <= i < end - start:
        if MARKER.match(buf, i):
            return True
        i = buf.find(NEEDLE, i + 1)
    return False


def marker_before(f: BinaryIO, stop: int) -> bool:
    """Whether an attempt marker starts before byte `stop`. Read a block at a time from both ends, alternately: from
    the file's start (the first attempt's marker is among a rank's first lines) and backwards from `stop` (the
    attempt before is the nearest), so the cost is the nearer of the two, not the whole of the attempts before."""
    lo, hi = 0, stop
    while lo < hi:
        if _marker_in(f, lo, min(lo + BLOCK, hi)):
            return True
        lo += BLOCK
        if lo < hi:
            if _marker_in(f, max(lo, hi - BLOCK), hi):
                return True
            hi -= BLOCK
    return False


def attempt_offset(f: BinaryIO, after: int = 0) -> int:
    """Where the current attempt's lines start: its marker when there are two or more attempts, else the file's
    start (what a first attempt printed before its marker, imports and warnings, is its own). `after`: only a
    marker that starts at or past it matters (the last lines asked for start there), so only that much is read
    backwards; 0 when the last marker is before it."""
    found = markers(f, 1, floor=after)
    if not found or found[0] < after:
        return 0
    return found[0] if marker_before(f, found[0]) else 0


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
    if lines <= 0:
        return 0 if all_attempts else attempt_offset(f)
    tail = tail_offset(
        f, lines
    )  # the last lines first: then only a marker among them can start later
    return tail if all_attempts else max(tail, attempt_offset(f, after=tail))


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


MAX_TEXT = (
    64 << 20
)  # what text() returns at most: the log's end, the rest left to `hpcqa logs` and the file


def text(path: Path, lines: int = 0, all_attempts: bool = True, limit: int = MAX_TEXT) -> str:
    """A rank's log as text, read as `hpcqa logs` reads it (open_log, start_offset): its last `lines` lines (0: all),
    of every attempt or the current one; at most `limit` bytes from its end, the cut said in the first line. OSError
    naming why for a file that is not the regular one a job writes (a FIFO, a link, a folder)."""
    with open_log(path) as f:
        start = start_offset(f, lines, all_attempts)
        end = f.seek(0, 2)
        cut = max(start, end - limit)
        f.seek(cut)
        body = f.read(end - cut)
    if cut > start:  # from the first whole line after the cut
        body = body[body.find(b"\n") + 1 :]
        head = f"[hpcqa: the log's first {end - len(body) - start} bytes left out; the whole log: {path}]\n"
        return head + body.decode("utf-8", errors="replace")
    return body.decode("utf-8", errors="replace")


def last_lines(path: Path, n: int) -> list[str]:
    """The log's last `n` lines ([] when it cannot be read: a FIFO, a link, gone)."""
    try:
        return text(path, n, limit=1 << 20).splitlines()[-n:]
    except OSError:
        return []


# What a log may send a terminal: the line ends and tabs, a progress bar's \r, colours and what progress bars draw
# with -- cursor moves (CSI n A-H) and erasing the rest of a line or of the screen below (CSI K, CSI J). Anything else
# a program printed -- OSC (8: links, 52: the clipboard, 0/2: the title), DCS, device queries (CSI 6n makes the
# terminal type a reply into the shell), clearing the whole screen (CSI 2J, 3J: hides what came before), C1
# controls, a backspace that overwrites, bidi overrides -- is spelled out.
_TERMINAL_SAFE = re.compile(
    r"(\x1b\[(?:[0-9;]{0,32}[A-Hm]|[01]?[JK]|2K))|((?![\t\n\r])" + values.CONTROL.pattern + ")"
)


def for_terminal(text: str) -> str:
    """A log's text as `hpcqa logs` writes it to a terminal (piped, the bytes go as they are, as with `cat`)."""
    return _TERMINAL_SAFE.sub(lambda m: m.group(1) or values.shown(m.group(2)), text)
