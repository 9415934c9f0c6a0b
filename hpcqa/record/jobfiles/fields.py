"""The field rules every job file is read with, in one place: a file's schema is a frozen dataclass whose fields are
its keys and whose annotations are the rules (a number that is not a bool, a count 0-1e12, seconds in range, text,
a list of text, a nested object), and `build` reads an object into it or says which field is wrong and why.

Missing and null are the same (the field's default). Keys the schema does not name are kept, unchecked, in the
value's `extra` (they reach `--json` and the API as JSON, never a view). Writers build the same values and write
`to_json`, so the rank and the readers share one schema.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from functools import cache
from typing import Annotated, Any, TypeVar

from hpcqa import text

T = TypeVar("T")

MAX_STEPS = 10**12
MAX_SECONDS = 10**11  # an ETA, a duration or a Unix time: about 3,000 years
MAX_INT = 2**63
MAX_TEXT = 1 << 18  # characters: an argument (the kernel takes 128 KiB), an error, a host, a path
MAX_ITEMS = 1 << 16  # a list's items or an object's keys: CPUs, buckets, a checkpoint's files


@dataclasses.dataclass(frozen=True)
class Range:
    """A number's bounds (inclusive) and what a number in them is, for the message."""

    low: float
    high: float
    what: str


Count = Annotated[int, Range(0, MAX_STEPS, f"a step count (a whole number 0-{MAX_STEPS:.0e})")]
Seconds = Annotated[float, Range(0, MAX_SECONDS, "in range (0 to 1e11 seconds)")]
Amount = Annotated[float, Range(0, float("inf"), "a number >= 0")]
Score = Annotated[float, Range(0, 100, "a score (0-100)")]  # SQuAD's EM and F1 are percentages
JSON = Any  # any JSON value, kept as read (the reader has already refused NaN, Infinity and deep nesting)


def key(name: str) -> dict:
    """A field whose JSON key is not a Python name: `field(metadata=key("class"))`."""
    return {"key": name}


@dataclasses.dataclass(frozen=True)
class Damaged:
    """A job file that is there but was not used, and why (one line, no control characters)."""

    file: str
    why: str

    def __str__(self) -> str:
        return f"{self.file}: {self.why}"


class Record:
    """A schema's value: `to_json` gives the file's JSON back (fields set, then the keys kept in `extra`)."""

    def to_json(self) -> dict:
        return to_json(self)


class Bad(ValueError):
    """A field that breaks its rule; the message names it (dotted, from the file's top) and the value."""


def shown(v: object) -> str:
    """A value as the message quotes it: JSON, control characters escaped, at most 24 characters."""
    if isinstance(v, (list, dict)) and len(v) > 8:
        return f"[{len(v)} items]" if isinstance(v, list) else f"{{{len(v)} keys}}"
    said = json.dumps(v, default=str)[:25]
    return said if len(said) <= 24 else said[:23] + "…"


@cache
def _hints(cls: Any) -> dict[str, Any]:
    return typing.get_type_hints(cls, include_extras=True)


def build(cls: type[T], obj: object, at: str = "") -> T:
    """`obj` read into the dataclass `cls`, every field checked by its annotation; Bad names the first that is not
    what its rule says."""
    if not isinstance(obj, dict):
        raise Bad(f"{at.rstrip('.') or 'the file'} is {_kind(obj)}, not an object")
    hints, kw, known = _hints(cls), {}, set()  # type: ignore[arg-type]
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name == "extra":
            continue
        name = f.metadata.get("key", f.name)
        known.add(name)
        v = obj.get(name)
        if v is None:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise Bad(f"{at}{name} is missing")
            continue
        kw[f.name] = value(hints[f.name], v, at + name)
    if "extra" in hints:
        kw["extra"] = {k: v for k, v in obj.items() if k not in known}
    return cls(**kw)


def value(tp: Any, v: object, at: str) -> Any:
    """`v` checked against the annotation `tp` (see the module's docstring), converted to its frozen form."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Annotated:
        got = value(args[0], v, at)
        rule = next((a for a in args[1:] if isinstance(a, Range)), None)
        if rule and not rule.low <= got <= rule.high:
            raise Bad(f"{at} {shown(v)} is not {rule.what}")
        return got
    if origin in (typing.Union, types.UnionType):
        if v is None and type(None) in args:
            return None
        wrong = None
        for member in (a for a in args if a is not type(None)):
            try:
                return value(member, v, at)
            except Bad as e:
                wrong = wrong or e
        raise wrong or Bad(f"{at} {shown(v)} is not allowed")
    if tp is Any:
        return v
    if origin is tuple:
        if not isinstance(v, list):
            raise Bad(f"{at} {shown(v)} is not a list")
        if len(v) > MAX_ITEMS:
            raise Bad(f"{at} has {len(v)} items, more than any hpcqa writes ({MAX_ITEMS})")
        return tuple(value(args[0], x, f"{at}[{i}]") for i, x in enumerate(v))
    if origin is dict:
        if not isinstance(v, dict):
            raise Bad(f"{at} {shown(v)} is not an object")
        if len(v) > MAX_ITEMS:
            raise Bad(f"{at} has {len(v)} keys, more than any hpcqa writes ({MAX_ITEMS})")
        return {k: value(args[1], x, f"{at}.{text.shown(k)[:80]}") for k, x in v.items()}
    if dataclasses.is_dataclass(tp):
        return build(tp, v, at + ".")  # type: ignore[arg-type]
    return _scalar(tp, v, at)


def _scalar(tp: type, v: object, at: str) -> Any:
    if tp is bool:
        if isinstance(v, bool):
            return v
        raise Bad(f"{at} {shown(v)} is not true or false")
    if tp is str:
        if isinstance(v, str) and len(v) <= MAX_TEXT:
            return v
        if isinstance(v, str):
            raise Bad(f"{at} is {len(v)} characters long, more than any hpcqa writes ({MAX_TEXT})")
        raise Bad(f"{at} {shown(v)} is not text")
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise Bad(f"{at} {shown(v)} is not a number")
    if tp is int:
        if isinstance(v, int) and -MAX_INT < v < MAX_INT:
            return v
        raise Bad(f"{at} {shown(v)} is not a whole number")
    if (
        tp is float
    ):  # an int stays one (3 is written back as 3); one past a float's range is not a number here
        if (abs(v) < 1e308) if isinstance(v, int) else math.isfinite(v):
            return v
        raise Bad(f"{at} {shown(v)} is not a finite number")
    raise TypeError(f"no rule for {tp!r} ({at})")  # a schema's mistake, not the file's


def _kind(v: object) -> str:
    return {list: "a list", str: "text", bool: "true or false", type(None): "null"}.get(
        type(v), "a number"
    )


def to_json(x: Any) -> Any:
    """A schema value as JSON again: its fields that are set (None and a default are left out), then its `extra`
    keys."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(x):
            v = getattr(x, f.name)
            if f.name != "extra" and v is not None and not _is_default(f, v):
                out[f.metadata.get("key", f.name)] = to_json(v)
        out.update(getattr(x, "extra", {}) or {})
        return out
    if isinstance(x, (tuple, list)):
        return [to_json(v) for v in x]
    if isinstance(x, dict):
        return {k: to_json(v) for k, v in x.items()}
    return x


def _is_default(f: dataclasses.Field, v: object) -> bool:
    if f.default_factory is not dataclasses.MISSING:
        return v == f.default_factory()
    return f.default is not dataclasses.MISSING and v == f.default and type(v) is type(f.default)


def parse(cls: type[T], obj: object, file: str) -> T | Damaged:
    """`obj` (what the reader gave) as `cls`, or Damaged naming `file` and the field."""
    try:
        return build(cls, obj)
    except Bad as e:
        return Damaged(file, str(e))


def number(v: object) -> int | float | None:
    """`v` when it is a number (an int or a float, never a bool), else None: for files of other programs read with
    no schema of ours (the Trainer's trainer_state.json)."""
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def checked_text(cls: type, obj: Any, file: str) -> str:
    """What a writer is about to write, as the JSON text it becomes, held to the schema its readers use: the text,
    or ValueError (a bug in hpcqa, never the user's) naming the field. Keys the schema does not name pass (extra)."""
    said = json.dumps(obj, indent=2, sort_keys=True, default=_as_json)
    got = parse(cls, json.loads(said), file)
    if isinstance(got, Damaged):
        raise ValueError(f"hpcqa would write a {file} its readers refuse: {got.why}")
    return said


def _as_json(o: object) -> object:
    """What json.dumps cannot write itself: a schema's value as its JSON (a notice read back and written again),
    anything else (a path) as text."""
    return o.to_json() if isinstance(o, Record) else str(o)
