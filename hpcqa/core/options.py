"""A config field: its default, help text and bounds in the dataclass field's metadata, which the validator and the
README's config reference (hpcqa/docs.py) both read."""

from __future__ import annotations

from dataclasses import field
from typing import Any


def opt(
    default: Any,
    help: str,
    *,
    min: float | None = None,
    max: float | None = None,
    pattern: str | None = None,
    factory: bool = False,
) -> Any:
    meta = {"help": help, "min": min, "max": max, "pattern": pattern}
    if factory:
        return field(default_factory=default, metadata=meta)
    return field(default=default, metadata=meta)
