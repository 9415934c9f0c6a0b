"""The one reader of a job folder's JSON, as a careless program or a dying node may have left it: regular files
only (opened without following a link, without blocking), a size cap, numbers that are finite, nesting that
cannot exhaust the stack, an object at the top. A file that fails is damaged, with one line saying why; it is
never a traceback or a hang. The schemas (progress.py, results.py, ...) read what this gives; hpcqa.record.jobdir
names the files."""

from __future__ import annotations

import errno
import json
import math
import os
from pathlib import Path
from typing import Any, Callable, Generic, TypeVar

from hpcqa.fsutil import atomic_write_text, open_regular
from hpcqa.record.jobfiles import fields
from hpcqa.record.jobfiles.fields import Damaged

T = TypeVar("T")

MAX_JSON_BYTES = (
    64 << 20
)  # hpcqa's own files are kilobytes; a worktree manifest of 100,000 files a few MB


class _NotFinite(ValueError):
    pass


def _finite(text: str) -> float:
    x = float(text)
    if not math.isfinite(x):
        raise _NotFinite(f"{text} is not a finite number")
    return x


def _no_constant(name: str) -> Any:
    raise _NotFinite(f"{name} is not JSON's")


def read_json(path: Path | str) -> dict | None:
    """The file's JSON object, or None when it is missing, half-written, not JSON, or not what hpcqa writes there:
    every reader of a job folder goes through this, and a job's program or a dying node can leave anything there.
    Only a regular file is read (opened without following a link and without blocking, then checked: a FIFO named
    results.json would hang `status`), at most MAX_JSON_BYTES of it; numbers must be finite; the top level must be
    an object."""
    return load_json(path)[0]


def load_json(path: Path | str) -> tuple[dict | None, str | None]:
    """read_json, with why a file that is there was not read: (object, None), (None, None) when there is no file,
    (None, reason) when there is one that is damaged."""
    try:
        fd = open_regular(path)
    except FileNotFoundError:
        return None, None
    except OSError as e:
        if e.errno == errno.EINVAL and e.strerror == "not a regular file":
            return None, "not a regular file"
        return None, "a link, or not readable" if e.errno in (
            errno.ELOOP,
            errno.EACCES,
            errno.EPERM,
        ) else f"not readable ({os.strerror(e.errno or 0)})"
    except ValueError:
        return None, "not a path"
    try:
        st = os.fstat(fd)
        if st.st_size > MAX_JSON_BYTES:
            return None, f"larger than {MAX_JSON_BYTES >> 20} MiB"
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(MAX_JSON_BYTES + 1)
        if len(data) > MAX_JSON_BYTES:
            return None, f"larger than {MAX_JSON_BYTES >> 20} MiB"
        if not data.strip():
            return None, "empty (being written, or cut short)"
        got = json.loads(data, parse_float=_finite, parse_constant=_no_constant)
    except OSError as e:
        return None, f"not readable ({os.strerror(e.errno or 0)})"
    except _NotFinite:
        return None, "a number that is not finite (NaN, Infinity or 1e999)"
    except (ValueError, RecursionError):
        return None, "not JSON (cut short, or not hpcqa's)"
    finally:
        os.close(fd)
    if not isinstance(got, dict):
        return None, f"JSON, but a {type(got).__name__}, not an object"
    if _deeper_than(got, MAX_DEPTH):
        return None, f"nested deeper than {MAX_DEPTH} levels (hpcqa's files are a few)"
    return got, None


MAX_DEPTH = (
    32  # levels of objects and lists: hpcqa's files have at most 5; printing deeper ones recurses
)


def _deeper_than(obj: Any, limit: int) -> bool:
    """Whether the JSON value nests objects or lists more than `limit` deep (iterative: no recursion to run out)."""
    todo = [(obj, 1)]
    while todo:
        x, depth = todo.pop()
        if depth > limit:
            return True
        items = x.values() if isinstance(x, dict) else x if isinstance(x, list) else ()
        todo.extend((v, depth + 1) for v in items if isinstance(v, (dict, list)))
    return False


def read_as(path: Path | str, parse: Callable[[object, str], T | Damaged]) -> T | Damaged | None:
    """The file at `path` read and parsed by its schema: the value, Damaged (why, with the file's name), or None
    when there is no file."""
    got, why = load_json(path)
    name = Path(path).name
    if why is not None:
        return Damaged(name, why)
    return None if got is None else parse(got, name)


class JobFile(Generic[T]):
    """One kind of job file: its schema (a frozen dataclass), what to call it in a message, and a check beyond the
    fields' rules if it has one; read through the one reader, written held to the schema."""

    def __init__(
        self, schema: type[T], what: str, check: Callable[[T, str], T | Damaged] | None = None
    ) -> None:
        self.schema, self.what, self.check = schema, what, check

    def parse(self, obj: object, file: str | None = None) -> T | Damaged:
        got = fields.parse(self.schema, obj, file or self.what)
        if self.check is not None and not isinstance(got, Damaged):
            return self.check(got, file or self.what)
        return got

    def read(self, path: Path) -> T | Damaged | None:
        """The file at `path`: its value, Damaged (why, with its name), or None when there is none."""
        return read_as(path, self.parse)

    def write(self, path: Path, obj: object) -> Path:
        """Write `obj` (the file's fields, as a dict) atomically, after holding it to the schema: ValueError (a bug
        in hpcqa) naming the field if its readers would refuse it."""
        return atomic_write_text(path, fields.checked_text(self.schema, obj, path.name))
