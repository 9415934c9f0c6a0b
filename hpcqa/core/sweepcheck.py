"""What a sweep's variants may not do, each refused naming its sweep key before anything is queued. Pure.

- Repeated: two variants whose values are equal as the validated config holds them (3e-5 and 0.00003, 2 and 2.0)
  are one run queued twice. Refused, not merged: task indices and array sizes stay what the sweep lists.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Sequence

from hpcqa.errors import ConfigError


def canonical(value: Any) -> Any:
    """A value as comparable data: numbers as numbers (3e-05 and 0.00003, 2 and 2.0 are one; true is not 1)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    if isinstance(value, bool) or value is None:
        return ("flag", value)
    if isinstance(value, (int, float)):
        return ("number", value)
    if isinstance(value, Mapping):
        return ("table", tuple(sorted((str(k), canonical(v)) for k, v in value.items())))
    if isinstance(value, (list, tuple)):
        return ("list", tuple(canonical(v) for v in value))
    return ("text", value)


def held(cfg: Any, key: str) -> Any:
    """The value a validated config holds at a dotted key (None where it holds none)."""
    node = cfg
    for part in key.split("."):
        node = node.get(part) if isinstance(node, Mapping) else getattr(node, part, None)
    return node


def _shown(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _where(params: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={_shown(v)}" for k, v in params.items()) or "nothing (the base config)"


def check_repeats(
    variants: Sequence[Any], grid: Mapping[str, list], keys: Sequence[str], source: str = ""
) -> None:
    """No two variants are one run: equal at every swept key as the validated config holds it (the rest is the
    base config, the same in both)."""
    seen: dict[Any, Any] = {}
    for v in variants:
        mark = tuple(canonical(held(v.config, k)) for k in keys)
        if mark in seen:
            raise _repeated(seen[mark], v, grid, source)
        seen[mark] = v


def _positions(index: int, grid: Mapping[str, list]) -> dict[str, int]:
    """A grid variant's entry on each axis (the product's order: the last axis fastest)."""
    out = {}
    for key in reversed(list(grid)):
        index, out[key] = divmod(index, len(grid[key]))
    return out


def _repeated(first: Any, again: Any, grid: Mapping[str, list], source: str) -> ConfigError:
    size = math.prod(len(v) for v in grid.values()) if grid else 0  # the grid's variants come first
    if again.index < size:  # both of the grid: an axis lists one value twice
        p, q = _positions(first.index, grid), _positions(again.index, grid)
        axis = next(k for k in grid if p[k] != q[k])
        return ConfigError(
            f"sweep.{axis}",
            f"lists one value twice: {_shown(grid[axis][p[axis]])} (entry {p[axis]}) and "
            f"{_shown(grid[axis][q[axis]])} (entry {q[axis]}) are equal as {axis}, so variants {first.index} "
            f"and {again.index} would be one run queued twice",
            f"remove the duplicate from sweep.{axis}",
            source,
        )
    entry = again.index - size
    what = (
        f"[[sweep.variants]] entry {first.index - size}"
        if first.index >= size
        else f"the grid's variant {first.index}"
    ) + (f" ({_where(first.params)})" if first.params else "")
    return ConfigError(
        f"sweep.variants[{entry}]",
        f"sets {_where(again.params)}: the same run as {what}, it would be queued twice",
        f"remove the duplicate [[sweep.variants]] entry {entry}, or change one of its values",
        source,
    )
