"""A config file read as TOML: only a regular file of a config's size is read, and what tomllib raises on hostile
text besides its own error (a recursion, a number Python will not convert) is said as a syntax error, never a
traceback."""

from __future__ import annotations

import os
import re
import stat
import tomllib
from pathlib import Path
from typing import Any

from hpcqa.errors import ConfigError, UsageError

# a config is a page of TOML; /dev/zero or a log named by mistake is not read whole
CONFIG_MAX_BYTES = 4 << 20


class _Unreadable(Exception):
    """A config path that names something other than a config file."""


def _read_config_text(p: Path) -> str:
    """The config file's text: a regular file (a link to one is followed: configs are linked), opened without
    blocking (a FIFO would wait for a writer for ever), at most CONFIG_MAX_BYTES, UTF-8; _Unreadable otherwise."""
    fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise _Unreadable("a folder, not a file")
        if not stat.S_ISREG(st.st_mode):
            raise _Unreadable("not a regular file (a FIFO, a device or a socket)")
        data = os.read(fd, CONFIG_MAX_BYTES + 1)
        while len(data) <= CONFIG_MAX_BYTES and (
            more := os.read(fd, CONFIG_MAX_BYTES + 1 - len(data))
        ):
            data += more
    finally:
        os.close(fd)
    if len(data) > CONFIG_MAX_BYTES:
        raise _Unreadable(f"larger than {CONFIG_MAX_BYTES >> 20} MiB, which no config is")
    return data.decode("utf-8")


def _toml(text: str) -> dict[str, Any]:
    """tomllib.loads, with what it raises besides TOMLDecodeError on hostile text said as one: a value nested
    deeper than Python's recursion limit, an integer of more digits than Python converts (4,300)."""
    try:
        return tomllib.loads(text)
    except RecursionError:
        raise tomllib.TOMLDecodeError("arrays or tables nested too deeply") from None
    except tomllib.TOMLDecodeError:
        raise
    except ValueError as e:  # int('9' * 5000): "Exceeds the limit (4300 digits) for integer ..."
        raise tomllib.TOMLDecodeError(
            f"a number that cannot be read ({str(e).split(';')[0]})"
        ) from None


def read_toml(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    try:
        text = _read_config_text(p)
    except FileNotFoundError:
        raise UsageError(
            f"config file {str(p)!r} not found",
            "check the path; `hpcqa init` writes an example config here (--list: all)",
        ) from None
    except (OSError, UnicodeDecodeError, _Unreadable) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise UsageError(
            f"cannot read config {str(p)!r}: {why}", "pass a readable TOML file"
        ) from None
    try:
        return _toml(text)
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"line (\d+)", str(e))
        shown = ""
        if m and 0 < int(m.group(1)) <= len(text.splitlines()):
            shown = f": {text.splitlines()[int(m.group(1)) - 1].strip()[:60]!r}"
        raise ConfigError(
            "",
            f"TOML syntax error: {e}{shown}",
            "fix that line (strings need quotes, tables [section])",
            str(p),
        ) from None
