"""A config file read as TOML: only a regular file of a config's size is read, and what tomllib raises on hostile
text besides its own error (a recursion, a number Python will not convert) is said as a syntax error, never a
traceback. And a config written back as TOML (to_toml: the config a pod is given, a snapshot)."""

from __future__ import annotations

import errno
import json
import math
import re
import tomllib
from pathlib import Path
from typing import Any

from hpcqa import fsutil
from hpcqa.errors import ConfigError, UsageError

# a config is a page of TOML; /dev/zero or a log named by mistake is not read whole
CONFIG_MAX_BYTES = 4 << 20


class _Unreadable(Exception):
    """A config path that names something other than a config file."""


def _read_config_text(p: Path) -> str:
    """The config file's text, through the one door (fsutil.read_text): a regular file (a link to one is followed:
    configs are linked), never blocking (a FIFO would wait for a writer for ever), at most CONFIG_MAX_BYTES,
    UTF-8; _Unreadable otherwise."""
    if p.is_dir():
        raise _Unreadable("a folder, not a file")
    try:
        return fsutil.read_text(p, CONFIG_MAX_BYTES, follow=True)
    except OSError as e:
        if e.errno == errno.EINVAL and e.strerror == "not a regular file":
            raise _Unreadable("not a regular file (a FIFO, a device or a socket)") from None
        if e.errno == errno.EFBIG:
            raise _Unreadable(
                f"larger than {CONFIG_MAX_BYTES >> 20} MiB, which no config is"
            ) from None
        raise


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


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)  # a JSON string is a valid TOML basic string
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + "}"
    return repr(v)


_NUMBER = re.compile(r"[+-]?\d+(\.\d+)?([eE][+-]?\d+)?")


def meant(value: Any) -> list[tuple[Any, str]]:
    """What a value of the wrong type was likely meant as, with how TOML writes it: a quoted number ("3", "1e-4")
    its number, a quoted "true"/"false" its boolean, a whole float (2.0) its integer. [] for anything else."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return [(int(value), str(int(value)))]
    if not isinstance(value, str):
        return []
    text = value.strip()
    if text.lower() in ("true", "false"):
        return [(text.lower() == "true", text.lower())]
    if not _NUMBER.fullmatch(text) or len(text) > 40:
        return []
    number = float(text)
    out: list[tuple[Any, str]] = [(int(text), text)] if text.lstrip("+-").isdigit() else []
    return [*out, (number, text)] if math.isfinite(number) else out


def to_toml(cfg: Any) -> str:
    """Serialise a Config back to TOML (config snapshots in job folders)."""
    lines = []
    for name, section in cfg.to_dict().items():
        lines.append(f"[{name}]")
        for k, v in section.items():
            if isinstance(v, dict):
                inner = ", ".join(f"{_toml_key(a)} = {toml_value(b)}" for a, b in v.items())
                lines.append(f"{k} = {{{inner}}}")
            else:
                lines.append(f"{k} = {toml_value(v)}")
        lines.append("")
    return "\n".join(lines)


def _toml_key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else toml_value(k)
