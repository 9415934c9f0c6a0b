"""Read-only containers for values that cross process boundaries (the config, the launch plan)."""

from __future__ import annotations

from typing import Any, NoReturn


class FrozenDict(dict):
    """A dict that refuses mutation and hashes by content.

    A dict subclass rather than MappingProxyType so that json, dataclasses.asdict and pickle keep
    working on it unchanged.
    """

    def _readonly(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError("read-only mapping (part of a frozen config or plan)")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _readonly  # type: ignore
    __ior__ = _readonly  # type: ignore

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(sorted(self.items())))

    def __reduce__(self):
        return (FrozenDict, (dict(self),))

    def __copy__(self) -> "FrozenDict":
        return self

    def __deepcopy__(self, memo: dict) -> "FrozenDict":
        return self


def freeze(value: Any) -> Any:
    """Deep-freeze JSON-like data: dicts -> FrozenDict, lists -> tuples."""
    if isinstance(value, dict):
        return FrozenDict((k, freeze(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    return value
