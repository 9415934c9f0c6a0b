"""The one reader of a job folder's JSON, as a careless program or a dying node may have left it: regular files
only (opened without following a link, without blocking), a size cap, numbers that are finite, nesting that
cannot exhaust the stack, an object at the top. A file that fails is damaged, with one line saying why; it is
never a traceback or a hang. The schemas (progress.py, results.py, ...) read what this gives; hpcqa.record.jobdir
names the files."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Generic, TypeVar

from hpcqa import fsutil
from hpcqa.fsutil import atomic_write_text
from hpcqa.record.jobfiles import fields
from hpcqa.record.jobfiles.fields import Damaged

T = TypeVar("T")

MAX_JSON_BYTES, MAX_DEPTH = fsutil.MAX_JSON_BYTES, fsutil.MAX_DEPTH


def read_json(path: Path | str) -> dict | None:
    """The file's JSON object, or None when it is missing, half-written, not JSON, or not what hpcqa writes there:
    every reader of a job folder goes through this (fsutil.load_json: a regular file, not a link, never blocking,
    at most MAX_JSON_BYTES, finite numbers, an object at the top)."""
    return fsutil.load_json(path)[0]


def load_json(path: Path | str) -> tuple[dict | None, str | None]:
    """read_json, with why a file that is there was not read: (object, None), (None, None) when there is no file,
    (None, reason) when there is one that is damaged."""
    return fsutil.load_json(path)


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
